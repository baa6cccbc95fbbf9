package cuda

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestEmulatorCacheVerified: the cached emulator library is handed out
// only as it was built: one truncated (dlopen of it died with SIGBUS), one
// changed in place, one without its checksum (a cache of an earlier build)
// or with a damaged one is rebuilt; a whole one is not.
func TestEmulatorCacheVerified(t *testing.T) {
	base := t.TempDir()
	content := bytes.Repeat([]byte("\x7fELF emulator "), 4096)
	builds := 0
	build := func(dir string) (string, error) {
		builds++
		lib := filepath.Join(dir, emuLibName)
		return lib, os.WriteFile(lib, content, 0o755)
	}
	lib, err := cachedEmulator(base, build)
	if err != nil || builds != 1 {
		t.Fatalf("first use: %v, %d builds", err, builds)
	}
	whole := func() {
		t.Helper()
		got, err := os.ReadFile(lib)
		if err != nil || !bytes.Equal(got, content) || verifyEmulator(lib) != nil {
			t.Fatalf("the library handed out is not as built: %v, %v", err, verifyEmulator(lib))
		}
	}
	whole()
	sum := filepath.Join(filepath.Dir(lib), emuSumName)
	for _, tc := range []struct {
		name   string
		damage func()
	}{
		{"whole", func() {}},
		{"truncated", func() { os.Truncate(lib, 4096) }},
		{"changed in place", func() {
			f, _ := os.OpenFile(lib, os.O_WRONLY, 0)
			f.WriteAt([]byte("XX"), 100)
			f.Close()
		}},
		{"no checksum", func() { os.Remove(sum) }},
		{"damaged checksum", func() { os.WriteFile(sum, []byte("zz\n"), 0o644) }},
		{"library gone", func() { os.Remove(lib) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := builds
			tc.damage()
			got, err := cachedEmulator(base, build)
			if err != nil || got != lib {
				t.Fatalf("%s, %v", got, err)
			}
			if want := before + map[bool]int{true: 0, false: 1}[tc.name == "whole"]; builds != want {
				t.Fatalf("%d builds, want %d", builds-before, want-before)
			}
			whole()
		})
	}
	if left, _ := filepath.Glob(filepath.Join(base, "graphpipe", "*.bad-*")); len(left) != 0 {
		t.Errorf("set-aside caches left behind: %v", left)
	}
}

//go:build unix

package main

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOutputsKeepWhatTheyName (issue 53, item 1): an output that names a
// character device, a FIFO or a symbolic link is written through it, never
// replaced by a renamed file: as root, 'search m.json -o /dev/null'
// replaced /dev/null. The device here is a /dev/null of the test's own
// (1, 3), made in a temporary directory: the real one is never named.
// Where the output goes through a link, the link stays a link and its
// target is written; a directory behind a link is refused, naming the flag.
func TestOutputsKeepWhatTheyName(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	const want = `"format": "graphpipe/plan@1"` // the plan's times vary
	null := filepath.Join(dir, "null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Logf("no device node (%v): the FIFOs and links stand for it", err)
		null = ""
	}
	search := func(out string) []string {
		return []string{"search", model, "--devices", "2", "--device", "cpu", "-o", out}
	}
	for _, tc := range []struct {
		name string
		// target makes the path the command writes, and returns it with
		// the FIFO to read it from ("" for none)
		target func(t *testing.T, dir string) (path, fifo string)
		args   func(out string) []string
		check  func(t *testing.T, path string)
		read   string // what the FIFO's reader must read a part of
	}{
		{"search -o device", func(t *testing.T, dir string) (string, string) {
			if null == "" {
				t.Skip("no device node")
			}
			return null, ""
		}, search, kindIs(fs.ModeDevice | fs.ModeCharDevice), ""},
		{"search -o FIFO", fifoIn, search, kindIs(fs.ModeNamedPipe), want},
		{"search -o link to a FIFO", func(t *testing.T, dir string) (string, string) {
			fifo, _ := fifoIn(t, dir)
			link := filepath.Join(dir, "to-fifo")
			os.Symlink(fifo, link)
			return link, fifo
		}, search, kindIs(fs.ModeSymlink), want},
		{"search -o link to a file", func(t *testing.T, dir string) (string, string) {
			file := filepath.Join(dir, "old.json")
			os.WriteFile(file, []byte("old"), 0o644)
			link := filepath.Join(dir, "current.json")
			os.Symlink("old.json", link)
			return link, ""
		}, search, func(t *testing.T, path string) {
			kindIs(fs.ModeSymlink)(t, path)
			if b, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "old.json")); !strings.Contains(string(b), want) {
				t.Errorf("the link's target holds %q, want the plan", b)
			}
		}, ""},
		{"data synth -o FIFO", fifoIn, func(out string) []string {
			return []string{"data", "synth", model, "-o", out, "--samples", "8"}
		}, kindIs(fs.ModeNamedPipe), `"dtype"`},
		{"sim --trace device", func(t *testing.T, dir string) (string, string) {
			if null == "" {
				t.Skip("no device node")
			}
			return null, ""
		}, func(out string) []string { return []string{"sim", plan, "--trace", out} }, kindIs(fs.ModeDevice | fs.ModeCharDevice), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			path, fifo := tc.target(t, sub)
			got := make(chan string, 1)
			if fifo != "" {
				go func() {
					f, err := os.Open(fifo)
					if err != nil {
						got <- err.Error()
						return
					}
					b, _ := io.ReadAll(f)
					f.Close()
					got <- string(b)
				}()
			}
			if code, _, errs := gp(t, "", tc.args(path)...); code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if fifo != "" {
				select {
				case b := <-got:
					if b == "" || !strings.Contains(b, tc.read) {
						t.Errorf("the FIFO's reader read %.80q, want %q in it", b, tc.read)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the FIFO's reader read nothing in 10s")
				}
			}
			tc.check(t, path)
			entries, _ := os.ReadDir(sub)
			for _, e := range entries {
				if strings.Contains(e.Name(), ".tmp") {
					t.Errorf("temporary file left: %s", e.Name())
				}
			}
		})
	}
	t.Run("search -o link to a directory", func(t *testing.T) {
		sub := t.TempDir()
		link := filepath.Join(sub, "out.json")
		os.Symlink(sub, link)
		code, _, errs := gp(t, "", search(link)...)
		if code != 2 || !strings.Contains(errs, "-o "+link+": is a directory, not a file") {
			t.Errorf("exit %d, %q; want 2 naming -o and the link", code, errs)
		}
		kindIs(fs.ModeSymlink)(t, link)
	})
}

// fifoIn makes a FIFO in dir, and returns it as the path to write and to read.
func fifoIn(t *testing.T, dir string) (string, string) {
	t.Helper()
	p := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, p
}

// kindIs checks that path (not followed) is still of kind.
func kindIs(kind fs.FileMode) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		t.Helper()
		st, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Type() != kind {
			t.Errorf("%s is now %v, want it still %v", path, st.Mode().Type(), kind)
		}
	}
}

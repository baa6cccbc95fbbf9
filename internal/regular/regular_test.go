package regular

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRefusesWhatIsNotAFile: a FIFO (no writer), /dev/zero, a directory
// and a link to a FIFO are refused at once, naming what they are; a
// regular file, and a link to one, are read.
func TestRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("data"), 0o644)
	os.Symlink(fifo, filepath.Join(dir, "to-fifo"))
	os.Symlink(file, filepath.Join(dir, "to-file"))
	for _, tc := range []struct {
		path, want string
	}{
		{fifo, "not a regular file (a FIFO)"},
		{filepath.Join(dir, "to-fifo"), "not a regular file (a FIFO)"},
		{"/dev/zero", "not a regular file (a character device)"},
		{dir, "not a regular file (a directory)"},
		{file, ""},
		{filepath.Join(dir, "to-file"), ""},
	} {
		for name, read := range map[string]func(string) ([]byte, error){"ReadFile": ReadFile, "ReadFileMax": func(p string) ([]byte, error) { return ReadFileMax(p, 100) }} {
			done := make(chan struct{})
			var b []byte
			var err error
			go func() { b, err = read(tc.path); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Second):
				t.Fatalf("%s(%s) still waits after a second", name, tc.path)
			}
			switch {
			case tc.want == "" && (err != nil || string(b) != "data"):
				t.Errorf("%s(%s): %q, %v", name, tc.path, b, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tc.path)):
				t.Errorf("%s(%s): %v, want %q", name, tc.path, err, tc.want)
			}
		}
	}
	if _, err := ReadFileMax(file, 3); err == nil || !strings.Contains(err.Error(), "limit of 3 bytes") {
		t.Errorf("over the limit: %v", err)
	}
}

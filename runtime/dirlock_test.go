package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLockFileNotAFile: a checkpoint directory whose .lock is a directory,
// a FIFO or a symbolic link is refused at once, the message naming the
// lock file (not the directory) and what it is; a regular one is taken,
// and refused to a second holder naming the first.
func TestLockFileNotAFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(path string)
		want string
	}{
		{"a directory", func(p string) { os.Mkdir(p, 0o755) }, "not a regular file (a directory)"},
		{"a FIFO", func(p string) { syscall.Mkfifo(p, 0o644) }, "not a regular file (a FIFO)"},
		{"a link", func(p string) { os.Symlink("/etc/passwd", p) }, "not a regular file (a symbolic link)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lock := filepath.Join(dir, lockFile)
			tc.make(lock)
			done := make(chan error, 1)
			go func() {
				l, err := LockDir(dir, "r")
				l.Unlock()
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "its lock file "+lock) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want the lock file named and %q", err, tc.want)
				}
			case <-time.After(time.Second):
				t.Fatal("still locking after a second")
			}
		})
	}
	dir := t.TempDir()
	l, err := LockDir(dir, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	_, err = LockDir(dir, "second")
	var le *LockedError
	if !errors.As(err, &le) || !strings.Contains(le.Holder, "run first") {
		t.Fatalf("a second holder: %v", err)
	}
}

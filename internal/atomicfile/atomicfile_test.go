//go:build unix

package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/internal/regular"
)

// reader drains a FIFO at path until its writer closes it, and hands back
// what it read.
func reader(t *testing.T, path string) <-chan string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(path)
		if err != nil {
			got <- "open: " + err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	return got
}

// TestWrite: each kind of target is written as the package's
// documentation says: a new or regular file replaced by rename (a new
// inode, the caller's mode less the umask); a character device, a FIFO and
// a link to either written through and left what they were; a link to a
// regular file left a link, its target replaced; a directory, a socket, a
// dangling link and a missing directory refused, naming the path and
// leaving it as it was. No temporary file is left behind.
func TestWrite(t *testing.T) {
	umask := syscall.Umask(0o022)
	syscall.Umask(umask)
	const perm = 0o640
	data := []byte("new bytes\n")
	for _, tc := range []struct {
		name string
		// setup makes the target in dir and returns its path, and, for a
		// FIFO, the channel its reader reports what it read on
		setup func(t *testing.T, dir string) (string, <-chan string)
		// want checks the target after the write
		want    func(t *testing.T, dir, path string, before fs.FileInfo)
		wantErr string
	}{
		{
			name:  "new file",
			setup: func(t *testing.T, dir string) (string, <-chan string) { return filepath.Join(dir, "out.json"), nil },
			want:  func(t *testing.T, dir, path string, _ fs.FileInfo) { wantFile(t, path, data, perm&^fs.FileMode(umask)) },
		},
		{
			name: "regular file",
			setup: func(t *testing.T, dir string) (string, <-chan string) {
				p := filepath.Join(dir, "out.json")
				must(t, os.WriteFile(p, []byte("old bytes, longer than the new\n"), 0o600))
				return p, nil
			},
			want: func(t *testing.T, dir, path string, before fs.FileInfo) {
				wantFile(t, path, data, perm&^fs.FileMode(umask))
				if st, _ := os.Lstat(path); os.SameFile(st, before) {
					t.Errorf("%s was written in place, not replaced by a rename", path)
				}
			},
		},
		{
			name: "link to a regular file",
			setup: func(t *testing.T, dir string) (string, <-chan string) {
				must(t, os.Mkdir(filepath.Join(dir, "plans"), 0o755))
				must(t, os.WriteFile(filepath.Join(dir, "plans", "v3.json"), []byte("old"), 0o644))
				must(t, os.Mkdir(filepath.Join(dir, "links"), 0o755))
				p := filepath.Join(dir, "links", "current.json")
				must(t, os.Symlink("../plans/v3.json", p)) // relative to the link's directory
				return p, nil
			},
			want: func(t *testing.T, dir, path string, _ fs.FileInfo) {
				wantLink(t, path, "../plans/v3.json")
				wantFile(t, filepath.Join(dir, "plans", "v3.json"), data, perm&^fs.FileMode(umask))
			},
		},
		{
			name: "FIFO",
			setup: func(t *testing.T, dir string) (string, <-chan string) {
				p := filepath.Join(dir, "fifo")
				must(t, syscall.Mkfifo(p, 0o600))
				return p, reader(t, p)
			},
			want: func(t *testing.T, dir, path string, _ fs.FileInfo) { wantKind(t, path, fs.ModeNamedPipe) },
		},
		{
			name: "link to a FIFO",
			setup: func(t *testing.T, dir string) (string, <-chan string) {
				fifo := filepath.Join(dir, "fifo")
				must(t, syscall.Mkfifo(fifo, 0o600))
				p := filepath.Join(dir, "to-fifo")
				must(t, os.Symlink(fifo, p))
				return p, reader(t, fifo)
			},
			want: func(t *testing.T, dir, path string, _ fs.FileInfo) {
				wantLink(t, path, filepath.Join(dir, "fifo"))
				wantKind(t, filepath.Join(dir, "fifo"), fs.ModeNamedPipe)
			},
		},
		{
			name: "character device",
			setup: func(t *testing.T, dir string) (string, <-chan string) {
				// a /dev/null of our own (1, 3): the real one is never
				// touched by a test
				p := filepath.Join(dir, "null")
				if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
					t.Skipf("cannot make a device node here: %v", err)
				}
				return p, nil
			},
			want: func(t *testing.T, dir, path string, before fs.FileInfo) {
				wantKind(t, path, fs.ModeDevice|fs.ModeCharDevice)
				if st, _ := os.Lstat(path); !os.SameFile(st, before) {
					t.Errorf("%s was replaced", path)
				}
			},
		},
		{
			name:    "directory",
			setup:   func(t *testing.T, dir string) (string, <-chan string) { return mkdir(t, dir, "out") },
			want:    func(t *testing.T, dir, path string, _ fs.FileInfo) { wantKind(t, path, fs.ModeDir) },
			wantErr: "not a regular file (a directory)",
		},
		{
			name: "socket",
			setup: func(t *testing.T, dir string) (string, <-chan string) {
				p := filepath.Join(dir, "sock")
				l, err := net.Listen("unix", p)
				if err != nil {
					t.Skipf("cannot listen on a unix socket here: %v", err)
				}
				t.Cleanup(func() { l.Close() })
				return p, nil
			},
			want:    func(t *testing.T, dir, path string, _ fs.FileInfo) { wantKind(t, path, fs.ModeSocket) },
			wantErr: "not a regular file (a socket)",
		},
		{
			name: "dangling link",
			setup: func(t *testing.T, dir string) (string, <-chan string) {
				p := filepath.Join(dir, "dangling")
				must(t, os.Symlink(filepath.Join(dir, "nowhere"), p))
				return p, nil
			},
			want: func(t *testing.T, dir, path string, _ fs.FileInfo) {
				wantLink(t, path, filepath.Join(dir, "nowhere"))
				if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
					t.Errorf("the link's target was created")
				}
			},
			wantErr: "not a regular file (a symbolic link to nothing)",
		},
		{
			name: "missing directory",
			setup: func(t *testing.T, dir string) (string, <-chan string) {
				return filepath.Join(dir, "no", "out.json"), nil
			},
			want:    func(t *testing.T, dir, path string, _ fs.FileInfo) {},
			wantErr: "no such file or directory",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path, fifo := tc.setup(t, dir)
			before, _ := os.Lstat(path)
			err := WriteFile(path, data, perm)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path)):
				t.Fatalf("WriteFile(%s) = %v, want an error naming it with %q", path, err, tc.wantErr)
			case tc.wantErr != "" && strings.HasPrefix(tc.wantErr, "not a regular") && !errors.Is(err, regular.ErrNotRegular):
				t.Errorf("%v is not regular.ErrNotRegular", err)
			}
			if fifo != nil {
				select {
				case got := <-fifo:
					if got != string(data) {
						t.Errorf("the FIFO's reader read %q, want %q", got, data)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the FIFO's reader read nothing")
				}
			}
			tc.want(t, dir, path, before)
			noTemp(t, dir)
		})
	}
}

// TestWriteFails: a writer that fails leaves the target as it was and no
// temporary file; its error comes back as it was, naming the file it is
// about, and an error about the temporary file names the target instead.
func TestWriteFails(t *testing.T) {
	boom := errors.New("boom")
	input := &fs.PathError{Op: "read", Path: "input.bin", Err: boom}
	for _, tc := range []struct {
		name  string
		write func(tmp io.Writer) error
		want  func(path string) string
	}{
		{"its own error", func(io.Writer) error { return boom }, func(string) string { return "boom" }},
		{"another file's", func(io.Writer) error { return input }, func(string) string { return "read input.bin: boom" }},
		{"the temporary file's", func(w io.Writer) error {
			return &fs.PathError{Op: "write", Path: w.(*os.File).Name(), Err: syscall.ENOSPC}
		}, func(path string) string { return "write " + path + ": no space left on device" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.json")
			must(t, os.WriteFile(path, []byte("old"), 0o644))
			err := Write(path, 0o666, func(w io.Writer) error {
				w.Write([]byte("half"))
				return tc.write(w)
			})
			if err == nil || err.Error() != tc.want(path) {
				t.Fatalf("Write = %v, want %q", err, tc.want(path))
			}
			wantFile(t, path, []byte("old"), 0o644&^umaskNow())
			noTemp(t, dir)
		})
	}
}

func umaskNow() fs.FileMode {
	m := syscall.Umask(0o022)
	syscall.Umask(m)
	return fs.FileMode(m)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, dir, name string) (string, <-chan string) {
	p := filepath.Join(dir, name)
	must(t, os.Mkdir(p, 0o755))
	return p, nil
}

func wantFile(t *testing.T, path string, data []byte, mode fs.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !st.Mode().IsRegular() || st.Mode().Perm() != mode || string(b) != string(data) {
		t.Errorf("%s: %v %q, want a regular file %v %q", path, st.Mode(), b, mode, data)
	}
}

func wantKind(t *testing.T, path string, kind fs.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != kind {
		t.Errorf("%s is now %v, want it still %v", path, st.Mode().Type(), kind)
	}
}

func wantLink(t *testing.T, path, to string) {
	t.Helper()
	if got, err := os.Readlink(path); err != nil || got != to {
		t.Errorf("%s: link to %q (%v), want it still a link to %q", path, got, err, to)
	}
}

// noTemp checks that no temporary file is left anywhere under dir.
func noTemp(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

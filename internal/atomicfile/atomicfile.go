// Package atomicfile writes an output file as one whole: a reader sees the
// old file or the new one, never half of either. Every writer of a whole
// file goes through it: the command line's outputs (search -o, export,
// data synth, models export, profile, import -o and --weights, op times),
// a run's trace, timeline, profile and dump, task 0's rendezvous file, a
// checkpoint's manifest, the CUDA kernels' cache.
//
// What it does depends on what the target is (Resolve):
//
//  1. Nothing, or a regular file: the bytes go to a new temporary file in
//     the target's directory, created with the caller's mode less the umask,
//     synced, and renamed over the target; the temporary file is removed on
//     any failure. The target's old mode is not kept: the new file's is
//     what a new file's would be (os.Create's 0666, or the caller's).
//  2. A character device (/dev/null, a terminal) or a FIFO: the bytes are
//     written through it (opened write-only, truncated where that means
//     anything), as a shell's '>' does. A rename would put a regular file
//     in the device's place: as root, 'graphpipe search m.json -o /dev/null'
//     replaced /dev/null. Nothing is synced (there is no file to sync).
//  3. A symbolic link: what it points to is written, by 1 or 2; the link
//     stays a link. A link to nothing (dangling) is refused: the file it
//     names would be created where the user did not say.
//  4. Anything else (a directory, a socket, a block device): refused, with
//     an *fs.PathError (Op "write", the path as given) whose Err is a
//     *regular.NotRegularError naming the kind, which errors.Is matches to
//     regular.ErrNotRegular. A block device is refused rather than written
//     through: an output written over a disk's first blocks is never what
//     was meant.
//
// The target is looked at once, then written: a target swapped for another
// kind between the two (a race with another process) is not guarded
// against, as no rename can be made conditional on what it replaces.
//
// It is a room of its own near the bottom of the room table (deps_test.go),
// importing internal/regular only, so that the runtime, the supervisor, the
// command line and tensor/cuda share these lines instead of copies of them.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/graphpipe/graphpipe/internal/regular"
)

// Target is how a path is written (Resolve).
type Target struct {
	// Path is the file replaced by rename (the link's target for a
	// symbolic link to a regular file), or the path written through.
	Path string
	// Through says the bytes are written into the existing Path (a
	// character device or a FIFO), with no temporary file and no rename.
	Through bool
}

// Resolve says how path would be written, or why it will not be: see the
// package's documentation.
func Resolve(path string) (Target, error) {
	lst, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Target{Path: path}, nil
	}
	if err != nil {
		return Target{}, err
	}
	if lst.Mode().IsRegular() {
		return Target{Path: path}, nil
	}
	st, err := os.Stat(path) // through every link, as the kernel goes
	if errors.Is(err, fs.ErrNotExist) {
		return Target{}, refuse(path, "a symbolic link to nothing")
	}
	if err != nil {
		return Target{}, err
	}
	m := st.Mode()
	switch {
	case m&fs.ModeCharDevice != 0, m&fs.ModeNamedPipe != 0:
		// through path itself: the kernel follows links, /proc's too
		// (/dev/stdout to a pipe), which a path resolved here would not
		return Target{Path: path, Through: true}, nil
	case !m.IsRegular():
		return Target{}, &fs.PathError{Op: "write", Path: path, Err: regular.Mode(m)}
	}
	dest, err := filepath.EvalSymlinks(path) // a link to a regular file
	if err != nil {
		return Target{}, err
	}
	return Target{Path: dest}, nil
}

func refuse(path, kind string) error {
	return &fs.PathError{Op: "write", Path: path, Err: &regular.NotRegularError{Kind: kind}}
}

// WriteFile writes data to path as one whole (a new file perm less the
// umask), as os.WriteFile would in one step.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write writes to path what write writes, as one whole (a new file perm
// less the umask). w is the file itself, unbuffered: a caller that writes
// in small pieces buffers them (and flushes before it returns).
func Write(path string, perm fs.FileMode, write func(w io.Writer) error) error {
	t, err := Resolve(path)
	if err != nil {
		return err
	}
	if t.Through {
		return writeThrough(t.Path, write)
	}
	return replace(t.Path, perm, write)
}

// writeThrough writes into a character device or a FIFO.
func writeThrough(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replace writes a temporary file beside path and renames it over path.
// Its errors name path, never the temporary file, which means nothing to
// the user.
func replace(path string, perm fs.FileMode, write func(io.Writer) error) (err error) {
	tmp, err := createTemp(path, perm)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
			err = named(err, tmp.Name(), path)
		}
	}()
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// named is err about the temporary file tmp said of path instead (a
// rename's *os.LinkError becomes an *fs.PathError); any other error, the
// caller's writer's own about another file, as it is.
func named(err error, tmp, path string) error {
	switch e := err.(type) {
	case *fs.PathError:
		if e.Path == tmp {
			return &fs.PathError{Op: e.Op, Path: path, Err: e.Err}
		}
	case *os.LinkError:
		if e.Old == tmp {
			return &fs.PathError{Op: e.Op, Path: path, Err: e.Err}
		}
	}
	return err
}

// createTemp creates a new temporary file beside path, perm less the
// umask: unlike os.CreateTemp's 0600, what is renamed into place is
// readable as any other file the user writes.
func createTemp(path string, perm fs.FileMode) (*os.File, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	for try := 0; ; try++ {
		var b [6]byte
		rand.Read(b[:])
		tmp := filepath.Join(dir, "."+base+".tmp"+hex.EncodeToString(b[:]))
		f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		if err != nil {
			return nil, named(err, tmp, path)
		}
		return f, nil
	}
}

// Package regular opens the files a user names for reading, refusing any
// that is not a regular file: a FIFO (whose open waits for a writer for
// ever), a device (/dev/zero never ends), a socket or a directory. Every
// reader of a user's file goes through it: models, plans, profiles,
// weights (--init), data, ONNX models and their external data,
// checkpoints, op times, cluster files.
//
// The type is checked twice: by a stat before the open, so that nothing
// with a side effect on open is opened; and by the open file's own stat,
// the open made non-blocking so that a FIFO put in the file's place
// meanwhile cannot hang it either.
//
// A refusal is an *os.PathError whose Err is a *NotRegularError, which
// errors.Is matches to ErrNotRegular: "open PATH: not a regular file (a
// FIFO)".
//
// It is a room of its own at the bottom of the room table (deps_test.go),
// importing nothing of the project, so that every package that reads a
// user's file may share these few lines instead of repeating them.
package regular

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// ErrNotRegular is what every refusal matches with errors.Is.
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError says what a refused file is instead.
type NotRegularError struct {
	Kind string // "a FIFO", "a directory", "a device", "a socket", ...
}

func (e *NotRegularError) Error() string { return "not a regular file (" + e.Kind + ")" }

func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// kind words a file mode's type.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return "not a file"
}

// Mode is nil for a regular file's mode, else a *NotRegularError saying
// what the mode is of (as Lstat gives it: a symbolic link is one).
func Mode(m fs.FileMode) error {
	if m.IsRegular() {
		return nil
	}
	return &NotRegularError{Kind: kind(m)}
}

func refuse(path string, m fs.FileMode) error {
	return &os.PathError{Op: "open", Path: path, Err: &NotRegularError{Kind: kind(m)}}
}

// Check says whether path (followed through symbolic links) is a regular
// file, without opening it.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return refuse(path, st.Mode())
	}
	return nil
}

// Open opens path for reading if it is a regular file.
func Open(path string) (*os.File, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, refuse(path, st.Mode())
	}
	return f, nil
}

// ReadFile reads the whole of path if it is a regular file.
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// ReadFileMax reads path if it is a regular file of at most limit bytes.
func ReadFileMax(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		return nil, &os.PathError{Op: "read", Path: path, Err: errors.New("larger than the limit of " + strconv.FormatInt(limit, 10) + " bytes")}
	}
	return b, err
}

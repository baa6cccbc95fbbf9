package dataset

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"syscall"

	"github.com/graphpipe/graphpipe/internal/regular"
)

// source is one file of a dataset. A small one is memory-mapped and its
// rows copied out of the mapping; a large one is read by position, rows
// copied straight from the page cache into a batch's arrays (pread), so
// that the process holds no page of it between batches. Mapped pages
// count in the resident set once touched, and the kernel maps the whole
// large folio around each faulting address, so a mapping of a large file
// grows towards its size whatever is given back between batches; a
// positioned read costs a system call per run of rows, where a mapped row
// costs nothing once mapped. Files are mapped while all the mapped files
// of the process together stay within mapBudget. (The measurements behind
// this choice are in the commit that made it.)
type source struct {
	path string
	r    io.ReaderAt
	size int64
	f    *os.File // nil for bytes in memory (tests)
	data []byte   // the mapping, when mapped
}

// mapBudget bounds the bytes of files mapped at once in a process: a
// quarter of the Go memory limit (GOMEMLIMIT), at most mapLimit.
func mapBudget() int64 {
	return min(mapLimit, debug.SetMemoryLimit(-1)/4)
}

var mapLimit int64 = 256 << 20

// mapped counts the bytes of the files mapped now.
var mapped struct {
	sync.Mutex
	bytes int64
}

// mapIfSmall maps s when it fits in what is left of the budget.
func (s *source) mapIfSmall() {
	if s.f == nil || s.size == 0 || s.size != int64(int(s.size)) {
		return
	}
	mapped.Lock()
	defer mapped.Unlock()
	if mapped.bytes+s.size > mapBudget() {
		return
	}
	data, err := syscall.Mmap(int(s.f.Fd()), 0, int(s.size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return // read by position instead
	}
	s.data = data
	mapped.bytes += s.size
}

// openFile opens path for positioned reads.
func openFile(path string) (*source, error) {
	f, err := regular.Open(path) // a FIFO's open would wait for ever
	if err != nil {
		return nil, errorf(path, "", -1, "cannot open: %v", unwrapPath(err))
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, errorf(path, "", -1, "cannot stat: %v", unwrapPath(err))
	}
	s := &source{path: path, r: f, size: st.Size(), f: f}
	s.mapIfSmall()
	return s, nil
}

// memSource is bytes standing in for a file (fuzzing, tests).
func memSource(path string, b []byte) *source {
	return &source{path: path, r: bytes.NewReader(b), size: int64(len(b))}
}

// read is the file's bytes [off, off+n), which must lie inside it.
func (s *source) read(off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off > s.size || n > s.size-off {
		return nil, fmt.Errorf("bytes [%d, %d) lie outside the file of %d", off, off+n, s.size)
	}
	b := make([]byte, n)
	if err := s.readInto(b, off); err != nil {
		return nil, err
	}
	return b, nil
}

// ChangedError is a file that changed while a run read it: cut, grown or
// replaced (cp or np.save over it). It is not the data's fault but the
// environment's: the dataset was good when checked.
type ChangedError struct {
	Msg string
}

func (e *ChangedError) Error() string { return "the file changed while in use: " + e.Msg }

// readInto fills b from the file at off. The file must still have the size
// it had when opened; a mapped file's pages are copied with faults turned
// into errors, so that a file cut under its mapping (SIGBUS) fails the read,
// not the process.
func (s *source) readInto(b []byte, off int64) error {
	if s.f != nil {
		st, err := s.f.Stat()
		if err != nil {
			return fmt.Errorf("reading %d bytes at %d: %w", len(b), off, err)
		}
		if st.Size() != s.size {
			return &ChangedError{fmt.Sprintf("%d bytes now, %d when opened (cut or replaced?)", st.Size(), s.size)}
		}
	}
	if s.data != nil {
		if off < 0 || off+int64(len(b)) > s.size {
			return fmt.Errorf("reading %d bytes at %d: past the end of %d", len(b), off, s.size)
		}
		return copyMapped(b, s.data[off:])
	}
	if _, err := s.r.ReadAt(b, off); err != nil {
		return fmt.Errorf("reading %d bytes at %d: %w", len(b), off, err)
	}
	return nil
}

// copyMapped copies from a mapping, a fault in it (the file cut under the
// mapping: SIGBUS) turned into a *ChangedError.
func copyMapped(dst, src []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			fault, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			err = &ChangedError{fmt.Sprintf("a fault reading its mapping at address %#x (cut or replaced?)", fault.Addr())}
		}
	}()
	copy(dst, src)
	return nil
}

func (s *source) close() error {
	if s.data != nil {
		syscall.Munmap(s.data)
		mapped.Lock()
		mapped.bytes -= s.size
		mapped.Unlock()
		s.data = nil
	}
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

package dataset

import (
	"fmt"
	"os"
	"sync"
	"syscall"
)

// pageBudget is how many bytes a mapping may copy out before its pages are
// given back (madvise MADV_DONTNEED): a mapped file's pages count in the
// process's resident set once touched, so without this an epoch over a
// large file would end with all of it resident.
const pageBudget = 64 << 20

// mapping is one file mapped read-only.
type mapping struct {
	path string
	data []byte
	size int64

	mu      sync.Mutex // guards touched
	touched int64      // bytes copied out since the pages were last given back
}

// mapFile maps path whole. An empty file maps to no bytes.
func mapFile(path string) (*mapping, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errorf(path, "", -1, "cannot open: %v", unwrapPath(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, errorf(path, "", -1, "cannot stat: %v", unwrapPath(err))
	}
	if !st.Mode().IsRegular() {
		return nil, errorf(path, "", -1, "not a regular file")
	}
	m := &mapping{path: path, size: st.Size()}
	if m.size == 0 {
		return m, nil
	}
	if m.size != int64(int(m.size)) {
		return nil, errorf(path, "", -1, "%d bytes do not fit in this process's address space", m.size)
	}
	m.data, err = syscall.Mmap(int(f.Fd()), 0, int(m.size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, errorf(path, "", -1, "cannot map: %v", err)
	}
	// batches read rows all over the file: read-ahead would only fill
	// memory with pages no one asked for
	syscall.Madvise(m.data, syscall.MADV_RANDOM)
	return m, nil
}

// used counts n bytes copied out and gives the pages back past the budget.
func (m *mapping) used(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.touched += n; m.touched >= pageBudget && m.data != nil {
		syscall.Madvise(m.data, syscall.MADV_DONTNEED)
		m.touched = 0
	}
}

func (m *mapping) close() error {
	if m.data == nil {
		return nil
	}
	err := syscall.Munmap(m.data)
	m.data = nil
	if err != nil {
		return fmt.Errorf("%s: unmap: %w", m.path, err)
	}
	return nil
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

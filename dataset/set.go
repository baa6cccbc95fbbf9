package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/graphpipe/graphpipe/internal/regular"
)

// DType is how a tensor's values are stored.
type DType string

const (
	Float32 DType = "float32"
	Int32   DType = "int32"
	Int64   DType = "int64"
)

func (d DType) size() int {
	if d == Int64 {
		return 8
	}
	return 4
}

// Tensor is one named tensor of a Set, whose samples may lie in several
// files (shards).
type Tensor struct {
	Name  string
	DType DType
	Shape []int // per sample
	N     int   // samples
	parts []part

	// what Check found the model wants of it
	want *want
}

// part is a run of a tensor's samples in one file.
type part struct {
	m     *source
	off   int64 // the first sample's byte offset in the file
	first int   // the first sample's index in the tensor
	n     int
}

// rowBytes is the bytes of one sample as stored.
func (t *Tensor) rowBytes() int64 { return int64(t.DType.size()) * int64(elems(t.Shape)) }

// File is where the tensor's first sample lies, for messages.
func (t *Tensor) File() string {
	if len(t.parts) == 0 {
		return ""
	}
	return t.parts[0].m.path
}

// fileOf is the file and the row in it of sample row.
func (t *Tensor) locate(row int) (*part, int) {
	i := sort.Search(len(t.parts), func(i int) bool { return t.parts[i].first+t.parts[i].n > row })
	p := &t.parts[i]
	return p, row - p.first
}

func elems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Set is an opened dataset.
type Set struct {
	Path    string
	N       int // samples: every tensor's count, once Check has passed
	Tensors map[string]*Tensor
	files   []*source
	// AllowNonfinite lets NaN and infinite floats through Read.
	AllowNonfinite bool

	mu     sync.RWMutex // guards files' mappings and closed: Close waits for the Reads in flight
	closed bool
}

// Names is the tensors' names, sorted.
func (s *Set) Names() []string {
	out := make([]string, 0, len(s.Tensors))
	for n := range s.Tensors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Close unmaps and closes the files. It waits for the Reads in flight (a
// read-ahead's goroutine may still be copying from a mapping); a Read after
// it fails.
func (s *Set) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, m := range s.files {
		errs = append(errs, m.close())
	}
	return errors.Join(errs...)
}

// Open opens the dataset at path (see the package's contract).
func Open(path string) (*Set, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, errorf(path, "", -1, "cannot read: %v", unwrapPath(err))
	}
	if !st.IsDir() && !st.Mode().IsRegular() {
		return nil, errorf(path, "", -1, "cannot open: %v", unwrapPath(regular.Check(path)))
	}
	s := &Set{Path: path, Tensors: map[string]*Tensor{}}
	if st.IsDir() {
		err = s.openDir(path)
	} else {
		err = s.openFile(path)
	}
	if err == nil && len(s.Tensors) == 0 {
		err = errorf(path, "", -1, "holds no tensors")
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	for _, t := range s.Tensors {
		s.N = max(s.N, t.N)
	}
	return s, nil
}

func (s *Set) openFile(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".safetensors":
		return s.addSafetensors(path)
	case ".npy":
		return s.addNpy(path, strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
	case ".npz":
		return s.addNpz(path)
	}
	return errorf(path, "", -1, "not a .safetensors, .npy or .npz file, nor a directory of .safetensors or .npy files")
}

// openDir opens a directory of safetensors shards or of npy files; other
// files are ignored.
func (s *Set) openDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return errorf(dir, "", -1, "cannot read: %v", unwrapPath(err))
	}
	var shards, npys []string
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".safetensors":
			shards = append(shards, e.Name())
		case ".npy":
			npys = append(npys, e.Name())
		}
	}
	switch {
	case len(shards) > 0 && len(npys) > 0:
		return errorf(dir, "", -1, "holds both .safetensors and .npy files: keep one kind")
	case len(shards) == 0 && len(npys) == 0:
		return errorf(dir, "", -1, "holds no .safetensors or .npy files")
	}
	for _, name := range shards { // ReadDir sorts by name
		if err := s.addSafetensors(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	for _, name := range s.Names() { // the first by name, not the map's order
		if t := s.Tensors[name]; len(shards) > 0 && len(t.parts) != len(shards) {
			return errorf(dir, t.Name, -1, "is in %d of the %d shards: every shard holds every tensor", len(t.parts), len(shards))
		}
	}
	for _, name := range npys {
		if err := s.addNpy(filepath.Join(dir, name), strings.TrimSuffix(name, filepath.Ext(name))); err != nil {
			return err
		}
	}
	return nil
}

// add appends n samples of tensor name, stored at off in m, to the set.
func (s *Set) add(m *source, name string, dtype DType, shape []int, off int64) error {
	if len(shape) == 0 {
		return errorf(m.path, name, -1, "is a scalar: the samples go on the first axis")
	}
	per := shape[1:]
	t := s.Tensors[name]
	if t == nil {
		t = &Tensor{Name: name, DType: dtype, Shape: append([]int{}, per...)}
		s.Tensors[name] = t
	} else if t.DType != dtype || !sameInts(t.Shape, per) {
		return errorf(m.path, name, -1, "is %s %v per sample here but %s %v in %s", dtype, per, t.DType, t.Shape, t.File())
	} else if len(t.parts) > 0 && t.parts[len(t.parts)-1].m == m {
		return errorf(m.path, name, -1, "appears twice")
	}
	t.parts = append(t.parts, part{m: m, off: off, first: t.N, n: shape[0]})
	t.N += shape[0]
	return nil
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

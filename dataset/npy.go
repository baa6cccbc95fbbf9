package dataset

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"codeberg.org/sbinet/npyio/npy"
)

// npyDTypes maps the NumPy descriptors read to ours (little-endian only).
var npyDTypes = map[string]DType{"<f4": Float32, "<i4": Int32, "<i8": Int64}

// maxNpyHeader bounds an npy header (NumPy writes a few hundred bytes).
const maxNpyHeader = 1 << 20

// addNpy maps a .npy file and adds its tensor under name.
func (s *Set) addNpy(path, name string) error {
	m, err := mapFile(path)
	if err != nil {
		return err
	}
	s.files = append(s.files, m)
	return s.addNpyAt(m, name, 0, m.size)
}

// addNpyAt adds the npy array stored in m's bytes [at, at+n).
func (s *Set) addNpyAt(m *mapping, name string, at, n int64) error {
	dt, shape, data, err := npyHeader(m.data[at : at+n])
	if err != nil {
		return errorf(m.path, name, -1, "%v", err)
	}
	want := int64(dt.size()) * int64(elems(shape))
	if elems(shape) < 0 || n-data != want {
		return errorf(m.path, name, -1, "holds %d bytes of data where shape %v of %s needs %d", n-data, shape, dt, want)
	}
	return s.add(m, name, dt, shape, at+data)
}

// npyHeader reads an npy array's header with npyio, after checking the
// parts of it that npyio trusts (the header's length and end). It returns
// the dtype, the shape and where the data starts.
func npyHeader(b []byte) (dt DType, shape []int, data int64, err error) {
	if len(b) < 10 || !bytes.Equal(b[:6], npy.Magic[:]) {
		return "", nil, 0, fmt.Errorf("not a NumPy .npy array (no \\x93NUMPY magic)")
	}
	var hlen, start int64
	switch b[6] {
	case 1:
		hlen, start = int64(binary.LittleEndian.Uint16(b[8:])), 10
	case 2:
		if len(b) < 12 {
			return "", nil, 0, fmt.Errorf("npy header: truncated")
		}
		hlen, start = int64(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return "", nil, 0, fmt.Errorf("npy format version %d.%d: graphpipe reads 1.0 and 2.0", b[6], b[7])
	}
	if hlen > maxNpyHeader || start+hlen > int64(len(b)) {
		return "", nil, 0, fmt.Errorf("npy header of %d bytes does not fit in %d bytes", hlen, len(b))
	}
	h := b[start : start+hlen]
	if bytes.IndexByte(h, '\n') < 0 || !wellFormedDict(h) {
		return "", nil, 0, fmt.Errorf("npy header: not the dictionary NumPy writes")
	}
	r, err := readNpyHeader(b[:start+hlen])
	if err != nil {
		return "", nil, 0, fmt.Errorf("npy header: %v", err)
	}
	descr := strings.Trim(r.Header.Descr.Type, `'"`)
	dt, ok := npyDTypes[descr]
	if !ok {
		return "", nil, 0, fmt.Errorf("dtype %s: graphpipe reads float32 (<f4), int32 (<i4) and int64 (<i8); convert with x.astype(np.float32) or np.int64", descr)
	}
	shape = r.Header.Descr.Shape
	if r.Header.Descr.Fortran && len(shape) > 1 {
		return "", nil, 0, fmt.Errorf("stored in Fortran order: save np.ascontiguousarray(x)")
	}
	for _, d := range shape {
		if d < 0 || d > 1<<40 {
			return "", nil, 0, fmt.Errorf("bad shape %v", shape)
		}
	}
	if n := int64(1); true {
		for _, d := range shape {
			if d > 0 && n > (1<<50)/int64(d) {
				return "", nil, 0, fmt.Errorf("bad shape %v", shape)
			}
			n *= int64(d)
		}
	}
	return dt, shape, start + hlen, nil
}

// wellFormedDict checks the header's keys come in NumPy's order, each once:
// npyio slices the text between them.
func wellFormedDict(h []byte) bool {
	d, o, s := bytes.Index(h, []byte("'descr': ")), bytes.Index(h, []byte("'fortran_order': ")), bytes.Index(h, []byte("'shape': "))
	e := bytes.IndexByte(h, '}')
	if d < 0 || o < 0 || s < 0 || e < 0 || !(d < o && o < s && s < e) {
		return false
	}
	shape := bytes.TrimSpace(h[s+len("'shape': ") : e])
	shape = bytes.TrimSuffix(shape, []byte(","))
	shape = bytes.TrimSpace(shape)
	return len(shape) >= 2 && shape[0] == '(' && shape[len(shape)-1] == ')' &&
		bytes.Count(h, []byte("'descr': ")) == 1 && o-d > len("'descr': ")+2 && s-o > len("'fortran_order': ")+2
}

// readNpyHeader runs npyio's header reader, turning a panic on a header it
// does not expect into an error.
func readNpyHeader(b []byte) (r *npy.Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("malformed (%v)", p)
		}
	}()
	return npy.NewReader(bytes.NewReader(b))
}

// addNpz maps an .npz file (np.savez: a zip of .npy members, stored) and
// adds each member under its name.
func (s *Set) addNpz(path string) error {
	m, err := mapFile(path)
	if err != nil {
		return err
	}
	s.files = append(s.files, m)
	return s.addNpzBytes(m)
}

func (s *Set) addNpzBytes(m *mapping) error {
	path := m.path
	z, err := zip.NewReader(bytes.NewReader(m.data), m.size)
	if err != nil {
		return errorf(path, "", -1, "not a NumPy .npz archive: %v", err)
	}
	for _, f := range z.File {
		name := strings.TrimSuffix(f.Name, ".npy")
		if f.Method != zip.Store {
			return errorf(path, name, -1, "is compressed (np.savez_compressed): save with np.savez so that it can be memory-mapped")
		}
		at, err := f.DataOffset()
		if err != nil || at < 0 || at > m.size || f.CompressedSize64 > uint64(m.size-at) {
			return errorf(path, name, -1, "member lies outside the archive")
		}
		if err := s.addNpyAt(m, name, at, int64(f.CompressedSize64)); err != nil {
			return err
		}
	}
	return nil
}

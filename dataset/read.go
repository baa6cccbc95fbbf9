package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/graphpipe/graphpipe/tensor"
)

// Read copies the given samples (indices into the set, in order) of the
// named tensors (nil: every one) into new arrays, batch-major: float32
// tensors as F32, int tensors as I32. Once Check has passed, every value is
// checked against its input as it is copied (see the package's contract).
func (s *Set) Read(names map[string]bool, rows []int) (map[string]tensor.Named, error) {
	s.mu.RLock() // a Close (another goroutine's: a prefetch's run ending) waits for this read
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("dataset %s: read after Close", s.Path)
	}
	out := map[string]tensor.Named{}
	for _, name := range s.Names() {
		if names != nil && !names[name] {
			continue
		}
		v, err := s.Tensors[name].read(rows, s.AllowNonfinite)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

func (t *Tensor) read(rows []int, nonfinite bool) (tensor.Named, error) {
	per := elems(t.Shape)
	v := tensor.Named{Name: t.Name, Shape: append([]int{len(rows)}, t.Shape...)}
	rb := int(t.rowBytes())
	var raw []byte // the rows as stored
	switch {
	case t.DType == Float32:
		v.F32 = make([]float32, len(rows)*per)
		raw = asBytes(v.F32)
	default:
		v.I32 = make([]int32, len(rows)*per)
		if t.DType == Int32 {
			raw = asBytes(v.I32)
		}
	}
	if raw == nil {
		raw = make([]byte, len(rows)*rb)
	}
	for k := 0; k < len(rows); {
		row := rows[k]
		if row < 0 || row >= t.N {
			return tensor.Named{}, errorf(t.File(), t.Name, row, "outside the %d samples", t.N)
		}
		p, r := t.locate(row)
		run := 1 // the rows after row in the same file come in one read
		for k+run < len(rows) && rows[k+run] == row+run && r+run < p.n {
			run++
		}
		if err := p.m.readInto(raw[k*rb:(k+run)*rb], p.off+int64(r)*int64(rb)); err != nil {
			e := errorf(p.m.path, t.Name, row, "%v", err)
			var ce *ChangedError
			e.Changed = errors.As(err, &ce)
			return tensor.Named{}, e
		}
		k += run
	}
	for k, row := range rows {
		src := raw[k*rb : (k+1)*rb]
		var err error
		switch t.DType {
		case Float32:
			err = t.floats(v.F32[k*per:(k+1)*per], src, nonfinite)
		case Int32:
			err = t.ints32(v.I32[k*per:(k+1)*per], src)
		case Int64:
			err = t.ints64(v.I32[k*per:(k+1)*per], src)
		}
		if err != nil {
			p, _ := t.locate(row)
			return tensor.Named{}, errorf(p.m.path, t.Name, row, "%v", err)
		}
	}
	return v, nil
}

// asBytes is the bytes of v when the host is little-endian, as the files
// are (rows then land in place); nil otherwise.
func asBytes[T float32 | int32](v []T) []byte {
	if !littleEndian || len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// littleEndian: the host stores values as the files do, so rows are read
// straight into a batch's arrays.
var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// floats checks one row of float32 values is finite (src is the row as
// read: dst itself on a little-endian host).
func (t *Tensor) floats(dst []float32, src []byte, nonfinite bool) error {
	if !littleEndian { // the row was read into a separate buffer
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	}
	if nonfinite || t.want == nil {
		return nil
	}
	for i, x := range dst {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("value %d of the sample is %v (--allow-nonfinite lets it through)", i, x)
		}
	}
	return nil
}

// ints32 checks one row of int32 values is in range (src as for floats).
func (t *Tensor) ints32(dst []int32, src []byte) error {
	if !littleEndian {
		for i := range dst {
			dst[i] = int32(binary.LittleEndian.Uint32(src[4*i:]))
		}
	}
	for i, x := range dst {
		if err := t.inRange(i, int64(x)); err != nil {
			return err
		}
	}
	return nil
}

// ints64 converts one row of int64 values to int32, checking each fits.
func (t *Tensor) ints64(dst []int32, src []byte) error {
	for i := range dst {
		x := int64(binary.LittleEndian.Uint64(src[8*i:]))
		if x < math.MinInt32 || x > math.MaxInt32 {
			return fmt.Errorf("value %d of the sample, %d, does not fit in int32", i, x)
		}
		if err := t.inRange(i, x); err != nil {
			return err
		}
		dst[i] = int32(x)
	}
	return nil
}

func (t *Tensor) inRange(i int, x int64) error {
	if t.want == nil || t.want.rng == nil {
		return nil
	}
	if lo, hi := t.want.rng[0], t.want.rng[1]; x < lo || x >= hi {
		what := "index"
		if t.want.label {
			what = "class"
		}
		return fmt.Errorf("value %d of the sample, %s %d, is outside [%d, %d)", i, what, x, lo, hi)
	}
	return nil
}

package dataset

import (
	"encoding/binary"
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
	if t.DType == Float32 {
		v.F32 = make([]float32, len(rows)*per)
	} else {
		v.I32 = make([]int32, len(rows)*per)
	}
	rb := t.rowBytes()
	for k, row := range rows {
		if row < 0 || row >= t.N {
			return tensor.Named{}, errorf(t.File(), t.Name, row, "outside the %d samples", t.N)
		}
		p, r := t.locate(row)
		src := p.m.data[p.off+int64(r)*rb : p.off+int64(r+1)*rb]
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
			return tensor.Named{}, errorf(p.m.path, t.Name, row, "%v", err)
		}
		p.m.used(rb)
	}
	return v, nil
}

// littleEndian: the host stores values as the files do, so rows are copied
// byte for byte.
var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// floats copies one row of float32 values and checks each is finite.
func (t *Tensor) floats(dst []float32, src []byte, nonfinite bool) error {
	if littleEndian && len(dst) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), src)
	} else {
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

// ints32 copies one row of int32 values and checks their range.
func (t *Tensor) ints32(dst []int32, src []byte) error {
	if littleEndian && len(dst) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), src)
	} else {
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

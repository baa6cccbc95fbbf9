package onnx

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/graphpipe/graphpipe/internal/regular"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// dtype is an ONNX tensor element type.
type dtype = onnxpb.TensorProto_DataType

const (
	tFloat   = onnxpb.TensorProto_FLOAT
	tDouble  = onnxpb.TensorProto_DOUBLE
	tFloat16 = onnxpb.TensorProto_FLOAT16
	tBF16    = onnxpb.TensorProto_BFLOAT16
	tInt64   = onnxpb.TensorProto_INT64
	tInt32   = onnxpb.TensorProto_INT32
	tInt16   = onnxpb.TensorProto_INT16
	tInt8    = onnxpb.TensorProto_INT8
	tUint8   = onnxpb.TensorProto_UINT8
	tBool    = onnxpb.TensorProto_BOOL
)

// elemSize is the bytes of one element in raw_data, 0 for a type the
// importer does not read.
func elemSize(t dtype) int64 {
	switch t {
	case tFloat, tInt32:
		return 4
	case tDouble, tInt64:
		return 8
	case tFloat16, tBF16, tInt16:
		return 2
	case tInt8, tUint8, tBool:
		return 1
	}
	return 0
}

func isFloat(t dtype) bool { return t == tFloat || t == tDouble || t == tFloat16 || t == tBF16 }

func isInt(t dtype) bool {
	return t == tInt64 || t == tInt32 || t == tInt16 || t == tInt8 || t == tUint8 || t == tBool
}

// maxElems bounds a tensor's element count (2^40: a terabyte of float32s);
// a larger declared shape is a broken file, not a model.
const maxElems = 1 << 40

// count is the element count of dims, refusing negative dims and products
// past maxElems.
func count(dims []int64) (int64, error) {
	n := int64(1)
	for i, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("dim %d is %d", i, d)
		}
		if d != 0 && n > maxElems/d {
			return 0, fmt.Errorf("dims %v hold more than 2^40 elements", dims)
		}
		n *= d
	}
	return n, nil
}

// stored is a tensor's data as the file holds it: raw bytes (in the model,
// or a range of an external file), or a typed field.
type stored struct {
	t     *onnxpb.TensorProto
	dtype dtype
	dims  []int64
	n     int64
	// external data: the file (its location in the model's directory
	// dir, and both joined) and the byte range
	dir, loc, path string
	offset, len    int64
}

// checkTensor checks that t's data is there and holds its dims, without
// reading external data. dir is the model's directory.
func checkTensor(t *onnxpb.TensorProto, dir string) (*stored, error) {
	s := &stored{t: t, dtype: dtype(t.GetDataType()), dims: t.GetDims()}
	var err error
	if s.n, err = count(s.dims); err != nil {
		return nil, err
	}
	size := elemSize(s.dtype)
	if size == 0 {
		return nil, fmt.Errorf("data type %s is not one graphpipe reads (float, double, float16, bfloat16, int64, int32, int16, int8, uint8, bool)", s.dtype)
	}
	if t.GetSegment() != nil {
		return nil, fmt.Errorf("segmented tensors are not supported")
	}
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return s, s.external(dir, size)
	}
	have := int64(len(t.GetRawData()))
	if have == 0 {
		have = typedLen(t, s.dtype)
		if have != s.n {
			return nil, fmt.Errorf("holds %d values, its dims %v need %d", have, s.dims, s.n)
		}
		return s, nil
	}
	if have != s.n*size {
		return nil, fmt.Errorf("raw_data holds %d bytes, its dims %v of %s need %d", have, s.dims, s.dtype, s.n*size)
	}
	return s, nil
}

// typedLen is the number of values in the typed field that holds dtype.
func typedLen(t *onnxpb.TensorProto, d dtype) int64 {
	switch d {
	case tFloat:
		return int64(len(t.GetFloatData()))
	case tDouble:
		return int64(len(t.GetDoubleData()))
	case tInt64:
		return int64(len(t.GetInt64Data()))
	default: // int32, int16, int8, uint8, bool, float16, bfloat16
		return int64(len(t.GetInt32Data()))
	}
}

// external resolves and checks external data: a file inside dir, and a
// byte range inside the file.
func (s *stored) external(dir string, size int64) error {
	kv := map[string]string{}
	for _, e := range s.t.GetExternalData() {
		kv[e.GetKey()] = e.GetValue()
	}
	loc := kv["location"]
	if loc == "" {
		return fmt.Errorf("external data without a location")
	}
	if !filepath.IsLocal(loc) {
		return fmt.Errorf("external data location %q is not inside the model's directory", loc)
	}
	s.dir, s.loc, s.path = dir, loc, filepath.Join(dir, loc)
	f, err := s.open()
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return fmt.Errorf("external data: %v", err)
	}
	for _, f := range []struct {
		key string
		dst *int64
	}{{"offset", &s.offset}, {"length", &s.len}} {
		if v, ok := kv[f.key]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("external data %s %q is not a byte count", f.key, v)
			}
			*f.dst = n
		}
	}
	want := s.n * size
	if _, has := kv["length"]; !has {
		s.len = want
	}
	if s.len != want {
		return fmt.Errorf("external data length %d, its dims %v of %s need %d bytes", s.len, s.dims, s.dtype, want)
	}
	if s.offset > fi.Size() || s.len > fi.Size()-s.offset {
		return fmt.Errorf("external data [%d, %d) lies past the end of %s (%d bytes)", s.offset, s.offset+s.len, loc, fi.Size())
	}
	return nil
}

// open opens the tensor's external data file inside the model's
// directory, refusing anything but a regular file (a FIFO would hang the
// import, a directory fail late). The location is resolved through its
// symbolic links and must stay inside the model's directory, resolved
// too; the file is then opened through an os.Root of that directory, so
// that a link changed since cannot lead out either, and without blocking,
// so that not even a FIFO put there since the check waits.
func (s *stored) open() (*os.File, error) {
	dir, err := filepath.EvalSymlinks(s.dir)
	if err != nil {
		return nil, fmt.Errorf("external data: the model's directory: %v", err)
	}
	to, err := filepath.EvalSymlinks(s.path)
	if err != nil {
		return nil, fmt.Errorf("external data: %v", err)
	}
	if rel, err := filepath.Rel(dir, to); err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("external data location %q leads out of the model's directory %s, to %s (through a symbolic link)", s.loc, dir, to)
	}
	if err := regular.Check(to); err != nil {
		return nil, fmt.Errorf("external data location %q: %v", s.loc, errors.Unwrap(err))
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("external data: the model's directory: %v", err)
	}
	defer root.Close()
	f, err := root.OpenFile(s.loc, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("external data location %q: %v", s.loc, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("external data location %q: not a regular file", s.loc)
	}
	return f, nil
}

// raw returns a reader of the tensor's little-endian bytes (raw data or
// external data); ok is false for a tensor held in a typed field.
func (s *stored) raw() (io.Reader, func() error, bool, error) {
	if s.path != "" {
		f, err := s.open()
		if err != nil {
			return nil, nil, true, err
		}
		return bufio.NewReaderSize(io.NewSectionReader(f, s.offset, s.len), 1<<20), f.Close, true, nil
	}
	if b := s.t.GetRawData(); len(b) > 0 || s.n == 0 {
		return bytesReader(b), func() error { return nil }, true, nil
	}
	return nil, nil, false, nil
}

func bytesReader(b []byte) io.Reader { return &sliceReader{b: b} }

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// maxFolded bounds a tensor the importer reads into memory to compute with
// (a shape, a constant operand); larger ones stay weights.
const maxFolded = 1 << 22

// floats reads every value as float64 (for constants and shapes).
func (s *stored) floats() ([]float64, error) {
	if s.n > maxFolded {
		return nil, fmt.Errorf("%d elements is too large to read as a constant", s.n)
	}
	out := make([]float64, 0, s.n)
	err := s.each(func(v float64) { out = append(out, v) })
	return out, err
}

// each calls f with every value, in order.
func (s *stored) each(f func(float64)) error {
	r, done, ok, err := s.raw()
	if err != nil {
		return err
	}
	if !ok {
		return s.typed(f)
	}
	defer done()
	size := elemSize(s.dtype)
	buf := make([]byte, 64<<10)
	for left := s.n * size; left > 0; {
		chunk := buf[:min(int64(len(buf)), left)]
		if _, err := io.ReadFull(r, chunk); err != nil {
			return fmt.Errorf("reading data: %v", err)
		}
		for i := 0; i < len(chunk); i += int(size) {
			f(decodeRaw(s.dtype, chunk[i:i+int(size)]))
		}
		left -= int64(len(chunk))
	}
	return nil
}

func decodeRaw(d dtype, b []byte) float64 {
	switch d {
	case tFloat:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case tDouble:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case tFloat16:
		return float64(half(binary.LittleEndian.Uint16(b)))
	case tBF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case tInt64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case tInt32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case tInt16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case tInt8:
		return float64(int8(b[0]))
	}
	return float64(b[0]) // uint8, bool
}

// ints64 reads every value as int64 exactly (shapes, axes, indices).
func (s *stored) ints64() ([]int64, error) {
	if !isInt(s.dtype) {
		return nil, fmt.Errorf("is %s, want integers", s.dtype)
	}
	if s.n > maxFolded {
		return nil, fmt.Errorf("%d elements is too large to read as a constant", s.n)
	}
	out := make([]int64, 0, s.n)
	if s.dtype == tInt64 && s.path == "" && len(s.t.GetRawData()) == 0 {
		return append(out, s.t.GetInt64Data()...), nil
	}
	if s.dtype == tInt64 {
		r, done, _, err := s.raw()
		if err != nil {
			return nil, err
		}
		defer done()
		b := make([]byte, 8)
		for i := int64(0); i < s.n; i++ {
			if _, err := io.ReadFull(r, b); err != nil {
				return nil, err
			}
			out = append(out, int64(binary.LittleEndian.Uint64(b)))
		}
		return out, nil
	}
	err := s.each(func(v float64) { out = append(out, int64(v)) })
	return out, err
}

// typed calls f with the values of a typed field.
func (s *stored) typed(f func(float64)) error {
	t := s.t
	switch s.dtype {
	case tFloat:
		for _, v := range t.GetFloatData() {
			f(float64(v))
		}
	case tDouble:
		for _, v := range t.GetDoubleData() {
			f(v)
		}
	case tInt64:
		for _, v := range t.GetInt64Data() {
			f(float64(v))
		}
	case tFloat16:
		for _, v := range t.GetInt32Data() {
			f(float64(half(uint16(v))))
		}
	case tBF16:
		for _, v := range t.GetInt32Data() {
			f(float64(math.Float32frombits(uint32(v) << 16)))
		}
	default:
		for _, v := range t.GetInt32Data() {
			f(float64(v))
		}
	}
	return nil
}

// half converts an IEEE half-precision number.
func half(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int32(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		for frac&0x400 == 0 {
			frac <<= 1
			exp--
		}
		exp++
		frac &= 0x3ff
	}
	return math.Float32frombits(sign | uint32(exp+112)<<23 | frac<<13)
}

// writeF32 writes the tensor's values as little-endian float32, streaming
// from the file for raw and external data.
func (s *stored) writeF32(w io.Writer) error {
	if s.dtype == tFloat {
		if r, done, ok, err := s.raw(); err != nil {
			return err
		} else if ok {
			defer done()
			_, err := io.CopyN(w, r, 4*s.n)
			return err
		}
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var b [4]byte
	var werr error
	err := s.each(func(v float64) {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(float32(v)))
		if werr == nil {
			_, werr = bw.Write(b[:])
		}
	})
	if err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	return bw.Flush()
}

package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/graphpipe/graphpipe/tensor"
)

// Tensor is one named tensor of a message: float32 or int32 data.
type Tensor struct {
	Name  string
	Shape []int
	F32   []float32
	I32   []int32
	// BF16: F32 crosses the wire as bfloat16, 2 bytes an element, rounded
	// to nearest even (tensor.ToBF16; a bf16 run's activations and
	// gradients, which are bf16 values already: nothing is lost); a
	// decoded bf16 tensor says so and holds the values widened.
	BF16 bool
}

// A tensor message is a msgpack array of tensors, each an array of [name,
// dtype, shape, pad, data]: dtype 0 is float32, 1 int32, 2 bfloat16 (2
// bytes an element); data is one
// little-endian binary field in its 5-byte form, and pad a binary field of
// 0 to 3 zero bytes that puts the data at a multiple of 4 bytes from the
// message's start. A receiver that assembles the message in memory aligned
// to 4 (as Go's allocations are) can then read each tensor's data where it
// lies (DecodeTensorsView). Messages of 4-field tensors (no pad, as the
// first version wrote them) are read too.
const (
	tensorFields   = 5
	tensorFieldsV1 = 4
	maxTensorName  = 1024
	maxTensorRank  = 16
)

// nativeLittle says whether this machine stores a float32 as the wire does:
// then data is the tensor's memory itself, on the way out and (aligned) in.
var nativeLittle = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Data is t's elements as little-endian bytes: t's memory itself on a
// little-endian machine (keep t unchanged until they are sent).
func (t Tensor) Data() Bytes {
	switch {
	case t.I32 != nil:
		return littleBytes(t.I32)
	case t.BF16:
		return bf16Bytes(t.F32)
	}
	return littleBytes(t.F32)
}

// bf16Bytes is v rounded to bfloat16, as little-endian bytes.
func bf16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], tensor.ToBF16(x))
	}
	return b
}

// Payload is a message's bytes as its sender holds them: Len bytes, which
// an endpoint copies into its frames in order, piece by piece (CopyAt).
type Payload interface {
	Len() int
	// CopyAt fills dst with the bytes at [off, off+len(dst)); it may wait
	// for bytes still on their way (a device's download).
	CopyAt(dst []byte, off int) error
}

// Bytes is a payload held in memory.
type Bytes []byte

func (b Bytes) Len() int { return len(b) }

func (b Bytes) CopyAt(dst []byte, off int) error {
	copy(dst, b[off:])
	return nil
}

// Concat is payloads end to end.
type Concat []Payload

func (c Concat) Len() int {
	n := 0
	for _, p := range c {
		n += p.Len()
	}
	return n
}

func (c Concat) CopyAt(dst []byte, off int) error {
	for _, p := range c {
		n := p.Len()
		if off >= n {
			off -= n
			continue
		}
		k := min(len(dst), n-off)
		if err := p.CopyAt(dst[:k], off); err != nil {
			return err
		}
		dst, off = dst[k:], 0
		if len(dst) == 0 {
			return nil
		}
	}
	if len(dst) > 0 {
		return fmt.Errorf("wire: %d bytes asked past the payload's end", len(dst))
	}
	return nil
}

// Flatten copies the payload into one slice.
func Flatten(p Payload) ([]byte, error) {
	b := make([]byte, p.Len())
	return b, p.CopyAt(b, 0)
}

// TensorSpec is a tensor of a message whose data the caller supplies as a
// payload (4 bytes per element, 2 for BF16, little-endian): from host
// memory, or from a device as the frames go out.
type TensorSpec struct {
	Name  string
	Shape []int
	Int   bool // int32 elements; float32 otherwise
	BF16  bool // bfloat16 elements (a half buffer's bytes)
	Data  Payload
}

// TensorError is a tensor that cannot be put in a message.
type TensorError struct {
	Name string
	Msg  string
}

func (e *TensorError) Error() string { return fmt.Sprintf("tensor %q: %s", e.Name, e.Msg) }

// LayoutTensors lays specs out as a tensor message: each tensor's header,
// then its data, unread until the message's frames are made.
func LayoutTensors(specs []TensorSpec) (Concat, error) {
	head := appendArrayLen(nil, len(specs))
	pos := 0
	out := make(Concat, 0, 2*len(specs))
	for _, s := range specs {
		elems, err := checkSpec(s)
		if err != nil {
			return nil, err
		}
		head = appendArrayLen(head, tensorFields)
		head = appendString(head, s.Name)
		dtype, size := uint64(0), 4
		switch {
		case s.Int:
			dtype = 1
		case s.BF16:
			dtype, size = 2, 2
		}
		head = appendUint(head, dtype)
		head = appendArrayLen(head, len(s.Shape))
		for _, d := range s.Shape {
			head = appendUint(head, uint64(d))
		}
		pad := (4 - (pos+len(head)+2+5)%4) % 4 // the data after pad's and its own headers lands on a multiple of 4
		head = append(appendBinLen(head, pad), make([]byte, pad)...)
		head = appendBin32Len(head, size*elems)
		out = append(out, Bytes(head), s.Data)
		pos += len(head) + size*elems
		head = nil
	}
	if len(specs) == 0 {
		out = append(out, Bytes(head))
	}
	return out, nil
}

func checkSpec(s TensorSpec) (int, error) {
	switch {
	case len(s.Name) > maxTensorName:
		return 0, &TensorError{s.Name[:32] + "...", fmt.Sprintf("a name of %d bytes, at most %d", len(s.Name), maxTensorName)}
	case len(s.Shape) > maxTensorRank:
		return 0, &TensorError{s.Name, fmt.Sprintf("rank %d, at most %d", len(s.Shape), maxTensorRank)}
	}
	elems := 1
	for _, d := range s.Shape {
		if d < 0 || d > math.MaxInt32 {
			return 0, &TensorError{s.Name, fmt.Sprintf("dimension %d in shape %v", d, s.Shape)}
		}
		elems *= d
	}
	size := 4
	if s.BF16 && !s.Int {
		size = 2
	}
	if s.Int && s.BF16 {
		return 0, &TensorError{s.Name, "int32 and bfloat16 at once"}
	}
	if s.Data.Len() != size*elems {
		return 0, &TensorError{s.Name, fmt.Sprintf("%d bytes of data for shape %v", s.Data.Len(), s.Shape)}
	}
	return elems, nil
}

// TensorPayload lays ts out as a tensor message whose data are the
// tensors' own memory (on a little-endian machine; a converted copy
// otherwise): the caller keeps ts unchanged until the message is sent.
func TensorPayload(ts []Tensor) (Concat, error) {
	specs := make([]TensorSpec, len(ts))
	for i, t := range ts {
		specs[i] = TensorSpec{Name: t.Name, Shape: t.Shape, Data: t.Data()}
		specs[i].Int, specs[i].BF16 = t.I32 != nil, t.I32 == nil && t.BF16
	}
	return LayoutTensors(specs)
}

// littleBytes is v's elements as little-endian bytes: v's memory itself
// where the machine is little-endian.
func littleBytes[T float32 | int32](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	if nativeLittle {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
	}
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], *(*uint32)(unsafe.Pointer(&x)))
	}
	return b
}

// EncodeTensors renders ts as one tensor message.
func EncodeTensors(ts []Tensor) ([]byte, error) {
	p, err := TensorPayload(ts)
	if err != nil {
		return nil, err
	}
	return Flatten(p)
}

// DecodeTensors reads a tensor message with explicit bounds (every length
// checked against the bytes left before anything is allocated) into
// tensors of their own memory: the caller may reuse b.
func DecodeTensors(b []byte) ([]Tensor, error) { return decodeTensors(b, false) }

// DecodeTensorsView is DecodeTensors whose tensors read their data where
// it lies in b, where it is aligned and the machine little-endian (a copy
// otherwise): the caller gives b up to them.
func DecodeTensorsView(b []byte) ([]Tensor, error) { return decodeTensors(b, true) }

func decodeTensors(b []byte, view bool) ([]Tensor, error) {
	r := &reader{b: b}
	n := r.arrayLen()
	var out []Tensor
	for i := 0; i < n && r.err == nil; i++ {
		t, ok := r.tensor(i, view)
		if !ok {
			break
		}
		out = append(out, t)
	}
	if r.err == nil && r.pos != len(b) {
		r.fail("%d bytes after the tensors", len(b)-r.pos)
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// tensor reads the i-th tensor of a message.
func (r *reader) tensor(i int, view bool) (Tensor, bool) {
	m := r.arrayLen()
	if r.err == nil && m != tensorFields && m != tensorFieldsV1 {
		r.fail("tensor %d: %d fields, want %d", i, m, tensorFields)
	}
	t := Tensor{Name: r.str(maxTensorName, "tensor name")}
	dtype := r.uint(2, "dtype")
	rank := r.arrayLen()
	if rank > maxTensorRank {
		r.fail("tensor %q: rank %d", t.Name, rank)
	}
	elems := uint64(1)
	for d := 0; d < rank && r.err == nil; d++ {
		v := r.uint(math.MaxInt32, "dim")
		t.Shape = append(t.Shape, int(v))
		elems *= v
		if elems > uint64(len(r.b)) {
			r.fail("tensor %q: shape %v is larger than the message", t.Name, t.Shape)
		}
	}
	if m == tensorFields {
		if pad := r.binView("pad"); len(pad) > 3 {
			r.fail("tensor %q: %d bytes of padding", t.Name, len(pad))
		}
	}
	data := r.binView("tensor data")
	size := uint64(4)
	if dtype == 2 {
		size = 2
	}
	if r.err == nil && uint64(len(data)) != size*elems {
		r.fail("tensor %q: %d bytes for shape %v", t.Name, len(data), t.Shape)
	}
	if r.err != nil {
		return t, false
	}
	switch dtype {
	case 1:
		t.I32 = fromLittle[int32](data, view)
	case 2:
		t.F32, t.BF16 = fromBF16(data), true
	default:
		t.F32 = fromLittle[float32](data, view)
	}
	return t, true
}

// fromLittle is little-endian data as elements: with view, data's own
// memory where it is aligned on a little-endian machine; otherwise a copy.
func fromLittle[T float32 | int32](data []byte, view bool) []T {
	n := len(data) / 4
	if n == 0 {
		return make([]T, 0)
	}
	p := unsafe.Pointer(unsafe.SliceData(data))
	if view && nativeLittle && uintptr(p)%4 == 0 {
		return unsafe.Slice((*T)(p), n)
	}
	out := make([]T, n)
	if nativeLittle {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(data)), data)
		return out
	}
	for j := range out {
		u := binary.LittleEndian.Uint32(data[4*j:])
		out[j] = *(*T)(unsafe.Pointer(&u))
	}
	return out
}

// fromBF16 is little-endian bfloat16s widened to float32s.
func fromBF16(data []byte) []float32 {
	out := make([]float32, len(data)/2)
	for j := range out {
		out[j] = tensor.FromBF16(binary.LittleEndian.Uint16(data[2*j:]))
	}
	return out
}

package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// FrameVersion is the wire version this build speaks.
const FrameVersion = 1

// Frame kinds.
const (
	KindData = 1 // a chunk of a message
	KindAck  = 2 // acknowledges Seq on the link named by the other fields
)

// Frame is one unit on the wire.
type Frame struct {
	Version uint8
	Kind    uint8
	Run     string
	Gen     uint32 // generation: frames from before a restart carry an older one
	Iter    int64
	MB      int32
	Edge    int32
	Dir     uint8 // 'a' activations, 'g' gradients
	From    int32 // sending stage
	Chunk   int32
	Chunks  int32
	Seq     uint64 // per link, for acknowledgement
	Payload []byte
}

const frameFields = 13

// EncodeFrame renders a frame as a msgpack array with the payload as one
// binary field, in a single buffer sized for it.
func EncodeFrame(f *Frame) ([]byte, error) {
	b := bytes.NewBuffer(make([]byte, 0, 96+len(f.Run)+len(f.Payload)))
	e := msgpack.NewEncoder(b)
	steps := []func() error{
		func() error { return e.EncodeArrayLen(frameFields) },
		func() error { return e.EncodeUint(uint64(f.Version)) },
		func() error { return e.EncodeUint(uint64(f.Kind)) },
		func() error { return e.EncodeString(f.Run) },
		func() error { return e.EncodeUint(uint64(f.Gen)) },
		func() error { return e.EncodeInt(f.Iter) },
		func() error { return e.EncodeInt(int64(f.MB)) },
		func() error { return e.EncodeInt(int64(f.Edge)) },
		func() error { return e.EncodeUint(uint64(f.Dir)) },
		func() error { return e.EncodeInt(int64(f.From)) },
		func() error { return e.EncodeInt(int64(f.Chunk)) },
		func() error { return e.EncodeInt(int64(f.Chunks)) },
		func() error { return e.EncodeUint(f.Seq) },
		func() error { return e.EncodeBytesLen(len(f.Payload)) }, // a bin header even when empty
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	b.Write(f.Payload)
	return b.Bytes(), nil
}

// FrameError is a frame that does not decode.
type FrameError struct{ Msg string }

func (e *FrameError) Error() string { return "frame: " + e.Msg }

// DecodeFrame reads a frame with explicit bounds: every declared length is
// checked against the bytes that remain before anything is allocated. The
// payload aliases b, which the caller must not reuse.
func DecodeFrame(b []byte) (*Frame, error) {
	r := &reader{b: b}
	if n := r.arrayLen(); r.err == nil && n != frameFields {
		return nil, &FrameError{fmt.Sprintf("has %d fields, want %d", n, frameFields)}
	}
	f := &Frame{}
	f.Version = uint8(r.uint(math.MaxUint8, "version"))
	if r.err == nil && f.Version != FrameVersion {
		return nil, &FrameError{fmt.Sprintf("version %d, this build speaks %d", f.Version, FrameVersion)}
	}
	f.Kind = uint8(r.uint(math.MaxUint8, "kind"))
	f.Run = r.str(256, "run")
	f.Gen = uint32(r.uint(math.MaxUint32, "generation"))
	f.Iter = r.int(0, math.MaxInt64, "iteration")
	f.MB = int32(r.int(0, math.MaxInt32, "micro-batch"))
	f.Edge = int32(r.int(-1, math.MaxInt32, "edge"))
	f.Dir = uint8(r.uint(math.MaxUint8, "direction"))
	f.From = int32(r.int(-1, math.MaxInt32, "from"))
	f.Chunk = int32(r.int(0, math.MaxInt32, "chunk"))
	f.Chunks = int32(r.int(0, math.MaxInt32, "chunks"))
	f.Seq = r.uint(math.MaxUint64, "sequence")
	f.Payload = r.binView("payload")
	switch {
	case r.err != nil:
		return nil, r.err
	case r.pos != len(b):
		return nil, &FrameError{fmt.Sprintf("%d bytes after the frame", len(b)-r.pos)}
	case f.Kind != KindData && f.Kind != KindAck:
		return nil, &FrameError{fmt.Sprintf("unknown kind %d", f.Kind)}
	case f.Kind == KindData && (f.Chunks < 1 || f.Chunk >= f.Chunks):
		return nil, &FrameError{fmt.Sprintf("chunk %d of %d", f.Chunk, f.Chunks)}
	case f.Dir != 'a' && f.Dir != 'g':
		return nil, &FrameError{fmt.Sprintf("direction %q", f.Dir)}
	}
	return f, nil
}

// reader is a bounded reader of the msgpack subset frames use.
type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = &FrameError{fmt.Sprintf(format, args...)}
	}
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.pos {
		r.fail("%s: needs %d bytes, %d left", what, n, len(r.b)-r.pos)
		return nil
	}
	s := r.b[r.pos : r.pos+n]
	r.pos += n
	return s
}

func (r *reader) byte1(what string) byte {
	s := r.take(1, what)
	if s == nil {
		return 0
	}
	return s[0]
}

// length reads a big-endian length of size bytes.
func (r *reader) length(size int, what string) int {
	s := r.take(size, what)
	if s == nil {
		return 0
	}
	var n uint64
	for _, c := range s {
		n = n<<8 | uint64(c)
	}
	if n > uint64(len(r.b)) {
		r.fail("%s: declares %d, more than the frame's %d bytes", what, n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *reader) arrayLen() int {
	switch c := r.byte1("array"); {
	case c >= 0x90 && c <= 0x9f:
		return int(c & 0x0f)
	case c == 0xdc:
		return r.length(2, "array")
	case c == 0xdd:
		return r.length(4, "array")
	default:
		r.fail("want an array, got 0x%02x", c)
	}
	return 0
}

// signed reads any msgpack integer as an int64 and whether it was negative.
func (r *reader) signed(what string) (int64, uint64, bool) {
	c := r.byte1(what)
	switch {
	case r.err != nil:
		return 0, 0, false
	case c <= 0x7f:
		return int64(c), uint64(c), false
	case c >= 0xe0:
		return int64(int8(c)), 0, true
	case c >= 0xcc && c <= 0xcf:
		s := r.take(1<<(c-0xcc), what)
		var u uint64
		for _, b := range s {
			u = u<<8 | uint64(b)
		}
		return int64(u), u, false
	case c >= 0xd0 && c <= 0xd3:
		s := r.take(1<<(c-0xd0), what)
		var u uint64
		for _, b := range s {
			u = u<<8 | uint64(b)
		}
		shift := 64 - 8*len(s)
		v := int64(u<<shift) >> shift
		return v, uint64(v), v < 0
	}
	r.fail("%s: want an integer, got 0x%02x", what, c)
	return 0, 0, false
}

func (r *reader) uint(max uint64, what string) uint64 {
	_, u, neg := r.signed(what)
	if r.err == nil && (neg || u > max) {
		r.fail("%s: out of range", what)
	}
	return u
}

func (r *reader) int(lo, hi int64, what string) int64 {
	v, u, neg := r.signed(what)
	if r.err == nil && (!neg && u > math.MaxInt64 || v < lo || v > hi) {
		r.fail("%s: %d is out of range", what, v)
	}
	return v
}

func (r *reader) str(max int, what string) string {
	var n int
	switch c := r.byte1(what); {
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
	case c == 0xd9:
		n = r.length(1, what)
	case c == 0xda:
		n = r.length(2, what)
	case c == 0xdb:
		n = r.length(4, what)
	default:
		r.fail("%s: want a string, got 0x%02x", what, c)
	}
	if n > max {
		r.fail("%s: %d bytes, at most %d", what, n, max)
	}
	return string(r.take(n, what))
}

// binView reads a binary field without copying it.
func (r *reader) binView(what string) []byte {
	n := r.binLen(what)
	s := r.take(n, what)
	if s == nil && r.err == nil {
		return []byte{}
	}
	return s
}

func (r *reader) binLen(what string) int {
	var n int
	switch c := r.byte1(what); c {
	case 0xc4:
		n = r.length(1, what)
	case 0xc5:
		n = r.length(2, what)
	case 0xc6:
		n = r.length(4, what)
	default:
		r.fail("%s: want bytes, got 0x%02x", what, c)
	}
	return n
}

func (r *reader) bin(what string) []byte {
	s := r.take(r.binLen(what), what)
	if s == nil {
		return nil
	}
	return append([]byte{}, s...)
}

// Tensor is one named tensor of a message: float32 or int32 data.
type Tensor struct {
	Name  string
	Shape []int
	F32   []float32
	I32   []int32
}

// EncodeTensors packs tensors as a msgpack array of [name, dtype, shape,
// data]: dtype 0 is float32, 1 int32; data is one little-endian binary field.
func EncodeTensors(ts []Tensor) ([]byte, error) {
	var b bytes.Buffer
	e := msgpack.NewEncoder(&b)
	if err := e.EncodeArrayLen(len(ts)); err != nil {
		return nil, err
	}
	for _, t := range ts {
		e.EncodeArrayLen(4)
		e.EncodeString(t.Name)
		var data []byte
		if t.I32 != nil {
			e.EncodeUint(1)
			data = make([]byte, 4*len(t.I32))
			for i, v := range t.I32 {
				binary.LittleEndian.PutUint32(data[4*i:], uint32(v))
			}
		} else {
			e.EncodeUint(0)
			data = make([]byte, 4*len(t.F32))
			for i, v := range t.F32 {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
			}
		}
		e.EncodeArrayLen(len(t.Shape))
		for _, d := range t.Shape {
			e.EncodeUint(uint64(d))
		}
		if err := e.EncodeBytes(data); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// DecodeTensors reads EncodeTensors' output with the same bounds.
func DecodeTensors(b []byte) ([]Tensor, error) {
	r := &reader{b: b}
	n := r.arrayLen()
	var out []Tensor
	for i := 0; i < n && r.err == nil; i++ {
		if m := r.arrayLen(); r.err == nil && m != 4 {
			r.fail("tensor %d: %d fields, want 4", i, m)
		}
		t := Tensor{Name: r.str(1024, "tensor name")}
		dtype := r.uint(1, "dtype")
		rank := r.arrayLen()
		if rank > 16 {
			r.fail("tensor %q: rank %d", t.Name, rank)
		}
		elems := uint64(1)
		for d := 0; d < rank && r.err == nil; d++ {
			v := r.uint(math.MaxInt32, "dim")
			t.Shape = append(t.Shape, int(v))
			elems *= v
			if elems > uint64(len(b)) {
				r.fail("tensor %q: shape %v is larger than the message", t.Name, t.Shape)
			}
		}
		data := r.bin("tensor data")
		if r.err == nil && uint64(len(data)) != 4*elems {
			r.fail("tensor %q: %d bytes for shape %v", t.Name, len(data), t.Shape)
		}
		if r.err != nil {
			break
		}
		if dtype == 1 {
			t.I32 = make([]int32, elems)
			for j := range t.I32 {
				t.I32[j] = int32(binary.LittleEndian.Uint32(data[4*j:]))
			}
		} else {
			t.F32 = make([]float32, elems)
			for j := range t.F32 {
				t.F32[j] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*j:]))
			}
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

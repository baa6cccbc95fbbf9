package wire

import (
	"fmt"
	"math"
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
	b := appendFrameHeader(make([]byte, 0, frameHeaderMax+len(f.Run)+len(f.Payload)), f, len(f.Payload))
	return append(b, f.Payload...), nil
}

// frameHeaderMax bounds a frame's bytes before its payload, its run ID aside.
const frameHeaderMax = 96

// appendFrameHeader appends f's fields, up to the payload's binary header
// for n bytes: the payload's bytes follow it.
func appendFrameHeader(b []byte, f *Frame, n int) []byte {
	b = appendArrayLen(b, frameFields)
	b = appendUint(b, uint64(f.Version))
	b = appendUint(b, uint64(f.Kind))
	b = appendString(b, f.Run)
	b = appendUint(b, uint64(f.Gen))
	b = appendInt(b, f.Iter)
	b = appendInt(b, int64(f.MB))
	b = appendInt(b, int64(f.Edge))
	b = appendUint(b, uint64(f.Dir))
	b = appendInt(b, int64(f.From))
	b = appendInt(b, int64(f.Chunk))
	b = appendInt(b, int64(f.Chunks))
	b = appendUint(b, f.Seq)
	return appendBinLen(b, n) // a bin header even when empty
}

// FrameError is a frame that does not decode.
type FrameError struct{ Msg string }

func (e *FrameError) Error() string { return "frame: " + e.Msg }

// DecodeFrame reads a frame with explicit bounds: every declared length is
// checked against the bytes that remain before anything is allocated. The
// payload aliases b, which the caller must not reuse.
func DecodeFrame(b []byte) (*Frame, error) { return decodeFrame(b, nil, false) }

// DecodeFrameSplit reads a frame that came as its head (every field, up to
// the payload's binary header) and its payload apart (SplitTransport): the
// payload is body, whose length the head must declare.
func DecodeFrameSplit(head, body []byte) (*Frame, error) { return decodeFrame(head, body, true) }

func decodeFrame(b, body []byte, split bool) (*Frame, error) {
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
	if split {
		if n := r.binLenOf("payload", len(body)); r.err == nil && n != len(body) {
			r.fail("payload: declares %d bytes, %d came", n, len(body))
		}
		f.Payload = body
	} else {
		f.Payload = r.binView("payload")
	}
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
func (r *reader) length(size int, what string) int { return r.lengthOf(size, what, 0) }

// lengthOf is length of a field that may reach past the bytes read by up
// to extra.
func (r *reader) lengthOf(size int, what string, extra int) int {
	s := r.take(size, what)
	if s == nil {
		return 0
	}
	var n uint64
	for _, c := range s {
		n = n<<8 | uint64(c)
	}
	if n > uint64(len(r.b)+extra) {
		r.fail("%s: declares %d, more than the frame's %d bytes", what, n, len(r.b)+extra)
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

func (r *reader) binLen(what string) int { return r.binLenOf(what, 0) }

// binLenOf reads a binary field's header, whose length may reach past the
// bytes read by up to extra (a payload that came apart).
func (r *reader) binLenOf(what string, extra int) int {
	var n int
	switch c := r.byte1(what); c {
	case 0xc4:
		n = r.lengthOf(1, what, extra)
	case 0xc5:
		n = r.lengthOf(2, what, extra)
	case 0xc6:
		n = r.lengthOf(4, what, extra)
	default:
		r.fail("%s: want bytes, got 0x%02x", what, c)
	}
	return n
}

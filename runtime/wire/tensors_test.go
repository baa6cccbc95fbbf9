package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/graphpipe/graphpipe/tensor"
	"github.com/vmihailenco/msgpack/v5"
)

// encodeTensorsV1 is the first version's encoder, element by element
// through the msgpack encoder: the simple thing the bulk encoding is
// checked against, and a writer of the 4-field tensors DecodeTensors still
// reads.
func encodeTensorsV1(ts []Tensor) []byte {
	var b bytes.Buffer
	e := msgpack.NewEncoder(&b)
	e.EncodeArrayLen(len(ts))
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
		e.EncodeBytes(data)
	}
	return b.Bytes()
}

// randomTensors are n tensors of random names (so that headers of every
// length mod 4 occur), shapes and values.
func randomTensors(rng *rand.Rand, n int) []Tensor {
	var ts []Tensor
	for i := 0; i < n; i++ {
		name := string(bytes.Repeat([]byte{'a' + byte(i%26)}, 1+rng.Intn(40)))
		shape := []int{1 + rng.Intn(5), rng.Intn(7)}
		size := shape[0] * shape[1]
		t := Tensor{Name: name, Shape: shape}
		if rng.Intn(3) == 0 {
			t.I32 = make([]int32, size)
			for j := range t.I32 {
				t.I32[j] = rng.Int31() - 1<<30
			}
		} else {
			t.F32 = make([]float32, size)
			for j := range t.F32 {
				t.F32[j] = float32(rng.NormFloat64())
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// TestTensorsAgainstV1: the bulk encoding carries what the element-by-
// element one does, both decode to the tensors encoded, and every data
// field of a bulk-encoded message lies at a multiple of 4 bytes.
func TestTensorsAgainstV1(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 50; trial++ {
		in := randomTensors(rng, rng.Intn(5))
		fast, err := EncodeTensors(in)
		if err != nil {
			t.Fatal(err)
		}
		for name, msg := range map[string][]byte{"bulk": fast, "v1": encodeTensorsV1(in)} {
			for _, view := range []bool{false, true} {
				out, err := decodeTensors(append([]byte(nil), msg...), view)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(in) == 0 && len(out) == 0 {
					continue
				}
				if !reflect.DeepEqual(in, out) {
					t.Fatalf("%s (view %v): %+v\n→ %+v", name, view, in, out)
				}
			}
		}
		checkAligned(t, fast)
	}
}

// checkAligned finds every tensor's data in msg and checks its offset.
func checkAligned(t *testing.T, msg []byte) {
	t.Helper()
	r := &reader{b: msg}
	n := r.arrayLen()
	for i := 0; i < n; i++ {
		r.arrayLen()
		r.str(maxTensorName, "name")
		r.uint(1, "dtype")
		for d := r.arrayLen(); d > 0; d-- {
			r.uint(math.MaxInt32, "dim")
		}
		r.binView("pad")
		data := r.binView("data")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if off := uintptr(unsafe.Pointer(unsafe.SliceData(data))) - uintptr(unsafe.Pointer(&msg[0])); len(data) > 0 && off%4 != 0 {
			t.Fatalf("tensor %d's data at offset %d", i, off)
		}
	}
}

// TestDecodeViewAliases: a view's float32s are the message's own memory
// where it is aligned, and copies where it is not.
func TestDecodeViewAliases(t *testing.T) {
	in := []Tensor{{Name: "x", Shape: []int{3}, F32: []float32{1, 2, 3}}}
	msg, _ := EncodeTensors(in)
	out, err := DecodeTensorsView(msg)
	if err != nil {
		t.Fatal(err)
	}
	inside := func(f []float32, b []byte) bool {
		p, lo := uintptr(unsafe.Pointer(&f[0])), uintptr(unsafe.Pointer(&b[0]))
		return p >= lo && p < lo+uintptr(len(b))
	}
	if nativeLittle && !inside(out[0].F32, msg) {
		t.Error("an aligned view copied its data")
	}
	odd := append([]byte{0}, msg...)[1:] // the same bytes, one off alignment
	out, err = DecodeTensorsView(odd)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("unaligned: %v, %+v", err, out)
	}
	if inside(out[0].F32, odd) {
		t.Error("an unaligned view aliased its data")
	}
	if copied, _ := DecodeTensors(msg); inside(copied[0].F32, msg) {
		t.Error("DecodeTensors aliased the message")
	}
}

// TestTensorRefusals: what no message can hold is refused by name.
func TestTensorRefusals(t *testing.T) {
	for _, tc := range []struct {
		spec TensorSpec
		want string
	}{
		{TensorSpec{Name: "short", Shape: []int{3}, Data: Bytes(make([]byte, 8))}, "8 bytes of data for shape [3]"},
		{TensorSpec{Name: "deep", Shape: make([]int, 17), Data: Bytes(nil)}, "rank 17"},
		{TensorSpec{Name: "neg", Shape: []int{-1}, Data: Bytes(nil)}, "dimension -1"},
	} {
		_, err := LayoutTensors([]TensorSpec{tc.spec})
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%s: %v, want %q", tc.spec.Name, err, tc.want)
		}
	}
}

// TestFrameHeaderMatchesMsgpack: the hand-written header is the msgpack
// encoder's, byte for byte, over values of every width.
func TestFrameHeaderMatchesMsgpack(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	widths := []int64{0, 1, 31, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, math.MaxInt64}
	pick := func() int64 { return widths[rng.Intn(len(widths))] }
	for i := 0; i < 300; i++ {
		f := &Frame{Version: FrameVersion, Kind: uint8(1 + rng.Intn(2)), Run: string(bytes.Repeat([]byte{'r'}, rng.Intn(300))),
			Gen: uint32(pick()), Iter: pick(), MB: int32(pick()), Edge: int32(pick()) - int32(rng.Intn(2)), Dir: 'a',
			From: int32(pick()) - int32(rng.Intn(40)), Chunk: int32(pick()), Chunks: int32(pick()), Seq: uint64(pick()),
			Payload: make([]byte, rng.Intn(70000))}
		var b bytes.Buffer
		e := msgpack.NewEncoder(&b)
		e.EncodeArrayLen(frameFields)
		for _, v := range []uint64{uint64(f.Version), uint64(f.Kind)} {
			e.EncodeUint(v)
		}
		e.EncodeString(f.Run)
		e.EncodeUint(uint64(f.Gen))
		for _, v := range []int64{f.Iter, int64(f.MB), int64(f.Edge)} {
			e.EncodeInt(v)
		}
		e.EncodeUint(uint64(f.Dir))
		for _, v := range []int64{int64(f.From), int64(f.Chunk), int64(f.Chunks)} {
			e.EncodeInt(v)
		}
		e.EncodeUint(f.Seq)
		e.EncodeBytes(f.Payload)
		got, _ := EncodeFrame(f)
		if !bytes.Equal(got, b.Bytes()) {
			t.Fatalf("frame %+v: header differs from msgpack's", f)
		}
	}
}

// TestPayloadsSurviveFaults: messages sent as pieces (tensor payloads of
// every size around the chunk size) arrive whole and exact over a link
// that drops, duplicates, reorders and delays, though frame buffers are
// reused once acknowledged.
func TestPayloadsSurviveFaults(t *testing.T) {
	m := NewMemory(5, Faults{Drop: 0.1, Duplicate: 0.1, Reorder: 0.2, Delay: 5 * time.Millisecond}, 1<<10)
	a, b := endpointPair(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	chunk := m.MaxPayload() - 256
	rng := rand.New(rand.NewSource(6))
	var sent [][]Tensor
	for _, n := range []int{0, 1, chunk/4 - 10, chunk / 4, chunk/4 + 1, chunk, 3*chunk/4 + 7, 5 * chunk / 2} {
		x := make([]float32, n)
		for i := range x {
			x[i] = rng.Float32()
		}
		sent = append(sent, []Tensor{{Name: "x", Shape: []int{n}, F32: x}, {Name: "i", Shape: []int{2}, I32: []int32{int32(n), -1}}})
	}
	errs := make(chan error, 1)
	go func() {
		for i, ts := range sent {
			p, err := TensorPayload(ts)
			if err == nil {
				err = a.SendPayload(ctx, 1, Key{Iter: 1, MB: int32(i), Dir: 'a'}, p)
			}
			if err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for i, want := range sent {
		msg, err := b.Receive(ctx, Key{Iter: 1, MB: int32(i), Dir: 'a'})
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeTensorsView(msg)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("message %d (%d floats): %v", i, len(want[0].F32), err)
		}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	t.Logf("%d frames sent, %d resent; receiver dropped %d duplicates", st.Sent, st.Resent, b.Stats().Duplicates)
}

// TestAssemblyRefusesMisfits: a chunk whose size does not fit the chunks
// before it is not placed.
func TestAssemblyRefusesMisfits(t *testing.T) {
	a := &assembly{chunks: 3, have: make([]bool, 3)}
	if !a.add(2, []byte{9}) || !a.add(0, []byte{1, 2}) {
		t.Fatal("refused fitting chunks")
	}
	if a.add(1, []byte{1, 2, 3}) {
		t.Fatal("placed a chunk of the wrong size")
	}
	if !a.add(1, []byte{3, 4}) || !bytes.Equal(a.whole(), []byte{1, 2, 3, 4, 9}) {
		t.Fatalf("whole %v", a.whole())
	}
	b := &assembly{chunks: 2, have: make([]bool, 2)}
	if b.add(1, []byte{1, 2, 3}) && b.add(0, []byte{1, 2}) {
		t.Fatal("took a last chunk larger than the others")
	}
}

// TestDeviceTensorsRoundTrip: a message of device tensors decodes to what
// was encoded, is told apart from a tensor message, and refuses damage.
func TestDeviceTensorsRoundTrip(t *testing.T) {
	in := []DeviceTensor{{Name: "a", Shape: []int{2, 3}, Offset: 1 << 40}, {Name: "b", Shape: []int{}, Offset: 0}}
	in[0].Handle[0], in[0].Handle[63] = 7, 9
	msg, err := EncodeDeviceTensors(in)
	if err != nil {
		t.Fatal(err)
	}
	if !IsDeviceTensors(msg) {
		t.Fatal("not told apart")
	}
	out, err := DecodeDeviceTensors(msg)
	if err != nil {
		t.Fatal(err)
	}
	out[1].Shape = []int{}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("%+v → %+v", in, out)
	}
	plain, _ := EncodeTensors([]Tensor{{Name: "x", Shape: []int{1}, F32: []float32{1}}})
	if IsDeviceTensors(plain) {
		t.Error("a tensor message taken for device tensors")
	}
	if _, err := DecodeDeviceTensors(msg[:len(msg)-1]); err == nil {
		t.Error("a truncated message decoded")
	}
	if _, err := EncodeDeviceTensors([]DeviceTensor{{Name: "n", Shape: []int{-2}}}); err == nil {
		t.Error("a negative dimension encoded")
	}
}

func FuzzDecodeDeviceTensors(f *testing.F) {
	good, _ := EncodeDeviceTensors([]DeviceTensor{{Name: "a", Shape: []int{2}, Offset: 8}})
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := DecodeDeviceTensors(b)
		if err != nil {
			return
		}
		again, err := EncodeDeviceTensors(ts)
		if err != nil {
			t.Fatal(err)
		}
		if ts2, err := DecodeDeviceTensors(again); err != nil || !reflect.DeepEqual(ts, ts2) {
			t.Fatalf("does not survive re-encoding: %v", err)
		}
	})
}

// splitMemory is Memory as a SplitTransport: a split message goes as one,
// marked and its head's length prefixed, so that the faults strike split
// frames as they strike whole ones.
type splitMemory struct{ *Memory }

func (m splitMemory) Splits() bool { return true }

func (m splitMemory) Publish(subject string, data []byte) error {
	return m.Memory.Publish(subject, append([]byte{0}, data...))
}

func (m splitMemory) PublishSplit(subject string, head, body []byte) error {
	msg := append([]byte{1, byte(len(head) >> 8), byte(len(head))}, head...)
	return m.Memory.Publish(subject, append(msg, body...))
}

func (m splitMemory) Subscribe(subject string, fn func([]byte)) (func(), error) {
	return m.SubscribeSplit(subject, func(head, body []byte) {
		if head == nil {
			fn(body)
		}
	})
}

func (m splitMemory) SubscribeSplit(subject string, fn func(head, body []byte)) (func(), error) {
	return m.Memory.Subscribe(subject, func(msg []byte) {
		if msg[0] == 0 {
			fn(nil, msg[1:])
			return
		}
		n := int(msg[1])<<8 | int(msg[2])
		fn(msg[3:3+n], msg[3+n:])
	})
}

// TestSplitFramesSurviveFaults: over a transport that carries payloads
// apart from their frames' fields, large chunks go from the sender's
// memory (lent until SendPayload returns, so resent from there), small
// ones whole, and every message arrives exact over a faulty link.
func TestSplitFramesSurviveFaults(t *testing.T) {
	m := splitMemory{NewMemory(7, Faults{Drop: 0.1, Duplicate: 0.1, Reorder: 0.2, Delay: 5 * time.Millisecond}, 1<<17)}
	a, b := endpointPair(t, m)
	if a.split == nil {
		t.Fatal("the endpoint does not split its frames")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rng := rand.New(rand.NewSource(8))
	sizes := []int{3, 1 << 14, 1<<15 + 5, 1 << 17, 3<<16 + 11}
	errs := make(chan error, 1)
	var sent [][]float32
	for _, n := range sizes {
		x := make([]float32, n)
		for i := range x {
			x[i] = rng.Float32()
		}
		sent = append(sent, x)
	}
	go func() {
		for i, x := range sent {
			p, err := TensorPayload([]Tensor{{Name: "x", Shape: []int{len(x)}, F32: x}})
			if err == nil {
				err = a.SendPayload(ctx, 1, Key{Iter: 2, MB: int32(i), Dir: 'g'}, p)
			}
			if err != nil {
				errs <- err
				return
			}
			for j := range x { // ours again: nothing resent may read it now
				x[j] = -1
			}
		}
		errs <- nil
	}()
	for i, x := range sizes {
		msg, err := b.Receive(ctx, Key{Iter: 2, MB: int32(i), Dir: 'g'})
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeTensorsView(msg)
		if err != nil || len(got[0].F32) != x {
			t.Fatalf("message %d: %v", i, err)
		}
		for _, v := range got[0].F32 {
			if v < 0 {
				t.Fatalf("message %d carries bytes changed after its send returned", i)
			}
		}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d frames, %d resent", a.Stats().Sent, a.Stats().Resent)
}

// TestBF16Tensors: a bf16 tensor crosses in 2 bytes an element, rounded to
// nearest even, and reads back widened, saying it was bf16; a spec whose
// bytes are not 2 an element is refused.
func TestBF16Tensors(t *testing.T) {
	vals := []float32{1, -2.5, 3.14159, 1e-3, 65504, 0}
	f32, err := EncodeTensors([]Tensor{{Name: "x", Shape: []int{2, 3}, F32: vals}})
	if err != nil {
		t.Fatal(err)
	}
	b16, err := EncodeTensors([]Tensor{{Name: "x", Shape: []int{2, 3}, F32: vals, BF16: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(f32)-len(b16) != 2*len(vals) {
		t.Errorf("a float32 message of %d bytes, a bf16 one of %d: want %d fewer", len(f32), len(b16), 2*len(vals))
	}
	ts, err := DecodeTensors(b16)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || !ts[0].BF16 || len(ts[0].F32) != len(vals) {
		t.Fatalf("decoded %+v", ts)
	}
	for i, v := range vals {
		if want := tensor.RoundBF16(v); ts[0].F32[i] != want {
			t.Errorf("element %d: %g, want %g (%g rounded)", i, ts[0].F32[i], want, v)
		}
	}
	if _, err := LayoutTensors([]TensorSpec{{Name: "x", Shape: []int{3}, BF16: true, Data: Bytes(make([]byte, 12))}}); err == nil {
		t.Error("12 bytes for 3 bf16 elements were accepted")
	}
}

package wire

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func sampleFrame() *Frame {
	return &Frame{Version: FrameVersion, Kind: KindData, Run: "run-1", Gen: 2, Iter: 7, MB: 3, Edge: 1, Dir: 'g',
		From: 4, Chunk: 1, Chunks: 3, Seq: 99, Payload: []byte{1, 2, 3}}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range []*Frame{sampleFrame(), {Version: FrameVersion, Kind: KindAck, Run: "", Dir: 'a', Edge: -1, From: -1, Seq: 1 << 60, Payload: []byte{}}} {
		b, err := EncodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		g, err := DecodeFrame(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(f, g) {
			t.Fatalf("%+v → %+v", f, g)
		}
	}
}

func TestFrameRefusals(t *testing.T) {
	good, _ := EncodeFrame(sampleFrame())
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "needs 1 bytes"},
		{"huge array", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, "declares 4294967295"},
		{"huge payload", append(append([]byte{}, good[:len(good)-4]...), 0xc6, 0x7f, 0xff, 0xff), "declares"},
		{"truncated", good[:len(good)-1], "needs"},
		{"trailing", append(append([]byte{}, good...), 0), "after the frame"},
		{"not an array", []byte{0x01}, "want an array"},
		{"few fields", []byte{0x93, 1, 1, 0xa0}, "3 fields"},
	}
	for _, tc := range cases {
		if _, err := DecodeFrame(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	bad := sampleFrame()
	bad.Version = 9
	b, _ := EncodeFrame(bad)
	if _, err := DecodeFrame(b); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("version: %v", err)
	}
}

// TestHugeLengthIsNotAllocated: a 5-byte frame declaring a 4 GiB array, and
// a tensor message declaring a huge shape, are refused without allocating.
func TestHugeLengthIsNotAllocated(t *testing.T) {
	inputs := [][]byte{
		{0xdd, 0xff, 0xff, 0xff, 0xff},
		{0xc6, 0xff, 0xff, 0xff, 0xf0},
		{0x91, 0x94, 0xa1, 'x', 0x00, 0x93, 0xce, 0x7f, 0xff, 0xff, 0xff, 0xce, 0x7f, 0xff, 0xff, 0xff, 0xce, 0x7f, 0xff, 0xff, 0xff, 0xc4, 0x00},
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 100; i++ {
		for _, in := range inputs {
			DecodeFrame(in)
			DecodeTensors(in)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 600; per > 1024 {
		t.Fatalf("%d bytes allocated per decode of a tiny hostile input", per)
	}
}

func TestTensorsRoundTrip(t *testing.T) {
	in := []Tensor{{Name: "a", Shape: []int{2, 2}, F32: []float32{1, -2, 3.5, 0}}, {Name: "idx", Shape: []int{3}, I32: []int32{0, -1, 7}}, {Name: "s", Shape: []int{}, F32: []float32{9}}}
	b, err := EncodeTensors(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeTensors(b)
	if err != nil {
		t.Fatal(err)
	}
	out[2].Shape = []int{}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("%+v\n%+v", in, out)
	}
}

func FuzzDecodeFrame(f *testing.F) {
	good, _ := EncodeFrame(sampleFrame())
	f.Add(good)
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			return
		}
		again, err := EncodeFrame(fr)
		if err != nil {
			t.Fatal(err)
		}
		fr2, err := DecodeFrame(again)
		if err != nil || !reflect.DeepEqual(fr, fr2) {
			t.Fatalf("a decoded frame does not survive re-encoding: %v", err)
		}
	})
}

func FuzzDecodeTensors(f *testing.F) {
	good, _ := EncodeTensors([]Tensor{{Name: "a", Shape: []int{2}, F32: []float32{1, 2}}, {Name: "i", Shape: []int{1}, I32: []int32{3}}})
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := DecodeTensors(b)
		if err != nil {
			return
		}
		if _, err := EncodeTensors(ts); err != nil {
			t.Fatal(err)
		}
	})
}

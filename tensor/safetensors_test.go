package tensor

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

func TestSafetensorsRoundTrip(t *testing.T) {
	in := []Named{
		{Name: "b.weight", Shape: []int{2, 3}, F32: []float32{1, 2, 3, 4, 5, 6}},
		{Name: "0/tokens", Shape: []int{2}, I32: []int32{7, -1}},
		{Name: "a.scalar", Shape: []int{}, F32: []float32{3.5}},
	}
	data, err := EncodeSafetensors(in, map[string]string{"step": "3"})
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint64(data); (8+n)%8 != 0 {
		t.Errorf("header of %d bytes is not padded to 8", n)
	}
	out, meta, err := DecodeSafetensors(data)
	if err != nil {
		t.Fatal(err)
	}
	if meta["step"] != "3" || len(out) != 3 || out[0].Name != "0/tokens" || !reflect.DeepEqual(out[2].F32, in[0].F32) || !reflect.DeepEqual(out[0].I32, in[1].I32) {
		t.Fatalf("round trip: %+v %v", out, meta)
	}
}

func TestSafetensorsRefusals(t *testing.T) {
	good, _ := EncodeSafetensors([]Named{{Name: "w", Shape: []int{2}, F32: []float32{1, 2}}}, nil)
	header := func(h string) []byte {
		b := make([]byte, 8, 8+len(h)+8)
		binary.LittleEndian.PutUint64(b, uint64(len(h)))
		return append(append(b, h...), make([]byte, 8)...)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"short", []byte{1, 2}, "too short"},
		{"huge header", append([]byte{255, 255, 255, 255, 255, 255, 255, 0}, good[8:]...), "does not fit"},
		{"bad json", header("{"), "header"},
		{"range past end", header(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`), "do not hold"},
		{"shape vs bytes", header(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}}`), "do not hold"},
		{"dtype", header(`{"w":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}}`), "is not F32 or I32"},
		{"overlap", header(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`), "overlap"},
		{"same bytes", header(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), "overlap"},
		{"gap between", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}}`), "overlap"},
		{"gap before", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`), "overlap"},
		{"gap after", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), "overlap"},
		{"dtype's size", header(`{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}}`), "do not hold"},
		{"negative dim", header(`{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`), "bad shape"},
		{"huge dims", header(`{"w":{"dtype":"F32","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,8]}}`), "bad shape"},
	} {
		if _, _, err := DecodeSafetensors(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := EncodeSafetensors([]Named{{Name: "w", Shape: []int{3}, F32: []float32{1}}}, nil); err == nil {
		t.Error("a short tensor encoded")
	}
}

// FuzzDecodeSafetensors: never panics, never allocates more than the input
// promises, and what decodes re-encodes to something that decodes the same.
func FuzzDecodeSafetensors(f *testing.F) {
	good, _ := EncodeSafetensors([]Named{{Name: "w", Shape: []int{2}, F32: []float32{1, 2}}, {Name: "i", Shape: []int{1}, I32: []int32{5}}}, map[string]string{"k": "v"})
	f.Add(good)
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '})
	f.Fuzz(func(t *testing.T, data []byte) {
		out, meta, err := DecodeSafetensors(data)
		if err != nil {
			return
		}
		again, err := EncodeSafetensors(out, meta)
		if err != nil {
			t.Fatalf("decoded entries do not re-encode: %v", err)
		}
		back, _, err := DecodeSafetensors(again)
		if err != nil || len(back) != len(out) {
			t.Fatalf("re-encoded file does not decode: %v", err)
		}
	})
}

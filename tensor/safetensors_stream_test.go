package tensor

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

// TestStreamMatchesEncode: a streamed file is byte for byte what
// EncodeSafetensors makes of the same tensors, and decodes back to them.
func TestStreamMatchesEncode(t *testing.T) {
	entries := []Named{
		{Name: "b.weight", Shape: []int{2, 3}, F32: []float32{1, 2, 3, 4, 5, 6}},
		{Name: "a.ids", Shape: []int{2}, I32: []int32{7, -8}},
		{Name: "c.scalar", Shape: []int{}, F32: []float32{9}},
	}
	want, err := EncodeSafetensors(entries, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Named{}
	var heads []Head
	for _, e := range entries {
		byName[e.Name] = e
		dt := "F32"
		if e.I32 != nil {
			dt = "I32"
		}
		heads = append(heads, Head{Name: e.Name, Shape: e.Shape, DType: dt})
	}
	var got bytes.Buffer
	err = StreamSafetensors(&got, heads, map[string]string{"k": "v"}, func(h Head, w io.Writer) error {
		e := byName[h.Name]
		if e.F32 != nil {
			return binary.Write(w, binary.LittleEndian, e.F32)
		}
		return binary.Write(w, binary.LittleEndian, e.I32)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("streamed file differs from the encoded one:\n%q\n%q", got.Bytes(), want)
	}
	back, _, err := DecodeSafetensors(got.Bytes())
	if err != nil || len(back) != 3 || !reflect.DeepEqual(back[0].I32, []int32{7, -8}) {
		t.Fatalf("decoded %v, %v", back, err)
	}
}

func TestStreamChecksLengths(t *testing.T) {
	heads := []Head{{Name: "w", Shape: []int{4}, DType: "F32"}}
	err := StreamSafetensors(io.Discard, heads, nil, func(h Head, w io.Writer) error {
		_, err := w.Write(make([]byte, 12))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "wrote 12 bytes") {
		t.Fatalf("a short tensor was not caught: %v", err)
	}
	if err := StreamSafetensors(io.Discard, []Head{{Name: "w", DType: "F64"}}, nil, nil); err == nil {
		t.Fatal("an unknown dtype was accepted")
	}
}

// TestDecodeFromMatchesDecode: a file read as a stream gives what the
// whole file decodes to, in the order of its bytes; a cut or padded stream
// is refused.
func TestDecodeFromMatchesDecode(t *testing.T) {
	entries := []Named{
		{Name: "b.weight", Shape: []int{2, 3}, F32: []float32{1, 2, 3, 4, 5, 6}},
		{Name: "a.ids", Shape: []int{2}, I32: []int32{7, -8}},
		{Name: "c.empty", Shape: []int{0}, F32: []float32{}},
		{Name: "d.big", Shape: []int{40000}, F32: make([]float32, 40000)},
	}
	entries[3].F32[39999] = 3
	data, err := EncodeSafetensors(entries, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	want, wantMeta, err := DecodeSafetensors(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{-1, int64(len(data))} {
		var got []Named
		meta, err := DecodeSafetensorsFrom(bytes.NewReader(data), size, func(n Named) error { got = append(got, n); return nil })
		if err != nil {
			t.Fatal(err)
		}
		checkSame(t, got, want, meta, wantMeta)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"cut", data[:len(data)-4], "stream ends"},
		{"padded", append(append([]byte(nil), data...), 0, 0, 0, 0), "after the last tensor"},
		{"short header", data[:5], "header length"},
	} {
		for _, size := range []int64{-1, int64(len(data))} {
			_, err := DecodeSafetensorsFrom(bytes.NewReader(tc.data), size, func(Named) error { return nil })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s (size %d): got %v, want %q", tc.name, size, err, tc.want)
			}
		}
	}
}

func checkSame(t *testing.T, got, want []Named, meta, wantMeta map[string]string) {
	t.Helper()
	if !reflect.DeepEqual(meta, wantMeta) || len(got) != len(want) {
		t.Fatalf("got %d entries and %v, want %d and %v", len(got), meta, len(want), wantMeta)
	}
	byName := map[string]Named{}
	for _, n := range got {
		byName[n.Name] = n
	}
	for _, w := range want {
		if !reflect.DeepEqual(byName[w.Name], w) {
			t.Errorf("%s: got %+v, want %+v", w.Name, byName[w.Name].Shape, w.Shape)
		}
	}
}

func TestWriteF32(t *testing.T) {
	v := make([]float32, 50000)
	for i := range v {
		v[i] = float32(i) - 0.5
	}
	var got, want bytes.Buffer
	if err := WriteF32(&got, v); err != nil {
		t.Fatal(err)
	}
	binary.Write(&want, binary.LittleEndian, v)
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("WriteF32 differs from binary.Write")
	}
}

// FuzzDecodeSafetensorsFrom: the streaming decoder never panics, and it
// accepts exactly what DecodeSafetensors accepts, with the same tensors.
func FuzzDecodeSafetensorsFrom(f *testing.F) {
	good, _ := EncodeSafetensors([]Named{{Name: "w", Shape: []int{2}, F32: []float32{1, 2}}, {Name: "i", Shape: []int{1}, I32: []int32{5}}}, map[string]string{"k": "v"})
	f.Add(good)
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '})
	f.Fuzz(func(t *testing.T, data []byte) {
		whole, _, errWhole := DecodeSafetensors(data)
		for _, size := range []int64{-1, int64(len(data))} {
			var got []Named
			_, err := DecodeSafetensorsFrom(bytes.NewReader(data), size, func(n Named) error { got = append(got, n); return nil })
			if (err == nil) != (errWhole == nil) {
				t.Fatalf("stream (size %d): %v; whole: %v", size, err, errWhole)
			}
			if err != nil {
				continue
			}
			byName := map[string]Named{}
			for _, n := range got {
				byName[n.Name] = n
			}
			for _, w := range whole {
				if g := byName[w.Name]; !sameNamed(g, w) {
					t.Fatalf("%s differs: %+v, whole %+v", w.Name, g, w)
				}
			}
		}
	})
}

// sameNamed says whether a and b are one tensor: name, shape and values,
// float32s compared by their bits (a NaN read from a file equals itself,
// which reflect.DeepEqual denies).
func sameNamed(a, b Named) bool {
	if a.Name != b.Name || !reflect.DeepEqual(a.Shape, b.Shape) || !reflect.DeepEqual(a.I32, b.I32) || len(a.F32) != len(b.F32) || (a.F32 == nil) != (b.F32 == nil) {
		return false
	}
	for i := range a.F32 {
		if math.Float32bits(a.F32[i]) != math.Float32bits(b.F32[i]) {
			return false
		}
	}
	return true
}

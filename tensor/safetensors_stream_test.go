package tensor

import (
	"bytes"
	"encoding/binary"
	"io"
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

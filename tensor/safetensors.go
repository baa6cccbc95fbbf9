package tensor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// Named is one entry of a safetensors file: float32 (F32) or int32 (I32)
// data, little-endian, row-major.
type Named struct {
	Name  string
	Shape []int
	F32   []float32 // set for F32
	I32   []int32   // set for I32
}

type stEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// maxHeader bounds a safetensors header (the format's own limit is 100 MB).
const maxHeader = 100 << 20

// EncodeSafetensors writes entries in the safetensors format: an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the data. Entries are written sorted by name.
func EncodeSafetensors(entries []Named, metadata map[string]string) ([]byte, error) {
	sorted := append([]Named(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var data bytes.Buffer
	for _, e := range sorted {
		if _, dup := header[e.Name]; dup || e.Name == "__metadata__" {
			return nil, fmt.Errorf("safetensors: name %q used twice", e.Name)
		}
		start := int64(data.Len())
		dtype := "F32"
		switch {
		case e.F32 != nil && e.I32 == nil:
			if len(e.F32) != Size(e.Shape) {
				return nil, fmt.Errorf("safetensors: %q has %d values for shape %v", e.Name, len(e.F32), e.Shape)
			}
			binary.Write(&data, binary.LittleEndian, e.F32)
		case e.I32 != nil && e.F32 == nil:
			if len(e.I32) != Size(e.Shape) {
				return nil, fmt.Errorf("safetensors: %q has %d values for shape %v", e.Name, len(e.I32), e.Shape)
			}
			dtype = "I32"
			binary.Write(&data, binary.LittleEndian, e.I32)
		default:
			if Size(e.Shape) != 0 {
				return nil, fmt.Errorf("safetensors: %q needs exactly one of F32 and I32", e.Name)
			}
		}
		shape := e.Shape
		if shape == nil {
			shape = []int{}
		}
		header[e.Name] = stEntry{dtype, shape, [2]int64{start, int64(data.Len())}}
	}
	h, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	for len(h)%8 != 0 { // the format pads the header with spaces
		h = append(h, ' ')
	}
	out := make([]byte, 8, 8+len(h)+data.Len())
	binary.LittleEndian.PutUint64(out, uint64(len(h)))
	out = append(out, h...)
	return append(out, data.Bytes()...), nil
}

// DecodeSafetensors reads a safetensors file with F32 and I32 entries. It
// checks every length and range against the file's size before allocating.
func DecodeSafetensors(b []byte) ([]Named, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("safetensors: %d bytes is too short for a header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("safetensors: header length %d does not fit in the file of %d bytes", n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, nil, fmt.Errorf("safetensors: header: %v", err)
	}
	data := b[8+n:]
	var meta map[string]string
	var out []Named
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "__metadata__" {
			if err := json.Unmarshal(raw[name], &meta); err != nil {
				return nil, nil, fmt.Errorf("safetensors: __metadata__: %v", err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(raw[name], &e); err != nil {
			return nil, nil, fmt.Errorf("safetensors: %q: %v", name, err)
		}
		t, err := decodeEntry(name, e, data)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, t)
	}
	return out, meta, nil
}

func decodeEntry(name string, e stEntry, data []byte) (Named, error) {
	elems := int64(1)
	for _, d := range e.Shape {
		if d < 0 || d > math.MaxInt32 || elems > math.MaxInt64/int64(d+1) {
			return Named{}, fmt.Errorf("safetensors: %q: bad shape %v", name, e.Shape)
		}
		elems *= int64(d)
	}
	lo, hi := e.Offsets[0], e.Offsets[1]
	if lo < 0 || hi < lo || hi > int64(len(data)) || hi-lo != 4*elems {
		return Named{}, fmt.Errorf("safetensors: %q: bytes [%d, %d) do not hold %d 4-byte values inside %d bytes of data", name, lo, hi, elems, len(data))
	}
	t := Named{Name: name, Shape: e.Shape}
	chunk := data[lo:hi]
	switch e.DType {
	case "F32":
		t.F32 = make([]float32, elems)
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(binary.LittleEndian.Uint32(chunk[4*i:]))
		}
	case "I32":
		t.I32 = make([]int32, elems)
		for i := range t.I32 {
			t.I32[i] = int32(binary.LittleEndian.Uint32(chunk[4*i:]))
		}
	default:
		return Named{}, fmt.Errorf("safetensors: %q: dtype %q is not F32 or I32", name, e.DType)
	}
	return t, nil
}

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
	h, err := ReadSafetensorsHeader(b)
	if err != nil {
		return nil, nil, err
	}
	out := make([]Named, 0, len(h.Entries))
	for _, e := range h.Entries {
		t, err := decodeEntry(e, b)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, t)
	}
	return out, h.Metadata, nil
}

// SafetensorsHeader is a safetensors file's header: its entries sorted by
// name, each with the byte range of its data in the file, and the metadata.
type SafetensorsHeader struct {
	Entries  []SafetensorsEntry
	Metadata map[string]string
	DataAt   int64 // where the data section starts in the file
}

// SafetensorsEntry is one tensor of a safetensors header. Its data is the
// file's bytes [Start, End): Start and End are checked to lie inside the
// file and to hold exactly Elems values of the dtype's size when the dtype
// is one of the sizes known here (F64, F32, I64, I32, F16, BF16, I16, U8...).
type SafetensorsEntry struct {
	Name       string
	DType      string
	Shape      []int
	Start, End int64
}

// dtypeBytes is the size of a value of each safetensors dtype.
var dtypeBytes = map[string]int64{"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4,
	"F16": 2, "BF16": 2, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1}

// ReadSafetensorsHeader reads the header at the start of b, which may be
// the file's first bytes only (for a file read in parts or mapped): every
// entry's range is checked against size when size > 0, else against len(b).
func ReadSafetensorsHeader(b []byte) (*SafetensorsHeader, error) {
	return ReadSafetensorsHeaderSized(b, int64(len(b)))
}

// ReadSafetensorsHeaderSized is ReadSafetensorsHeader for a file of size
// bytes of which b holds at least the header.
func ReadSafetensorsHeaderSized(b []byte, size int64) (*SafetensorsHeader, error) {
	if len(b) < 8 || size < 8 {
		return nil, fmt.Errorf("safetensors: %d bytes is too short for a header length", min(int64(len(b)), size))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(size-8) || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("safetensors: header length %d does not fit in the file of %d bytes", n, size)
	}
	return parseHeader(b[8:8+n], size-int64(8+n))
}

// parseHeader reads a header's JSON, which a data section of data bytes
// follows (-1: a stream's, of a size not known yet).
func parseHeader(js []byte, data int64) (*SafetensorsHeader, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("safetensors: header: %v", err)
	}
	h := &SafetensorsHeader{DataAt: int64(8 + len(js))}
	limit := data
	if limit < 0 {
		limit = math.MaxInt64
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "__metadata__" {
			if err := json.Unmarshal(raw[name], &h.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors: __metadata__: %v", err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(raw[name], &e); err != nil {
			return nil, fmt.Errorf("safetensors: %q: %v", name, err)
		}
		entry, err := checkEntry(name, e, limit)
		if err != nil {
			return nil, err
		}
		h.Entries = append(h.Entries, entry)
	}
	if err := checkTiling(h.Entries, data); err != nil {
		return nil, err
	}
	for i := range h.Entries {
		h.Entries[i].Start += h.DataAt
		h.Entries[i].End += h.DataAt
	}
	return h, nil
}

// checkTiling refuses entries whose byte ranges overlap or leave a gap:
// taken in the order of their bytes they must tile the data section, from
// its first byte to its last (data bytes; -1 for a stream, whose end is
// where the last entry ends). A tensor that overlaps another reads its
// bytes; a gap hides bytes no tensor owns.
func checkTiling(entries []SafetensorsEntry, data int64) error {
	order := make([]SafetensorsEntry, len(entries))
	copy(order, entries)
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].Start != order[j].Start {
			return order[i].Start < order[j].Start
		}
		return order[i].End < order[j].End
	})
	at, after := int64(0), ""
	for _, e := range order {
		if e.Start != at {
			if after == "" {
				return fmt.Errorf("safetensors: %q: bytes [%d, %d) overlap another tensor's or leave a gap: the data starts at 0", e.Name, e.Start, e.End)
			}
			return fmt.Errorf("safetensors: %q: bytes [%d, %d) overlap %q's or leave a gap after them (they end at %d)", e.Name, e.Start, e.End, after, at)
		}
		at, after = e.End, e.Name
	}
	if data >= 0 && at != data {
		return fmt.Errorf("safetensors: the tensors end at byte %d of a data section of %d: a gap no tensor owns (ranges must tile the data, without overlap)", at, data)
	}
	return nil
}

// checkEntry checks an entry's shape and byte range against a data section
// of data bytes; its range stays relative to the data section.
func checkEntry(name string, e stEntry, data int64) (SafetensorsEntry, error) {
	elems := int64(1)
	for _, d := range e.Shape {
		if d < 0 || d > math.MaxInt32 || elems > math.MaxInt64/int64(d+1) {
			return SafetensorsEntry{}, fmt.Errorf("safetensors: %q: bad shape %v", name, e.Shape)
		}
		elems *= int64(d)
	}
	size, known := dtypeBytes[e.DType]
	if !known {
		size = 4 // checked by whoever reads it
	}
	lo, hi := e.Offsets[0], e.Offsets[1]
	if lo < 0 || hi < lo || hi > data || (known && elems > math.MaxInt64/8) || (known && hi-lo != size*elems) {
		return SafetensorsEntry{}, fmt.Errorf("safetensors: %q: bytes [%d, %d) do not hold %d %d-byte values inside %d bytes of data", name, lo, hi, elems, size, data)
	}
	return SafetensorsEntry{Name: name, DType: e.DType, Shape: e.Shape, Start: lo, End: hi}, nil
}

func decodeEntry(e SafetensorsEntry, b []byte) (Named, error) {
	t := Named{Name: e.Name, Shape: e.Shape}
	chunk := b[e.Start:e.End]
	elems := len(chunk) / 4
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
		return Named{}, fmt.Errorf("safetensors: %q: dtype %q is not F32 or I32", e.Name, e.DType)
	}
	return t, nil
}

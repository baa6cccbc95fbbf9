package tensor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
)

// Head is a safetensors entry known by its shape before its data: what a
// streamed file is made of.
type Head struct {
	Name  string
	Shape []int
	DType string // "F32" or "I32"
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// StreamSafetensors writes a safetensors file to w without holding its data:
// the header from heads (sorted by name, as EncodeSafetensors sorts them),
// then each tensor's bytes, written by data(head, w) in that order, each
// checked for its length. A model's weights are never all in memory at once.
func StreamSafetensors(w io.Writer, heads []Head, metadata map[string]string, data func(h Head, w io.Writer) error) error {
	sorted := append([]Head(nil), heads...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	off := int64(0)
	for _, h := range sorted {
		if _, dup := header[h.Name]; dup || h.Name == "__metadata__" {
			return fmt.Errorf("safetensors: name %q used twice", h.Name)
		}
		if h.DType != "F32" && h.DType != "I32" {
			return fmt.Errorf("safetensors: %q: dtype %q is not F32 or I32", h.Name, h.DType)
		}
		shape := h.Shape
		if shape == nil {
			shape = []int{}
		}
		n := 4 * int64(Size(shape))
		header[h.Name] = stEntry{h.DType, shape, [2]int64{off, off + n}}
		off += n
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	var lenb [8]byte
	binary.LittleEndian.PutUint64(lenb[:], uint64(len(hb)))
	if _, err := w.Write(append(lenb[:], hb...)); err != nil {
		return err
	}
	for _, h := range sorted {
		cw := &countingWriter{w: w}
		if err := data(h, cw); err != nil {
			return err
		}
		if want := 4 * int64(Size(h.Shape)); cw.n != want {
			return fmt.Errorf("safetensors: %q: wrote %d bytes, its shape %v holds %d", h.Name, cw.n, h.Shape, want)
		}
	}
	return nil
}

// streamBlock is how many bytes a streamed tensor's array grows by at a
// time, at most: a header promising more than the stream holds costs no
// more memory than the stream does.
const streamBlock = 1 << 20

// DecodeSafetensorsFrom reads a safetensors file from r as it arrives, its
// size not known first (a file streamed over the network): the header,
// checked as ReadSafetensorsHeader checks one (the ranges tiling the data
// without overlap), then each F32 or I32 tensor, in the order of its bytes,
// handed to take once whole. After the last tensor the stream must end.
func DecodeSafetensorsFrom(r io.Reader, take func(t Named) error) (map[string]string, error) {
	var lenb [8]byte
	if _, err := io.ReadFull(r, lenb[:]); err != nil {
		return nil, fmt.Errorf("safetensors: reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenb[:])
	if n > maxHeader {
		return nil, fmt.Errorf("safetensors: header length %d is over the limit of %d", n, maxHeader)
	}
	var js bytes.Buffer
	if got, err := io.CopyN(&js, r, int64(n)); err != nil {
		return nil, fmt.Errorf("safetensors: header of %d bytes ends after %d: %w", n, got, err)
	}
	h, err := parseHeader(js.Bytes(), -1)
	if err != nil {
		return nil, err
	}
	order := append([]SafetensorsEntry(nil), h.Entries...)
	sort.SliceStable(order, func(i, j int) bool { return order[i].Start < order[j].Start })
	buf := make([]byte, 64<<10)
	for _, e := range order {
		t, err := readEntry(r, e, buf)
		if err != nil {
			return nil, err
		}
		if err := take(t); err != nil {
			return nil, err
		}
	}
	if k, _ := io.ReadFull(r, buf[:1]); k != 0 {
		return nil, fmt.Errorf("safetensors: bytes after the last tensor: a gap no tensor owns")
	}
	return h.Metadata, nil
}

// readEntry reads e's bytes (its range relative to the data section) from
// r, growing its array as they come.
func readEntry(r io.Reader, e SafetensorsEntry, buf []byte) (Named, error) {
	t := Named{Name: e.Name, Shape: e.Shape}
	if e.DType != "F32" && e.DType != "I32" {
		return Named{}, fmt.Errorf("safetensors: %q: dtype %q is not F32 or I32", e.Name, e.DType)
	}
	total := (e.End - e.Start) / 4
	var f32 []float32
	var i32 []int32
	for done := int64(0); done < total; {
		k := min(total-done, int64(len(buf)/4))
		if _, err := io.ReadFull(r, buf[:4*k]); err != nil {
			return Named{}, fmt.Errorf("safetensors: %q: the stream ends %d bytes into its %d: %w", e.Name, 4*done, 4*total, err)
		}
		if e.DType == "F32" {
			if f32 == nil {
				f32 = make([]float32, 0, min(total, streamBlock/4))
			}
			for i := int64(0); i < k; i++ {
				f32 = append(f32, math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])))
			}
		} else {
			if i32 == nil {
				i32 = make([]int32, 0, min(total, streamBlock/4))
			}
			for i := int64(0); i < k; i++ {
				i32 = append(i32, int32(binary.LittleEndian.Uint32(buf[4*i:])))
			}
		}
		done += k
	}
	if e.DType == "F32" {
		t.F32 = f32
		if t.F32 == nil {
			t.F32 = []float32{}
		}
	} else {
		t.I32 = i32
		if t.I32 == nil {
			t.I32 = []int32{}
		}
	}
	return t, nil
}

// WriteF32 writes v to w as little-endian float32 bytes, a block at a time:
// a tensor streamed into a safetensors file without a copy of it whole.
func WriteF32(w io.Writer, v []float32) error {
	var buf [64 << 10]byte
	for len(v) > 0 {
		k := min(len(v), len(buf)/4)
		for i, x := range v[:k] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
		}
		if _, err := w.Write(buf[:4*k]); err != nil {
			return err
		}
		v = v[k:]
	}
	return nil
}

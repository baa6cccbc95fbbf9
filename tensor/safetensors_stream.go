package tensor

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
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

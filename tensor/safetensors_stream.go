package tensor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"unsafe"
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

// streamBlock is the least block a streamed tensor is read in: a tensor
// of a stream whose size is not known is read in blocks that double from
// it, and made one array once whole, so that a header promising more than
// the stream holds costs no more memory than the stream does.
const streamBlock = 1 << 20

// DecodeSafetensorsFrom reads a safetensors file from r as it arrives
// (a file streamed over the network): the header, checked as
// ReadSafetensorsHeader checks one (the ranges tiling the data without
// overlap), then each F32 or I32 tensor, in the order of its bytes, handed
// to take once whole. After the last tensor the stream must end. size is
// the stream's size when known (a file's, which then bounds what the
// header may promise, and each tensor is read straight into its array),
// -1 when not.
func DecodeSafetensorsFrom(r io.Reader, size int64, take func(t Named) error) (map[string]string, error) {
	var lenb [8]byte
	if _, err := io.ReadFull(r, lenb[:]); err != nil {
		return nil, fmt.Errorf("safetensors: reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenb[:])
	if n > maxHeader || size >= 0 && n > uint64(max(size-8, 0)) {
		return nil, fmt.Errorf("safetensors: header length %d does not fit in the file of %d bytes (nor under the limit of %d)", n, size, maxHeader)
	}
	var js bytes.Buffer
	if got, err := io.CopyN(&js, r, int64(n)); err != nil {
		return nil, fmt.Errorf("safetensors: header of %d bytes ends after %d: %w", n, got, err)
	}
	data := int64(-1)
	if size >= 0 {
		data = size - 8 - int64(n)
	}
	h, err := parseHeader(js.Bytes(), data)
	if err != nil {
		return nil, err
	}
	order := append([]SafetensorsEntry(nil), h.Entries...)
	sort.SliceStable(order, func(i, j int) bool { return order[i].Start < order[j].Start })
	buf := make([]byte, 64<<10)
	for _, e := range order {
		t, err := readEntry(r, e, buf, size >= 0)
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
// r: into its array at once when the stream's size vouched for them
// (known), else in doubling blocks first.
func readEntry(r io.Reader, e SafetensorsEntry, buf []byte, known bool) (Named, error) {
	if e.DType != "F32" && e.DType != "I32" {
		return Named{}, fmt.Errorf("safetensors: %q: dtype %q is not F32 or I32", e.Name, e.DType)
	}
	total := (e.End - e.Start) / 4
	var words []uint32
	if known {
		words = make([]uint32, total)
		if err := readWords(r, words, buf); err != nil {
			return Named{}, fmt.Errorf("safetensors: %q: the stream ends inside its %d bytes: %w", e.Name, 4*total, err)
		}
	} else {
		var blocks [][]uint32
		for done, block := int64(0), int64(streamBlock/4); done < total; block *= 2 {
			b := make([]uint32, min(block, total-done))
			if err := readWords(r, b, buf); err != nil {
				return Named{}, fmt.Errorf("safetensors: %q: the stream ends inside its %d bytes: %w", e.Name, 4*total, err)
			}
			blocks, done = append(blocks, b), done+int64(len(b))
		}
		if len(blocks) == 1 {
			words = blocks[0]
		} else {
			words = make([]uint32, 0, total)
			for i, b := range blocks {
				words = append(words, b...)
				blocks[i] = nil
			}
		}
	}
	t := Named{Name: e.Name, Shape: e.Shape}
	if words == nil {
		words = []uint32{}
	}
	if e.DType == "F32" {
		t.F32 = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(words))), len(words))
	} else {
		t.I32 = unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(words))), len(words))
	}
	return t, nil
}

// readWords fills w with little-endian 32-bit words from r, through buf.
func readWords(r io.Reader, w []uint32, buf []byte) error {
	for len(w) > 0 {
		k := min(len(w), len(buf)/4)
		if _, err := io.ReadFull(r, buf[:4*k]); err != nil {
			return err
		}
		for i := range k {
			w[i] = binary.LittleEndian.Uint32(buf[4*i:])
		}
		w = w[k:]
	}
	return nil
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

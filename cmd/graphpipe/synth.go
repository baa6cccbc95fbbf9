package main

import (
	"archive/zip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/internal/atomicfile"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// synthChunk is how many samples make one step of the synthetic data that
// data synth draws from: sample i is row i mod synthChunk of step
// ⌊i / synthChunk⌋, so that a sample is a function of its index alone.
const synthChunk = 256

// synthOverhead bounds what a file holds beside its arrays: the
// safetensors header, or the zip's and each .npy member's headers.
const (
	synthOverhead      = 64 << 10
	synthOverheadInput = 1 << 10
)

// synth is one data synth: samples [skip, skip+n) of every input of g,
// written to out as safetensors or .npz (by its name).
type synth struct {
	g       *dag.Graph
	out     string
	format  string // "safetensors" or "npz"
	skip, n int
	heads   []tensor.Head
	bytes   uint64 // the file's size, at most
}

// newSynth checks the samples asked for: an index past the largest int
// (--skip), or a file whose size overflows, is refused naming the flag.
func newSynth(g *dag.Graph, out string, skip, n int) (*synth, error) {
	if skip > math.MaxInt-n {
		return nil, usagef("--skip %d: with --samples %d the last sample would be %d + %d - 1, past the largest index, %d", skip, n, skip, n, math.MaxInt)
	}
	s := &synth{g: g, out: out, format: "safetensors", skip: skip, n: n, bytes: synthOverhead}
	if strings.EqualFold(filepath.Ext(out), ".npz") {
		s.format = "npz"
	}
	for _, in := range g.Inputs() {
		shape := []int{n}
		for _, d := range in.Shape {
			shape = append(shape, int(d))
		}
		dt := "F32"
		if in.DType == dag.Int32 {
			dt = "I32"
		}
		s.heads = append(s.heads, tensor.Head{Name: in.Name, Shape: shape, DType: dt})
		hi, size := bits.Mul64(4*uint64(tensor.Size(shape[1:])), uint64(n))
		var carry uint64
		s.bytes, carry = bits.Add64(s.bytes, size+synthOverheadInput, 0)
		if hi != 0 || carry != 0 || size > math.MaxInt64 || s.bytes > math.MaxInt64 {
			return nil, usagef("--samples %d: input %q of %v takes %d bytes a sample; %d samples of it overflow a file's size", n, in.Name, in.Shape, 4*tensor.Size(shape[1:]), n)
		}
	}
	return s, nil
}

// checkSpace refuses, before anything is written, a file larger than the
// free space of the file system it goes to (a temporary file beside the
// target, renamed over it: the old file's space is not free until then).
// A device or a FIFO written through takes what it takes.
func (s *synth) checkSpace() error {
	t, err := atomicfile.Resolve(s.out)
	if err != nil || t.Through {
		return nil // checkOutputs has said what is wrong with it, or it is written through
	}
	dir := filepath.Dir(t.Path)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil // not known: the write says
	}
	free := st.Bavail * uint64(st.Bsize)
	if s.bytes > free {
		return inputf("-o %s: %d samples of %d inputs need up to %s (%d bytes), and %s has %s (%d bytes) free: write fewer (--samples) or elsewhere",
			s.out, s.n, len(s.heads), byteText(int64(s.bytes)), s.bytes, dir, byteText(int64(min(free, math.MaxInt64))), free)
	}
	return nil
}

// write writes the file to w, stopping at the next chunk once ctx ends
// (with its cause: the signal).
func (s *synth) write(ctx context.Context, w io.Writer, ds *stage.Dataset) error {
	if s.format == "npz" {
		return s.writeNpz(ctx, w, ds)
	}
	meta := map[string]string{"graphpipe": fmt.Sprintf("synthetic data of model %q, seed %d, samples [%d, %d)", s.g.Name(), s.g.Seed(), s.skip, s.skip+s.n)}
	return tensor.StreamSafetensors(w, s.heads, meta, func(h tensor.Head, w io.Writer) error {
		return s.writeInput(ctx, w, ds, h)
	})
}

// writeNpz writes an .npz archive as np.savez does (what --data reads):
// one stored member "<input>.npy" per input, little-endian, C order.
func (s *synth) writeNpz(ctx context.Context, w io.Writer, ds *stage.Dataset) error {
	zw := zip.NewWriter(w)
	for _, h := range s.heads {
		mw, err := zw.CreateHeader(&zip.FileHeader{Name: h.Name + ".npy", Method: zip.Store})
		if err != nil {
			return err
		}
		if _, err := mw.Write(npyHeader(h)); err != nil {
			return err
		}
		if err := s.writeInput(ctx, mw, ds, h); err != nil {
			return err
		}
	}
	return zw.Close()
}

// npyHeader is a .npy file's header (format 1.0) for h: the magic, the
// version, the length and the dictionary, padded with spaces to a
// multiple of 64 bytes and ended by a newline.
func npyHeader(h tensor.Head) []byte {
	descr := "<f4"
	if h.DType == "I32" {
		descr = "<i4"
	}
	dims := make([]string, len(h.Shape))
	for i, d := range h.Shape {
		dims[i] = fmt.Sprint(d)
	}
	shape := "(" + strings.Join(dims, ", ") + ")"
	if len(dims) == 1 {
		shape = "(" + dims[0] + ",)"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape)
	pad := 64 - (10+len(dict)+1)%64
	if pad == 64 {
		pad = 0
	}
	dict += strings.Repeat(" ", pad) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
	binary.LittleEndian.PutUint16(b[8:], uint16(len(dict)))
	return append(b, dict...)
}

// writeInput streams samples [skip, skip+n) of one input, a chunk of
// synthetic steps at a time.
func (s *synth) writeInput(ctx context.Context, w io.Writer, ds *stage.Dataset, h tensor.Head) error {
	per := tensor.Size(h.Shape[1:])
	buf := make([]byte, 0, 4*per*synthChunk)
	for i := s.skip; i < s.skip+s.n; {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		step, row := i/synthChunk, i%synthChunk
		take := min(synthChunk-row, s.skip+s.n-i)
		b, err := ds.Inputs(step, synthChunk, map[string]bool{h.Name: true})
		if err != nil {
			return err
		}
		v := b[h.Name]
		buf = buf[:0]
		for k := row * per; k < (row+take)*per; k++ {
			if v.Ints != nil {
				buf = binary.LittleEndian.AppendUint32(buf, uint32(v.Ints[k]))
			} else {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v.Data[k]))
			}
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		i += take
	}
	return nil
}

// signalError is the cause of a context a signal ended.
type signalError struct{ sig syscall.Signal }

func (e *signalError) Error() string { return "stopped by " + signalName(e.sig) }

// stopOnSignal is ctx ended, with a *signalError as its cause, by the
// first SIGINT or SIGTERM; stop stops listening.
func stopOnSignal(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			cancel(&signalError{sig.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(nil)
	}
}

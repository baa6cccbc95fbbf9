package onnx

import (
	"fmt"
	"io"

	"github.com/graphpipe/graphpipe/tensor"
)

// WriteWeights writes the model's weights as safetensors (float32, under
// their names), each read from the model file or its external data as it
// is written.
func (r *Result) WriteWeights(w io.Writer) error {
	heads := make([]tensor.Head, len(r.Weights))
	src := map[string]*stored{}
	for i, wt := range r.Weights {
		shape := make([]int, len(wt.Shape))
		for k, d := range wt.Shape {
			shape[k] = int(d)
		}
		heads[i] = tensor.Head{Name: wt.Name, Shape: shape, DType: "F32"}
		src[wt.Name] = wt.src
	}
	meta := map[string]string{"format": "pt", "source": "graphpipe import"}
	return tensor.StreamSafetensors(w, heads, meta, func(h tensor.Head, w io.Writer) error {
		if err := src[h.Name].writeF32(w); err != nil {
			return fmt.Errorf("weight %q: %w", h.Name, err)
		}
		return nil
	})
}

// WeightBytes is the weights' size as float32.
func (r *Result) WeightBytes() int64 {
	var n int64
	for _, w := range r.Weights {
		n += 4 * w.src.n
	}
	return n
}

package onnx

import (
	"github.com/graphpipe/graphpipe/dag"
)

// kind is what the importer knows of an ONNX value.
type kind int

const (
	kConst  kind = iota // known at import: a shape computation, a Constant
	kWeight             // an initializer, used whole (a parameter or buffer)
	kAct                // an activation: a graphpipe tensor
)

// value is an ONNX value as the importer sees it.
type value struct {
	kind kind
	dims []int64 // ONNX dims; an activation's batch dim holds a·b (N left out)

	// kConst: integers (shape arithmetic, with the batch as a symbol) or
	// floats; weight is the initializer a constant was read from, if any.
	isInt  bool
	ints   []sym
	floats []float64
	weight string

	// kWeight: the initializer, and the permutation a Transpose applied to
	// it (nil: none); the data stays in the file.
	init string
	perm []int64

	// kAct: the graphpipe tensor, whose per-sample shape is canon(); the
	// batch sits in ONNX dim j as a·N·b (j < 0: the value is the same for
	// every sample, as a parameter's is).
	t     string
	dtype dag.DType
	j     int
	a, b  int64
	// prod: the op that made it, when the importer may still fuse into it
	// (a linear awaiting its bias).
	prod int
	from string // the node that made it, for messages
}

// canon is an activation's per-sample shape: its ONNX dims with the batch
// dim replaced by its factors a and b (each left out when 1).
func (v *value) canon() dag.Shape {
	if v.j < 0 {
		return append(dag.Shape{}, v.dims...)
	}
	out := dag.Shape{}
	for i, d := range v.dims {
		if i != v.j {
			out = append(out, d)
			continue
		}
		if v.a > 1 {
			out = append(out, v.a)
		}
		if v.b > 1 {
			out = append(out, v.b)
		}
	}
	return out
}

// cdims maps each ONNX dim of an activation to its per-sample dims.
func (v *value) cdims() [][]int {
	out := make([][]int, len(v.dims))
	k := 0
	for i := range v.dims {
		n := 1
		if i == v.j {
			n = 0
			if v.a > 1 {
				n++
			}
			if v.b > 1 {
				n++
			}
		}
		for c := 0; c < n; c++ {
			out[i] = append(out[i], k)
			k++
		}
	}
	return out
}

// batchFirst reports whether the batch is an activation's first ONNX dim,
// alone (the layout of a graph input, a Conv's, a BatchNormalization's).
func (v *value) batchFirst() bool { return v.j == 0 && v.a == 1 && v.b == 1 }

// elems is the per-sample element count of an activation.
func (v *value) elems() int64 { return v.canon().Elems() }

// symDims is an activation's ONNX dims with the batch as a symbol.
func (v *value) symDims() []sym {
	out := make([]sym, len(v.dims))
	for i, d := range v.dims {
		out[i] = num(d)
		if i == v.j {
			out[i] = sym{c: d, n: 1}
		}
	}
	return out
}

// scalar reports whether a constant holds one element, and its value.
func (v *value) scalar() (float64, bool) {
	if v.kind != kConst {
		return 0, false
	}
	if v.isInt {
		if len(v.ints) != 1 || v.ints[0].n != 0 {
			return 0, false
		}
		return float64(v.ints[0].c), true
	}
	if len(v.floats) != 1 {
		return 0, false
	}
	return v.floats[0], true
}

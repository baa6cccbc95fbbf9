package onnx

import (
	"math"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// fusion is a pattern of nodes recognised as one graphpipe op: its last
// node emits it, the others are skipped.
type fusion struct {
	kind dag.Kind
	x    string // the ONNX value the op reads
}

func (f fusion) emit(n *node) error {
	x := n.c.vals[f.x]
	if x == nil || x.kind != kAct || x.dtype != dag.Float32 {
		return n.refuse("the %s it ends reads %q, which is not a float activation", f.kind, f.x)
	}
	return n.emitLike(x, f.kind, []string{x.t}, nil)
}

// graphIndex is what pattern matching needs of the graph: who produces a
// value and how many nodes read it.
type graphIndex struct {
	c     *converter
	prod  map[string]*onnxpb.NodeProto
	nodes []*onnxpb.NodeProto // the nodes the trained output needs
}

// patterns finds the exporter's erf GELU, x·0.5·(1 + erf(x/√2)) as Div,
// Erf, Add, Mul, Mul (either Mul first), whose inner values nothing else
// reads, and marks it to become one gelu op.
func (c *converter) patterns(nodes []*onnxpb.NodeProto) {
	gi := &graphIndex{c: c, prod: map[string]*onnxpb.NodeProto{}, nodes: nodes}
	for _, n := range nodes {
		for _, o := range n.GetOutput() {
			gi.prod[o] = n
		}
	}
	for _, n := range nodes {
		if n.GetOpType() == "Erf" && n.GetDomain() == "" {
			gi.gelu(n)
		}
	}
}

func (gi *graphIndex) gelu(erf *onnxpb.NodeProto) {
	div := gi.prod[erf.GetInput()[0]]
	if div == nil || div.GetOpType() != "Div" || !gi.scalarIs(div.GetInput()[1], math.Sqrt2) || !gi.once(erf.GetInput()[0]) {
		return
	}
	x := div.GetInput()[0]
	add := gi.soleReader(erf.GetOutput()[0], "Add")
	if add == nil || !gi.scalarIs(other(add, erf.GetOutput()[0]), 1) {
		return
	}
	// x·(1+erf)·0.5, or x·0.5·(1+erf)
	m1 := gi.soleReader(add.GetOutput()[0], "Mul")
	if m1 == nil {
		return
	}
	var last *onnxpb.NodeProto
	switch o := other(m1, add.GetOutput()[0]); {
	case o == x:
		last = gi.soleReader(m1.GetOutput()[0], "Mul")
		if last == nil || !gi.scalarIs(other(last, m1.GetOutput()[0]), 0.5) {
			return
		}
	default:
		half := gi.prod[o]
		if half == nil || half.GetOpType() != "Mul" || !gi.once(o) || other(half, x) == "" || !gi.scalarIs(other(half, x), 0.5) {
			return
		}
		gi.c.folded[half] = true
		last = m1
	}
	for _, n := range []*onnxpb.NodeProto{div, erf, add, m1} {
		if n != last {
			gi.c.folded[n] = true
		}
	}
	gi.c.fused[last] = fusion{kind: dag.GELU, x: x}
}

// once reports whether one node reads value v.
func (gi *graphIndex) once(v string) bool { return gi.c.uses[v] == 1 }

// soleReader is the one node that reads v, if it is of opType.
func (gi *graphIndex) soleReader(v, opType string) *onnxpb.NodeProto {
	if !gi.once(v) {
		return nil
	}
	for _, n := range gi.nodes {
		if n.GetOpType() != opType || n.GetDomain() != "" {
			continue
		}
		for _, in := range n.GetInput() {
			if in == v {
				return n
			}
		}
	}
	return nil
}

// other is a binary node's input that is not v ("" if neither is).
func other(n *onnxpb.NodeProto, v string) string {
	in := n.GetInput()
	switch {
	case len(in) != 2:
		return ""
	case in[0] == v:
		return in[1]
	case in[1] == v:
		return in[0]
	}
	return ""
}

// scalarIs reports whether value v is a constant scalar near want (a
// Constant node's value or a one-element initializer), in float32.
func (gi *graphIndex) scalarIs(v string, want float64) bool {
	var t *onnxpb.TensorProto
	if n := gi.prod[v]; n != nil && n.GetOpType() == "Constant" && len(n.GetAttribute()) == 1 {
		a := n.GetAttribute()[0]
		switch a.GetName() {
		case "value":
			t = a.GetT()
		case "value_float":
			return near32(float64(a.GetF()), want)
		}
	} else if s := gi.c.f.inits[v]; s != nil {
		t = s.t
	}
	if t == nil {
		return false
	}
	s, err := checkTensor(t, gi.c.f.Dir)
	if err != nil || s.n != 1 {
		return false
	}
	f, err := s.floats()
	return err == nil && near32(f[0], want)
}

func near32(got, want float64) bool { return math.Abs(got-want) <= 1e-6*math.Abs(want) }

package stage

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

// kernel computes one op. forward returns the output and whatever backward
// needs (the stash); backward adds into every non-nil gradient of gx (the
// op's inputs) and gp (its parameters).
type kernel[T Num] interface {
	forward(x, p []*Value[T]) (*Value[T], any, error)
	backward(gy *Value[T], x, p []*Value[T], y *Value[T], st any, gx, gp []*Value[T])
}

// OpError is an op that cannot run.
type OpError struct {
	Op  string
	Msg string
}

func (e *OpError) Error() string { return fmt.Sprintf("op %q: %s", e.Op, e.Msg) }

// newKernel builds the kernel of op i of g; ctx is its executor's (the
// kernels that draw random numbers read it).
func newKernel[T Num](g *dag.Graph, i int, ctx *runCtx) (kernel[T], error) {
	op := g.Op(i)
	a := op.Attrs
	in := g.OpInputs(i)
	if broadcasts(g, i) { // model@2's forms of add and mul
		if k, ok := newTensorKernel[T](g, i, ctx); ok {
			return k, nil
		}
		return nil, &OpError{op.Name, fmt.Sprintf("no kernel for %s with a scalar or broadcast inputs", op.Kind)}
	}
	switch op.Kind {
	case dag.Linear:
		return &linear[T]{bias: a.Bias, inOut: a.WeightLayout == "in_out"}, nil
	case dag.ReLU, dag.GELU, dag.Tanh, dag.Sigmoid:
		return &pointwise[T]{kind: op.Kind}, nil
	case dag.LayerNorm:
		return &layerNorm[T]{eps: T(a.Eps)}, nil
	case dag.Add:
		return &add[T]{}, nil
	case dag.Mul:
		return &mul[T]{}, nil
	case dag.Concat:
		ax := axis(a.Axis, len(in[0].Shape))
		return &concat[T]{axis: ax}, nil
	case dag.Mean:
		return &mean[T]{axis: axis(a.Axis, len(in[0].Shape))}, nil
	case dag.Flatten:
		return &flatten[T]{}, nil
	case dag.Embedding:
		return &embedding[T]{op: op.Name, num: int(a.Num), dim: int(a.Dim)}, nil
	case dag.EmbeddingBag:
		return &embeddingBag[T]{op: op.Name, num: int(a.Num), dim: int(a.Dim), mean: a.Mode == "mean"}, nil
	case dag.Attention:
		return &attention[T]{heads: int(a.Heads), causal: a.Causal}, nil
	case dag.DotInteraction:
		return &dot[T]{}, nil
	case dag.SoftmaxCrossEntropy:
		return &crossEntropy[T]{op: op.Name}, nil
	case dag.MSE:
		return &mse[T]{}, nil
	case dag.BCEWithLogits:
		return &bce[T]{}, nil
	case dag.Opaque:
		return nil, &OpError{op.Name, "is opaque: it has a cost but no computation, so it can be searched and simulated but not run"}
	}
	if k, ok := newKernelV2[T](g, i, ctx); ok {
		return k, nil
	}
	return nil, &OpError{op.Name, fmt.Sprintf("no kernel for %s", op.Kind)}
}

// axis maps a per-sample axis onto the batch-major value's axes.
func axis(a int64, rank int) int {
	if a < 0 {
		a += int64(rank)
	}
	return int(a) + 1
}

func addInto[T Num](dst, src []T) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// broadcasts reports whether op i is an add or mul in model@2's forms: with
// a scalar, or with an input whose shape is not the output's.
func broadcasts(g *dag.Graph, i int) bool {
	op := g.Op(i)
	if op.Kind != dag.Add && op.Kind != dag.Mul {
		return false
	}
	if op.Attrs.HasScalar {
		return true
	}
	for _, t := range g.OpInputs(i) {
		if !t.Shape.Equal(g.Out(i).Shape) {
			return true
		}
	}
	return false
}

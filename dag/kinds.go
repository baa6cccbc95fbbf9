package dag

import (
	"math"
	"sort"
)

// Kind names an operator, as written in a model file's "op" field.
type Kind string

const (
	Linear              Kind = "linear"
	ReLU                Kind = "relu"
	GELU                Kind = "gelu"
	Tanh                Kind = "tanh"
	Sigmoid             Kind = "sigmoid"
	LayerNorm           Kind = "layer_norm"
	Add                 Kind = "add"
	Mul                 Kind = "mul"
	Concat              Kind = "concat"
	Mean                Kind = "mean"
	Flatten             Kind = "flatten"
	Embedding           Kind = "embedding"
	EmbeddingBag        Kind = "embedding_bag"
	Attention           Kind = "attention"
	DotInteraction      Kind = "dot_interaction"
	SoftmaxCrossEntropy Kind = "softmax_cross_entropy"
	MSE                 Kind = "mse"
	BCEWithLogits       Kind = "bce_with_logits"
	Opaque              Kind = "opaque"
)

type attrType int

const (
	tInt attrType = iota
	tBool
	tFloat
	tString
	tShape
	tDType
)

func (t attrType) String() string {
	return [...]string{"an integer", "a boolean", "a number", "a string", "an array of integers", `"float32" or "int32"`}[t]
}

type attrSpec struct {
	name     string
	typ      attrType
	required bool
}

// kindInfo is what the spec's operator table says about one kind.
type kindInfo struct {
	attrs        []attrSpec
	minIn, maxIn int // maxIn < 0: no upper bound
	loss         bool
}

var kinds = map[Kind]kindInfo{
	Linear:              {attrs: []attrSpec{{"out", tInt, true}, {"bias", tBool, false}}, minIn: 1, maxIn: 1},
	ReLU:                {minIn: 1, maxIn: 1},
	GELU:                {minIn: 1, maxIn: 1},
	Tanh:                {minIn: 1, maxIn: 1},
	Sigmoid:             {minIn: 1, maxIn: 1},
	LayerNorm:           {attrs: []attrSpec{{"eps", tFloat, false}}, minIn: 1, maxIn: 1},
	Add:                 {minIn: 2, maxIn: -1},
	Mul:                 {minIn: 2, maxIn: 2},
	Concat:              {attrs: []attrSpec{{"axis", tInt, false}}, minIn: 1, maxIn: -1},
	Mean:                {attrs: []attrSpec{{"axis", tInt, true}}, minIn: 1, maxIn: 1},
	Flatten:             {minIn: 1, maxIn: 1},
	Embedding:           {attrs: []attrSpec{{"num", tInt, true}, {"dim", tInt, true}}, minIn: 1, maxIn: 1},
	EmbeddingBag:        {attrs: []attrSpec{{"num", tInt, true}, {"dim", tInt, true}, {"mode", tString, false}}, minIn: 1, maxIn: 1},
	Attention:           {attrs: []attrSpec{{"heads", tInt, true}, {"causal", tBool, false}}, minIn: 1, maxIn: 1},
	DotInteraction:      {minIn: 2, maxIn: -1},
	SoftmaxCrossEntropy: {minIn: 2, maxIn: 2, loss: true},
	MSE:                 {minIn: 2, maxIn: 2, loss: true},
	BCEWithLogits:       {minIn: 2, maxIn: 2, loss: true},
	Opaque: {attrs: []attrSpec{{"out_shape", tShape, true}, {"flops_fwd", tFloat, true},
		{"flops_bwd", tFloat, false}, {"params", tInt, false}, {"out_dtype", tDType, false}}, minIn: 0, maxIn: -1},
}

// Kinds lists every operator kind, sorted.
func Kinds() []Kind {
	out := make([]Kind, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Known reports whether k is an operator of the spec.
func (k Kind) Known() bool { _, ok := kinds[k]; return ok }

// IsLoss reports whether k is a loss.
func (k Kind) IsLoss() bool { return kinds[k].loss }

// HasParams reports whether ops of kind k may carry trainable parameters.
func (k Kind) HasParams() bool {
	switch k {
	case Linear, LayerNorm, Embedding, EmbeddingBag, Attention, Opaque:
		return true
	}
	return false
}

// DefaultAttrs returns the attributes of kind k with every default applied.
// opaque's flops_bwd default (2 × flops_fwd) depends on flops_fwd: callers that
// build opaque ops set it themselves.
func DefaultAttrs(k Kind) Attrs {
	var a Attrs
	switch k {
	case Linear:
		a.Bias = true
	case LayerNorm:
		a.Eps = 1e-5
	case Concat:
		a.Axis = -1
	case EmbeddingBag:
		a.Mode = "mean" // torch.nn.EmbeddingBag's default
	case Opaque:
		a.OutDType = Float32
	}
	return a
}

// field returns a pointer to the Attrs field that holds the named attribute.
func (a *Attrs) field(name string) any {
	switch name {
	case "out":
		return &a.Out
	case "bias":
		return &a.Bias
	case "eps":
		return &a.Eps
	case "axis":
		return &a.Axis
	case "num":
		return &a.Num
	case "dim":
		return &a.Dim
	case "mode":
		return &a.Mode
	case "heads":
		return &a.Heads
	case "causal":
		return &a.Causal
	case "out_shape":
		return &a.OutShape
	case "flops_fwd":
		return &a.FlopsFwd
	case "flops_bwd":
		return &a.FlopsBwd
	case "params":
		return &a.Params
	case "out_dtype":
		return &a.OutDType
	}
	panic("dag: no attribute " + name)
}

// checkAttrs checks attribute values that the types alone do not.
func checkAttrs(op *Op, c *errs) bool {
	n0 := len(c.list)
	a := &op.Attrs
	positive := func(field string, v int64) {
		if v <= 0 {
			c.op(op.Name, "attrs."+field, "must be a positive integer, got %d", v)
		}
	}
	switch op.Kind {
	case Linear:
		positive("out", a.Out)
	case LayerNorm:
		if !(a.Eps > 0) || math.IsInf(a.Eps, 0) {
			c.op(op.Name, "attrs.eps", "must be a positive number, got %g", a.Eps)
		}
	case Embedding, EmbeddingBag:
		positive("num", a.Num)
		positive("dim", a.Dim)
		if op.Kind == EmbeddingBag && a.Mode != "sum" && a.Mode != "mean" {
			c.op(op.Name, "attrs.mode", `must be "sum" or "mean", got %q`, a.Mode)
		}
	case Attention:
		positive("heads", a.Heads)
	case Opaque:
		for i, d := range a.OutShape {
			if d <= 0 {
				c.op(op.Name, "attrs.out_shape", "dim %d must be positive, got %d", i, d)
			}
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"flops_fwd", a.FlopsFwd}, {"flops_bwd", a.FlopsBwd}} {
			if !(f.v >= 0) || math.IsInf(f.v, 0) {
				c.op(op.Name, "attrs."+f.name, "must be a finite number ≥ 0, got %g", f.v)
			}
		}
		if a.Params < 0 {
			c.op(op.Name, "attrs.params", "must be ≥ 0, got %d", a.Params)
		}
		if a.OutDType != Float32 && a.OutDType != Int32 {
			c.op(op.Name, "attrs.out_dtype", `must be "float32" or "int32", got %q`, a.OutDType)
		}
	}
	return len(c.list) == n0
}

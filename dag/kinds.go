package dag

import "sort"

// Kind names an operator, as written in a model file's "op" field.
type Kind string

// The operators of graphpipe/model@1.
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

// The operators graphpipe/model@2 adds.
const (
	Conv2D        Kind = "conv2d"
	BatchNorm     Kind = "batch_norm"
	MaxPool2D     Kind = "max_pool2d"
	AvgPool2D     Kind = "avg_pool2d"
	GlobalAvgPool Kind = "global_avg_pool"
	MatMul        Kind = "matmul"
	Reshape       Kind = "reshape"
	Transpose     Kind = "transpose"
	Softmax       Kind = "softmax"
	Slice         Kind = "slice"
	Pad           Kind = "pad"
	Sub           Kind = "sub"
	Div           Kind = "div"
	Pow           Kind = "pow"
	Exp           Kind = "exp"
	Log           Kind = "log"
	Sqrt          Kind = "sqrt"
	Neg           Kind = "neg"
	Erf           Kind = "erf"
	ReduceMean    Kind = "reduce_mean"
	ReduceSum     Kind = "reduce_sum"
	Dropout       Kind = "dropout"
	Parameter     Kind = "parameter"
	Constant      Kind = "constant"
)

type attrType int

const (
	tInt attrType = iota
	tBool
	tFloat
	tString
	tShape
	tDType
	tFloats
)

func (t attrType) String() string {
	return [...]string{"an integer", "a boolean", "a number", "a string", "an array of integers",
		`"float32" or "int32"`, "an array of numbers"}[t]
}

type attrSpec struct {
	name     string
	typ      attrType
	required bool
	// optional: no default; the attribute is written only where it was set
	// (add's and mul's scalar).
	optional bool
	since    int // the format version that introduced it (0: 1)
}

// kindInfo is what the spec's operator table says about one kind.
type kindInfo struct {
	attrs        []attrSpec
	minIn, maxIn int // maxIn < 0: no upper bound
	loss         bool
	since        int // the format version that introduced the kind (0: 1)
}

var (
	spatial = []attrSpec{{name: "kernel", typ: tShape, required: true}, {name: "stride", typ: tShape},
		{name: "padding", typ: tShape}}
	scalarAttr = attrSpec{name: "scalar", typ: tFloat, optional: true, since: 2}
)

var kinds = map[Kind]kindInfo{
	Linear: {attrs: []attrSpec{{name: "out", typ: tInt, required: true}, {name: "bias", typ: tBool},
		{name: "weight_layout", typ: tString, since: 2}}, minIn: 1, maxIn: 1},
	ReLU:                {minIn: 1, maxIn: 1},
	GELU:                {minIn: 1, maxIn: 1},
	Tanh:                {minIn: 1, maxIn: 1},
	Sigmoid:             {minIn: 1, maxIn: 1},
	LayerNorm:           {attrs: []attrSpec{{name: "eps", typ: tFloat}}, minIn: 1, maxIn: 1},
	Add:                 {attrs: []attrSpec{scalarAttr}, minIn: 2, maxIn: -1},
	Mul:                 {attrs: []attrSpec{scalarAttr}, minIn: 2, maxIn: 2},
	Concat:              {attrs: []attrSpec{{name: "axis", typ: tInt}}, minIn: 1, maxIn: -1},
	Mean:                {attrs: []attrSpec{{name: "axis", typ: tInt, required: true}}, minIn: 1, maxIn: 1},
	Flatten:             {minIn: 1, maxIn: 1},
	Embedding:           {attrs: []attrSpec{{name: "num", typ: tInt, required: true}, {name: "dim", typ: tInt, required: true}}, minIn: 1, maxIn: 1},
	EmbeddingBag:        {attrs: []attrSpec{{name: "num", typ: tInt, required: true}, {name: "dim", typ: tInt, required: true}, {name: "mode", typ: tString}}, minIn: 1, maxIn: 1},
	Attention:           {attrs: []attrSpec{{name: "heads", typ: tInt, required: true}, {name: "causal", typ: tBool}}, minIn: 1, maxIn: 1},
	DotInteraction:      {minIn: 2, maxIn: -1},
	SoftmaxCrossEntropy: {minIn: 2, maxIn: 2, loss: true},
	MSE:                 {minIn: 2, maxIn: 2, loss: true},
	BCEWithLogits:       {minIn: 2, maxIn: 2, loss: true},
	Opaque: {attrs: []attrSpec{{name: "out_shape", typ: tShape, required: true}, {name: "flops_fwd", typ: tFloat, required: true},
		{name: "flops_bwd", typ: tFloat}, {name: "params", typ: tInt}, {name: "out_dtype", typ: tDType}}, minIn: 0, maxIn: -1},

	Conv2D: {attrs: []attrSpec{{name: "out", typ: tInt, required: true}, spatial[0], spatial[1], spatial[2],
		{name: "dilation", typ: tShape}, {name: "groups", typ: tInt}, {name: "bias", typ: tBool}}, minIn: 1, maxIn: 1, since: 2},
	BatchNorm: {attrs: []attrSpec{{name: "eps", typ: tFloat}, {name: "momentum", typ: tFloat}}, minIn: 1, maxIn: 1, since: 2},
	MaxPool2D: {attrs: []attrSpec{spatial[0], spatial[1], spatial[2], {name: "dilation", typ: tShape},
		{name: "ceil_mode", typ: tBool}}, minIn: 1, maxIn: 1, since: 2},
	AvgPool2D: {attrs: []attrSpec{spatial[0], spatial[1], spatial[2], {name: "ceil_mode", typ: tBool},
		{name: "count_include_pad", typ: tBool}}, minIn: 1, maxIn: 1, since: 2},
	GlobalAvgPool: {minIn: 1, maxIn: 1, since: 2},
	MatMul:        {minIn: 2, maxIn: 2, since: 2},
	Reshape:       {attrs: []attrSpec{{name: "shape", typ: tShape, required: true}}, minIn: 1, maxIn: 1, since: 2},
	Transpose:     {attrs: []attrSpec{{name: "perm", typ: tShape, required: true}}, minIn: 1, maxIn: 1, since: 2},
	Softmax:       {attrs: []attrSpec{{name: "axis", typ: tInt}}, minIn: 1, maxIn: 1, since: 2},
	Slice: {attrs: []attrSpec{{name: "axis", typ: tInt, required: true}, {name: "start", typ: tInt, required: true},
		{name: "end", typ: tInt, required: true}, {name: "step", typ: tInt}}, minIn: 1, maxIn: 1, since: 2},
	Pad:        {attrs: []attrSpec{{name: "pads", typ: tShape, required: true}, {name: "value", typ: tFloat}}, minIn: 1, maxIn: 1, since: 2},
	Sub:        {attrs: []attrSpec{scalarAttr, {name: "reverse", typ: tBool}}, minIn: 2, maxIn: 2, since: 2},
	Div:        {attrs: []attrSpec{scalarAttr, {name: "reverse", typ: tBool}}, minIn: 2, maxIn: 2, since: 2},
	Pow:        {attrs: []attrSpec{{name: "exponent", typ: tFloat, required: true}}, minIn: 1, maxIn: 1, since: 2},
	Exp:        {minIn: 1, maxIn: 1, since: 2},
	Log:        {minIn: 1, maxIn: 1, since: 2},
	Sqrt:       {minIn: 1, maxIn: 1, since: 2},
	Neg:        {minIn: 1, maxIn: 1, since: 2},
	Erf:        {minIn: 1, maxIn: 1, since: 2},
	ReduceMean: {attrs: []attrSpec{{name: "axes", typ: tShape}, {name: "keepdims", typ: tBool}}, minIn: 1, maxIn: 1, since: 2},
	ReduceSum:  {attrs: []attrSpec{{name: "axes", typ: tShape}, {name: "keepdims", typ: tBool}}, minIn: 1, maxIn: 1, since: 2},
	Dropout:    {attrs: []attrSpec{{name: "p", typ: tFloat}}, minIn: 1, maxIn: 1, since: 2},
	Parameter:  {attrs: []attrSpec{{name: "shape", typ: tShape, required: true}}, minIn: 0, maxIn: 0, since: 2},
	Constant: {attrs: []attrSpec{{name: "shape", typ: tShape, required: true}, {name: "dtype", typ: tDType},
		{name: "value", typ: tFloats, required: true}}, minIn: 0, maxIn: 0, since: 2},
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

// Since is the format version that introduced k: 1 or 2.
func (k Kind) Since() int { return max(1, kinds[k].since) }

// IsLoss reports whether k is a loss.
func (k Kind) IsLoss() bool { return kinds[k].loss }

// HasParams reports whether ops of kind k may carry trainable parameters.
func (k Kind) HasParams() bool {
	switch k {
	case Linear, LayerNorm, Embedding, EmbeddingBag, Attention, Opaque, Conv2D, BatchNorm, Parameter:
		return true
	}
	return false
}

// MixesSamples reports whether an op of kind k computes a sample's output
// from other samples of its micro-batch too (batch_norm's statistics): a
// stage holding one must see whole micro-batches, so it is never split
// across data-parallel replicas.
func (k Kind) MixesSamples() bool { return k == BatchNorm }

// Scalar reports whether op is an elementwise op with a constant operand
// (add, sub, mul or div with the scalar attribute): it then has one input.
func (op *Op) Scalar() bool { return op.Attrs.HasScalar }

// DefaultAttrs returns the attributes of kind k with every default applied.
// opaque's flops_bwd default (2 × flops_fwd) depends on flops_fwd, and a
// pool's stride on its kernel: callers that build such ops set them.
func DefaultAttrs(k Kind) Attrs {
	var a Attrs
	switch k {
	case Linear:
		a.Bias = true
		a.WeightLayout = "out_in"
	case LayerNorm:
		a.Eps = 1e-5
	case Concat, Softmax:
		a.Axis = -1
	case EmbeddingBag:
		a.Mode = "mean" // torch.nn.EmbeddingBag's default
	case Opaque:
		a.OutDType = Float32
	case Conv2D:
		a.Stride, a.Padding, a.Dilation, a.Groups, a.Bias = Shape{1, 1}, Shape{0, 0, 0, 0}, Shape{1, 1}, 1, true
	case BatchNorm:
		a.Eps, a.Momentum = 1e-5, 0.1
	case MaxPool2D:
		a.Padding, a.Dilation = Shape{0, 0, 0, 0}, Shape{1, 1}
	case AvgPool2D:
		a.Padding, a.CountIncludePad = Shape{0, 0, 0, 0}, true
	case Slice:
		a.Step = 1
	case ReduceMean, ReduceSum:
		a.Axes = Shape{}
	case Dropout:
		a.P = 0.5
	case Constant:
		a.OutDType = Float32
	}
	return a
}

// field returns a pointer to the Attrs field that holds attribute name of
// kind k.
func (a *Attrs) field(k Kind, name string) any {
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
	case "out_dtype", "dtype":
		return &a.OutDType
	case "weight_layout":
		return &a.WeightLayout
	case "scalar":
		return &a.Scalar
	case "reverse":
		return &a.Reverse
	case "kernel":
		return &a.Kernel
	case "stride":
		return &a.Stride
	case "padding":
		return &a.Padding
	case "dilation":
		return &a.Dilation
	case "groups":
		return &a.Groups
	case "momentum":
		return &a.Momentum
	case "ceil_mode":
		return &a.CeilMode
	case "count_include_pad":
		return &a.CountIncludePad
	case "shape":
		return &a.Shape
	case "perm":
		return &a.Perm
	case "start":
		return &a.Start
	case "end":
		return &a.End
	case "step":
		return &a.Step
	case "pads":
		return &a.Pads
	case "value":
		if k == Constant {
			return &a.Values
		}
		return &a.PadValue
	case "exponent":
		return &a.Exponent
	case "axes":
		return &a.Axes
	case "keepdims":
		return &a.KeepDims
	case "p":
		return &a.P
	}
	panic("dag: no attribute " + name)
}

// attrSpecs are kind k's attributes in format version v.
func attrSpecs(k Kind, v int) []attrSpec {
	var out []attrSpec
	for _, s := range kinds[k].attrs {
		if max(1, s.since) <= v {
			out = append(out, s)
		}
	}
	return out
}

// attrSpecOf finds kind k's attribute name in any version.
func attrSpecOf(k Kind, name string) (attrSpec, bool) {
	for _, s := range kinds[k].attrs {
		if s.name == name {
			return s, true
		}
	}
	return attrSpec{}, false
}

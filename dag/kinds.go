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
	HardSigmoid   Kind = "hard_sigmoid"
	HardSwish     Kind = "hard_swish"
)

// kindSpec is one operator kind's row of the table: what the spec says
// about it (docs/model-format.md) and every function Build calls for it.
// Nothing else in the package decides by kind.
type kindSpec struct {
	since        int        // the format version that introduced the kind: 1 or 2
	attrs        []attrSpec // its attributes, in the order a model file writes them
	minIn, maxIn int        // how many inputs; maxIn < 0: no upper bound
	loss         bool       // a loss: the model's one output
	mixes        bool       // MixesSamples
	gathers      bool       // Gathers
	products     bool       // Products

	defaults func(a *Attrs)                                  // attribute defaults; nil: all zero
	derive   func(a *Attrs, given func(name string) bool)    // defaults that follow other attributes, once read
	check    func(ck *attrChecker)                           // attribute values the types alone do not check
	infer    func(f *inferer) (Shape, DType)                 // the output's per-sample shape and dtype
	slots    func(a *Attrs, in []*Tensor) (ps, bufs []Param) // parameters and buffers; nil: none
	cost     func(k *costing)                                // FLOPs and stash per sample
}

// kinds is the operator table: one row per kind. The rows' functions live
// in the op_*.go files, by family; docs/adding-an-op.md says how to add one.
var kinds = map[Kind]kindSpec{
	Linear: {since: 1, minIn: 1, maxIn: 1,
		attrs: []attrSpec{{name: "out", typ: tInt, required: true}, {name: "bias", typ: tBool},
			{name: "weight_layout", typ: tString, since: 2}},
		products: true, defaults: linearDefaults, check: checkLinear, infer: inferLinear, slots: linearSlots, cost: linearCost},
	ReLU:    {since: 1, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(1, 1, stashInput)},
	GELU:    {since: 1, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(8, 12, stashInput)},
	Tanh:    {since: 1, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(4, 2, stashOutput)},
	Sigmoid: {since: 1, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(4, 2, stashOutput)},
	LayerNorm: {since: 1, minIn: 1, maxIn: 1, attrs: []attrSpec{{name: "eps", typ: tFloat}},
		defaults: layerNormDefaults, check: checkEps, infer: inferNorm, slots: layerNormSlots, cost: layerNormCost},
	Add: {since: 1, minIn: 2, maxIn: -1, attrs: []attrSpec{scalarAttr},
		infer: inferAddMul, cost: addCost},
	Mul: {since: 1, minIn: 2, maxIn: 2, attrs: []attrSpec{scalarAttr},
		infer: inferAddMul, cost: perElement(1, 2, stashInputs)},
	Concat: {since: 1, minIn: 1, maxIn: -1, attrs: []attrSpec{{name: "axis", typ: tInt}},
		defaults: lastAxis, infer: inferConcat, cost: moves},
	Mean: {since: 1, minIn: 1, maxIn: 1, attrs: []attrSpec{{name: "axis", typ: tInt, required: true}},
		infer: inferMean, cost: perInput(1, 1, nil)},
	Flatten: {since: 1, minIn: 1, maxIn: 1, infer: inferFlatten, cost: moves},
	Embedding: {since: 1, minIn: 1, maxIn: 1,
		attrs:   []attrSpec{{name: "num", typ: tInt, required: true}, {name: "dim", typ: tInt, required: true}},
		gathers: true, check: checkEmbedding, infer: inferEmbedding, slots: embeddingSlots, cost: embeddingCost},
	EmbeddingBag: {since: 1, minIn: 1, maxIn: 1,
		attrs: []attrSpec{{name: "num", typ: tInt, required: true}, {name: "dim", typ: tInt, required: true},
			{name: "mode", typ: tString}},
		gathers: true, defaults: embeddingBagDefaults, check: checkEmbeddingBag, infer: inferEmbeddingBag,
		slots: embeddingSlots, cost: embeddingCost},
	Attention: {since: 1, minIn: 1, maxIn: 1,
		attrs:    []attrSpec{{name: "heads", typ: tInt, required: true}, {name: "causal", typ: tBool}},
		products: true, check: checkAttention, infer: inferAttention, slots: attentionSlots, cost: attentionCost},
	DotInteraction:      {since: 1, minIn: 2, maxIn: -1, products: true, infer: inferDot, cost: dotCost},
	SoftmaxCrossEntropy: {since: 1, minIn: 2, maxIn: 2, loss: true, infer: inferCrossEntropy, cost: perInput(5, 2, stashInput)},
	MSE:                 {since: 1, minIn: 2, maxIn: 2, loss: true, infer: inferElementLoss, cost: perInput(3, 3, stashInputs)},
	BCEWithLogits:       {since: 1, minIn: 2, maxIn: 2, loss: true, infer: inferElementLoss, cost: perInput(8, 6, stashInputs)},
	Opaque: {since: 1, minIn: 0, maxIn: -1,
		attrs: []attrSpec{{name: "out_shape", typ: tShape, required: true}, {name: "flops_fwd", typ: tFloat, required: true},
			{name: "flops_bwd", typ: tFloat}, {name: "params", typ: tInt}, {name: "out_dtype", typ: tDType}},
		defaults: opaqueDefaults, derive: opaqueDerive, check: checkOpaque, infer: inferOpaque, slots: opaqueSlots,
		cost: opaqueCost},

	Conv2D: {since: 2, minIn: 1, maxIn: 1,
		attrs: []attrSpec{{name: "out", typ: tInt, required: true}, kernelAttr, strideAttr, paddingAttr,
			dilationAttr, {name: "groups", typ: tInt}, {name: "bias", typ: tBool}},
		products: true, defaults: conv2DDefaults, check: checkConv2D, infer: inferConv2D, slots: conv2DSlots, cost: conv2DCost},
	BatchNorm: {since: 2, minIn: 1, maxIn: 1, mixes: true,
		attrs:    []attrSpec{{name: "eps", typ: tFloat}, {name: "momentum", typ: tFloat}},
		defaults: batchNormDefaults, check: checkBatchNorm, infer: inferNorm, slots: batchNormSlots,
		cost: batchNormCost},
	MaxPool2D: {since: 2, minIn: 1, maxIn: 1,
		attrs:    []attrSpec{kernelAttr, strideAttr, paddingAttr, dilationAttr, {name: "ceil_mode", typ: tBool}},
		defaults: maxPoolDefaults, derive: poolDerive, check: checkMaxPool, infer: inferMaxPool, cost: maxPoolCost},
	AvgPool2D: {since: 2, minIn: 1, maxIn: 1,
		attrs: []attrSpec{kernelAttr, strideAttr, paddingAttr, {name: "ceil_mode", typ: tBool},
			{name: "count_include_pad", typ: tBool}},
		defaults: avgPoolDefaults, derive: poolDerive, check: checkAvgPool, infer: inferAvgPool, cost: avgPoolCost},
	GlobalAvgPool: {since: 2, minIn: 1, maxIn: 1, infer: inferGlobalAvgPool, cost: perInput(1, 1, nil)},
	MatMul:        {since: 2, minIn: 2, maxIn: 2, products: true, infer: inferMatMul, cost: matmulCost},
	Reshape: {since: 2, minIn: 1, maxIn: 1, attrs: []attrSpec{{name: "shape", typ: tShape, required: true}},
		infer: inferReshape, cost: moves},
	Transpose: {since: 2, minIn: 1, maxIn: 1, attrs: []attrSpec{{name: "perm", typ: tShape, required: true}},
		infer: inferTranspose, cost: moves},
	Softmax: {since: 2, minIn: 1, maxIn: 1, attrs: []attrSpec{{name: "axis", typ: tInt}},
		defaults: lastAxis, infer: inferSoftmax, cost: perElement(5, 3, stashOutput)},
	Slice: {since: 2, minIn: 1, maxIn: 1,
		attrs: []attrSpec{{name: "axis", typ: tInt, required: true}, {name: "start", typ: tInt, required: true},
			{name: "end", typ: tInt, required: true}, {name: "step", typ: tInt}},
		defaults: sliceDefaults, check: checkSlice, infer: inferSlice, cost: moves},
	Pad: {since: 2, minIn: 1, maxIn: 1,
		attrs: []attrSpec{{name: "pads", typ: tShape, required: true}, {name: "value", typ: tFloat}},
		check: checkPad, infer: inferPad, cost: moves},
	Sub: {since: 2, minIn: 2, maxIn: 2, attrs: []attrSpec{scalarAttr, reverseAttr},
		infer: inferBroadcast, cost: perElement(1, 1, nil)},
	Div: {since: 2, minIn: 2, maxIn: 2, attrs: []attrSpec{scalarAttr, reverseAttr},
		infer: inferBroadcast, cost: divCost},
	Pow: {since: 2, minIn: 1, maxIn: 1, attrs: []attrSpec{{name: "exponent", typ: tFloat, required: true}},
		check: checkPow, infer: inferSame, cost: perElement(4, 4, stashInput)},
	Exp:  {since: 2, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(4, 1, stashOutput)},
	Log:  {since: 2, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(4, 4, stashInput)},
	Sqrt: {since: 2, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(4, 4, stashInput)},
	Neg:  {since: 2, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(1, 1, nil)},
	Erf:  {since: 2, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(4, 4, stashInput)},
	HardSigmoid: {since: 2, minIn: 1, maxIn: 1, attrs: []attrSpec{{name: "alpha", typ: tFloat}, {name: "beta", typ: tFloat}},
		defaults: hardSigmoidDefaults, check: checkHardSigmoid, infer: inferSame, cost: perElement(3, 2, stashInput)},
	HardSwish: {since: 2, minIn: 1, maxIn: 1, infer: inferSame, cost: perElement(5, 4, stashInput)},
	ReduceMean: {since: 2, minIn: 1, maxIn: 1, attrs: reduceAttrs,
		defaults: reduceDefaults, infer: inferReduce, cost: perInput(1, 1, nil)},
	ReduceSum: {since: 2, minIn: 1, maxIn: 1, attrs: reduceAttrs,
		defaults: reduceDefaults, infer: inferReduce, cost: perInput(1, 1, nil)},
	// dropout's mask is a function of (seed, step, op, sample): drawn again
	// by the backward pass, not stashed
	Dropout: {since: 2, minIn: 1, maxIn: 1, attrs: []attrSpec{{name: "p", typ: tFloat}},
		defaults: dropoutDefaults, check: checkDropout, infer: inferSame, cost: perElement(12, 12, nil)},
	Parameter: {since: 2, minIn: 0, maxIn: 0, attrs: []attrSpec{{name: "shape", typ: tShape, required: true}},
		check: checkShapeAttr, infer: inferParameter, slots: parameterSlots, cost: parameterCost},
	Constant: {since: 2, minIn: 0, maxIn: 0,
		attrs: []attrSpec{{name: "shape", typ: tShape, required: true}, {name: "dtype", typ: tDType},
			{name: "value", typ: tFloats, required: true}},
		defaults: constantDefaults, check: checkConstant, infer: inferConstant, cost: moves},
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
func (k Kind) HasParams() bool { return kinds[k].slots != nil }

// MixesSamples reports whether an op of kind k computes a sample's output
// from other samples of its micro-batch too (batch_norm's statistics): a
// stage holding one must see whole micro-batches, so it is never split
// across data-parallel replicas.
func (k Kind) MixesSamples() bool { return kinds[k].mixes }

// Products reports whether an op of kind k spends its FLOPs in matrix
// products (linear, matmul, attention, conv2d, dot_interaction): what a
// GPU's tensor cores compute in a reduced precision (tf32, bf16), and
// autocast writes in bf16; the planner prices them at the precision's rate.
func (k Kind) Products() bool { return kinds[k].products }

// Gathers reports whether an op of kind k reads only the rows of its
// parameters that its indices name (the embeddings), not all of them: the
// planner prices its memory traffic by its activations alone.
func (k Kind) Gathers() bool { return kinds[k].gathers }

// Scalar reports whether op is an elementwise op with a constant operand
// (add, sub, mul or div with the scalar attribute): it then has one input.
func (op *Op) Scalar() bool { return op.Attrs.HasScalar }

// DefaultAttrs returns the attributes of kind k with every default applied.
// opaque's flops_bwd default (2 × flops_fwd) depends on flops_fwd, and a
// pool's stride on its kernel: callers that build such ops set them.
func DefaultAttrs(k Kind) Attrs {
	var a Attrs
	if d := kinds[k].defaults; d != nil {
		d(&a)
	}
	return a
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

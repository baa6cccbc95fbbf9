package onnx

import (
	"sort"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
)

// opSpec is one ONNX op type's row of the table: the handler that converts
// a node of it; the attributes the handler reads or knows to be harmless,
// space-separated (any other is refused rather than silently ignored: it
// could change what the node computes); and the default domain's opsets it
// reads it in, first and last.
type opSpec struct {
	handle handler
	attrs  string
	opsets [2]int64
}

// every is the opset range of a handler that reads every opset a file may
// import (read.go's MinOpset to MaxOpset): where the op changed between
// them, the handler reads both forms or refuses the older meaning.
var every = [2]int64{MinOpset, MaxOpset}

// ops is the table of the default domain's op types the importer reads,
// one row each. The handlers live by family: shape.go (shape computations
// and the ops that move elements), math.go (arithmetic, products, softmax,
// reductions, dropout) and nn.go (the layers and the loss).
var ops = map[string]opSpec{
	// shape.go
	"Constant":        {handle: constantOp, attrs: "value value_float value_floats value_int value_ints", opsets: every},
	"ConstantOfShape": {handle: constantOfShape, attrs: "value", opsets: every},
	"Shape":           {handle: shapeOp, attrs: "start end", opsets: every},
	"Size":            {handle: sizeOp, opsets: every},
	"Identity":        {handle: identity, opsets: every},
	"Cast":            {handle: castOp, attrs: "to saturate", opsets: every},
	"Reshape":         {handle: reshapeOp, attrs: "allowzero", opsets: every},
	"Flatten":         {handle: flattenOp, attrs: "axis", opsets: every},
	"Squeeze":         {handle: squeezeOp, attrs: "axes", opsets: every},
	"Unsqueeze":       {handle: unsqueezeOp, attrs: "axes", opsets: every},
	"Transpose":       {handle: transposeOp, attrs: "perm", opsets: every},
	"Concat":          {handle: concatOp, attrs: "axis", opsets: every},
	"Gather":          {handle: gatherOp, attrs: "axis", opsets: every},
	"Slice":           {handle: sliceOp, opsets: every},
	"Split":           {handle: splitOp, attrs: "axis split num_outputs", opsets: every},
	"Expand":          {handle: expandOp, opsets: every},
	"Range":           {handle: rangeOp, opsets: every},
	"Where":           {handle: whereOp, opsets: every},
	"Pad":             {handle: padOp, attrs: "mode", opsets: every},

	// math.go
	"Relu":           {handle: unaryOp(dag.ReLU), opsets: every},
	"Tanh":           {handle: unaryOp(dag.Tanh), opsets: every},
	"Sigmoid":        {handle: unaryOp(dag.Sigmoid), opsets: every},
	"Exp":            {handle: unaryOp(dag.Exp), opsets: every},
	"Log":            {handle: unaryOp(dag.Log), opsets: every},
	"Sqrt":           {handle: unaryOp(dag.Sqrt), opsets: every},
	"Neg":            {handle: unaryOp(dag.Neg), opsets: every},
	"Erf":            {handle: unaryOp(dag.Erf), opsets: every},
	"HardSigmoid":    {handle: hardSigmoidOp, attrs: "alpha beta", opsets: every},
	"HardSwish":      {handle: unaryOp(dag.HardSwish), opsets: [2]int64{14, MaxOpset}},
	"Reciprocal":     {handle: unaryOp(""), opsets: every},
	"Abs":            {handle: unaryOp(""), opsets: every},
	"Floor":          {handle: unaryOp(""), opsets: every},
	"Ceil":           {handle: unaryOp(""), opsets: every},
	"Not":            {handle: unaryOp(""), opsets: every},
	"Add":            {handle: binaryOp, opsets: every},
	"Sub":            {handle: binaryOp, opsets: every},
	"Mul":            {handle: binaryOp, opsets: every},
	"Div":            {handle: binaryOp, opsets: every},
	"Pow":            {handle: binaryOp, opsets: every},
	"Equal":          {handle: binaryOp, opsets: every},
	"Less":           {handle: binaryOp, opsets: every},
	"Greater":        {handle: binaryOp, opsets: every},
	"LessOrEqual":    {handle: binaryOp, opsets: every},
	"GreaterOrEqual": {handle: binaryOp, opsets: every},
	"Max":            {handle: binaryOp, opsets: every},
	"Min":            {handle: binaryOp, opsets: every},
	"Mod":            {handle: binaryOp, attrs: "fmod", opsets: every},
	"And":            {handle: binaryOp, opsets: every},
	"Or":             {handle: binaryOp, opsets: every},
	"MatMul":         {handle: matmulOp, opsets: every},
	"Gemm":           {handle: gemmOp, attrs: "alpha beta transA transB", opsets: every},
	"Softmax":        {handle: softmaxOp, attrs: "axis", opsets: every},
	"ReduceMean":     {handle: reduceOp(dag.ReduceMean), attrs: "axes keepdims noop_with_empty_axes", opsets: every},
	"ReduceSum":      {handle: reduceOp(dag.ReduceSum), attrs: "keepdims noop_with_empty_axes", opsets: every},
	"Dropout":        {handle: dropoutOp, attrs: "seed", opsets: every},

	// nn.go
	"Conv":               {handle: convOp, attrs: "auto_pad dilations group kernel_shape pads strides", opsets: every},
	"BatchNormalization": {handle: batchNormOp, attrs: "epsilon momentum training_mode", opsets: every},
	"MaxPool": {handle: poolOp(dag.MaxPool2D), opsets: every,
		attrs: "auto_pad ceil_mode dilations kernel_shape pads storage_order strides"},
	"AveragePool": {handle: poolOp(dag.AvgPool2D), opsets: every,
		attrs: "auto_pad ceil_mode count_include_pad kernel_shape pads strides dilations"},
	"GlobalAveragePool":       {handle: globalPoolOp, opsets: every},
	"GlobalMaxPool":           {handle: globalPoolOp, opsets: every},
	"LayerNormalization":      {handle: layerNormOp, attrs: "axis epsilon stash_type", opsets: every},
	"SoftmaxCrossEntropyLoss": {handle: softmaxCrossEntropyOp, attrs: "ignore_index reduction", opsets: every},
}

// SupportedOps lists the op types the importer reads, sorted.
func SupportedOps() []string {
	out := make([]string, 0, len(ops))
	for k := range ops {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// reads reports whether the row reads its op type in opset v.
func (s opSpec) reads(v int64) bool { return s.opsets[0] <= v && v <= s.opsets[1] }

// unknownAttr is the first attribute of n not among known (its op type's
// row's, space-separated), or "".
func (n *node) unknownAttr(known string) string {
	known = " " + known + " "
	for _, a := range n.p.GetAttribute() {
		if !strings.Contains(known, " "+a.GetName()+" ") {
			return a.GetName()
		}
	}
	return ""
}

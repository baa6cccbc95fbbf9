package dag

import (
	"fmt"
	"strings"
)

// The model file formats this version reads and writes: @2 is @1 plus the
// ops, attributes and fields of exported graphs (docs/model-format.md).
const (
	Format   = "graphpipe/model@1"
	FormatV2 = "graphpipe/model@2"
)

// formatOf is the document format of a version (1 or 2).
func formatOf(version int) string {
	if version >= 2 {
		return FormatV2
	}
	return Format
}

// MaxNameLen is the longest name the spec allows.
const MaxNameLen = 200

// DType is a tensor element type.
type DType string

const (
	Float32 DType = "float32"
	Int32   DType = "int32"
)

// Size is the bytes of one element.
func (d DType) Size() int64 { return 4 }

// Shape is the shape of one sample; the batch axis is implicit.
type Shape []int64

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Equal reports whether two shapes have the same dims.
func (s Shape) Equal(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// Elems is the number of elements; Build has checked it fits in int64.
func (s Shape) Elems() int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// Input is a tensor fed per sample.
type Input struct {
	Name  string
	Shape Shape
	DType DType
	// Range is [lo, hi) for int32 inputs: synthetic data and bounds checks.
	Range *[2]int64
}

// Op is one operator. It produces one tensor, named Name.
type Op struct {
	Name   string
	Kind   Kind
	Inputs []string
	Attrs  Attrs
	// ParamNames names the op's parameters and buffers by slot (@2); a slot
	// it leaves out is named "<op>.<slot>".
	ParamNames map[string]string
}

// Attrs holds every attribute of every op kind, resolved: a field that does not
// apply to an op's kind is zero, one that applies holds its value or default.
type Attrs struct {
	Out      int64   // linear
	Bias     bool    // linear
	Eps      float64 // layer_norm
	Axis     int64   // concat, mean
	Num      int64   // embedding, embedding_bag
	Dim      int64   // embedding, embedding_bag
	Mode     string  // embedding_bag: "sum" or "mean"
	Heads    int64   // attention
	Causal   bool    // attention
	OutShape Shape   // opaque
	FlopsFwd float64 // opaque, per sample
	FlopsBwd float64 // opaque, per sample
	Params   int64   // opaque
	OutDType DType   // opaque; constant's dtype

	// graphpipe/model@2
	WeightLayout    string    // linear: "out_in" (PyTorch's) or "in_out"
	Scalar          float64   // add, sub, mul, div: the constant operand, where HasScalar
	HasScalar       bool      // the scalar attribute was given: the op has one input
	Reverse         bool      // sub, div with a scalar: scalar − x, scalar / x
	Kernel          Shape     // conv2d, pools: [kh, kw]
	Stride          Shape     // conv2d, pools: [sh, sw]
	Padding         Shape     // conv2d, pools: [top, left, bottom, right]
	Dilation        Shape     // conv2d, max_pool2d: [dh, dw]
	Groups          int64     // conv2d
	Momentum        float64   // batch_norm
	CeilMode        bool      // pools
	CountIncludePad bool      // avg_pool2d
	Shape           Shape     // reshape, parameter, constant
	Perm            Shape     // transpose
	Start, End      int64     // slice
	Step            int64     // slice
	Pads            Shape     // pad: [begin per axis..., end per axis...]
	PadValue        float64   // pad
	Exponent        float64   // pow
	Alpha, Beta     float64   // hard_sigmoid: y = max(0, min(1, alpha·x + beta))
	Axes            Shape     // reduce_mean, reduce_sum
	KeepDims        bool      // reduce_mean, reduce_sum
	P               float64   // dropout
	Values          []float64 // constant, row-major (or one value for all)
}

// Model is a model file's document: what was written, attributes resolved.
type Model struct {
	// Version is the format: 1 (graphpipe/model@1, and 0 means 1) or 2.
	Version   int
	Name      string
	BatchSize int64
	Seed      int64
	Inputs    []Input
	Ops       []Op
}

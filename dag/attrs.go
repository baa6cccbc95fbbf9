package dag

import "math"

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

// attrSpec is one attribute of a kind, as its row in the table lists it.
type attrSpec struct {
	name     string
	typ      attrType
	required bool
	// optional: no default; the attribute is written only where it was set
	// (add's and mul's scalar).
	optional bool
	since    int // the format version that introduced it (0: 1)
}

// Attributes several kinds share.
var (
	scalarAttr   = attrSpec{name: "scalar", typ: tFloat, optional: true, since: 2}
	reverseAttr  = attrSpec{name: "reverse", typ: tBool}
	kernelAttr   = attrSpec{name: "kernel", typ: tShape, required: true}
	strideAttr   = attrSpec{name: "stride", typ: tShape}
	paddingAttr  = attrSpec{name: "padding", typ: tShape}
	dilationAttr = attrSpec{name: "dilation", typ: tShape}
	reduceAttrs  = []attrSpec{{name: "axes", typ: tShape}, {name: "keepdims", typ: tBool}}
)

// field returns a pointer to the Attrs field that holds attribute s.
func (a *Attrs) field(s attrSpec) any {
	switch s.name {
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
	case "value": // constant's values, pad's fill
		if s.typ == tFloats {
			return &a.Values
		}
		return &a.PadValue
	case "exponent":
		return &a.Exponent
	case "alpha":
		return &a.Alpha
	case "beta":
		return &a.Beta
	case "axes":
		return &a.Axes
	case "keepdims":
		return &a.KeepDims
	case "p":
		return &a.P
	}
	panic("dag: no attribute " + s.name)
}

// CheckAttrs checks one op's attribute values as Build does, without the
// rest of a graph: an importer checks what a file gave before it sizes
// tensors with it (a stride of 0 divides). Each problem is an *Error of
// Kind "op" whose Field is "attrs.<name>", in an Errors.
func CheckAttrs(op *Op) error {
	var c errs
	if _, known := kinds[op.Kind]; !known {
		c.op(op.Name, "op", "unknown operator %q", op.Kind)
		return c.err()
	}
	checkAttrs(op, &c)
	return c.err()
}

// checkAttrs checks attribute values that the types alone do not: the
// kind's own checks, then a scalar operand's.
func checkAttrs(op *Op, c *errs) bool {
	n0 := len(c.list)
	ck := attrChecker{op: op, c: c}
	if check := kinds[op.Kind].check; check != nil {
		check(&ck)
	}
	if op.Attrs.HasScalar {
		ck.finite("scalar", op.Attrs.Scalar)
	}
	return len(c.list) == n0
}

// attrChecker reports problems with one op's attributes.
type attrChecker struct {
	op *Op
	c  *errs
}

func (ck *attrChecker) fail(attr, format string, args ...any) {
	ck.c.op(ck.op.Name, "attrs."+attr, format, args...)
}

func (ck *attrChecker) positive(attr string, v int64) {
	if v <= 0 {
		ck.fail(attr, "must be a positive integer, got %d", v)
	}
}

func (ck *attrChecker) positiveFloat(attr string, v float64) {
	if !(v > 0) || math.IsInf(v, 0) {
		ck.fail(attr, "must be a positive number, got %g", v)
	}
}

func (ck *attrChecker) finite(attr string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		ck.fail(attr, "must be a finite number, got %g", v)
	}
}

// pair checks a 2-element list of positive integers.
func (ck *attrChecker) pair(attr string, v Shape) {
	if len(v) != 2 {
		ck.fail(attr, "must be 2 integers [h, w], got %d", len(v))
		return
	}
	for i, d := range v {
		if d <= 0 {
			ck.fail(attr, "element %d must be positive, got %d", i, d)
		}
	}
}

// window checks a convolution's or pool's kernel, stride, padding and, where
// the kind has one, dilation.
func (ck *attrChecker) window(dilated bool) {
	a := &ck.op.Attrs
	ck.pair("kernel", a.Kernel)
	ck.pair("stride", a.Stride)
	if dilated {
		ck.pair("dilation", a.Dilation)
	}
	if len(a.Padding) != 4 {
		ck.fail("padding", "must be 4 integers [top, left, bottom, right], got %d", len(a.Padding))
		return
	}
	for i, p := range a.Padding {
		if p < 0 {
			ck.fail("padding", "element %d must be ≥ 0, got %d", i, p)
		}
	}
}

// dims checks that every dim of a shape attribute is positive.
func (ck *attrChecker) dims(attr string, v Shape) {
	for i, d := range v {
		if d <= 0 {
			ck.fail(attr, "dim %d must be positive, got %d", i, d)
		}
	}
}

package dag

import "math"

// checkAttrs checks attribute values that the types alone do not.
func checkAttrs(op *Op, c *errs) bool {
	n0 := len(c.list)
	a := &op.Attrs
	ck := attrChecker{op: op, c: c}
	switch op.Kind {
	case Linear:
		ck.positive("out", a.Out)
		if a.WeightLayout != "out_in" && a.WeightLayout != "in_out" {
			ck.fail("weight_layout", `must be "out_in" or "in_out", got %q`, a.WeightLayout)
		}
	case LayerNorm:
		ck.positiveFloat("eps", a.Eps)
	case Embedding, EmbeddingBag:
		ck.positive("num", a.Num)
		ck.positive("dim", a.Dim)
		if op.Kind == EmbeddingBag && a.Mode != "sum" && a.Mode != "mean" {
			ck.fail("mode", `must be "sum" or "mean", got %q`, a.Mode)
		}
	case Attention:
		ck.positive("heads", a.Heads)
	case Opaque:
		checkOpaque(&ck, a)
	case Conv2D:
		ck.positive("out", a.Out)
		ck.positive("groups", a.Groups)
		ck.window(true)
	case MaxPool2D:
		ck.window(true)
	case AvgPool2D:
		ck.window(false)
	case BatchNorm:
		ck.positiveFloat("eps", a.Eps)
		if !(a.Momentum >= 0 && a.Momentum <= 1) {
			ck.fail("momentum", "must be a number in [0, 1], got %g", a.Momentum)
		}
	case Slice:
		if a.Step < 1 {
			ck.fail("step", "must be a positive integer, got %d", a.Step)
		}
	case Pad:
		for i, p := range a.Pads {
			if p < 0 {
				ck.fail("pads", "element %d must be ≥ 0, got %d", i, p)
			}
		}
	case Pow:
		ck.finite("exponent", a.Exponent)
	case Dropout:
		if !(a.P >= 0 && a.P < 1) {
			ck.fail("p", "must be a number in [0, 1), got %g", a.P)
		}
	case Parameter, Constant:
		for i, d := range a.Shape {
			if d <= 0 {
				ck.fail("shape", "dim %d must be positive, got %d", i, d)
			}
		}
		if op.Kind == Constant {
			checkConstant(&ck, a)
		}
	}
	if a.HasScalar {
		ck.finite("scalar", a.Scalar)
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

func checkOpaque(ck *attrChecker, a *Attrs) {
	for i, d := range a.OutShape {
		if d <= 0 {
			ck.fail("out_shape", "dim %d must be positive, got %d", i, d)
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"flops_fwd", a.FlopsFwd}, {"flops_bwd", a.FlopsBwd}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			ck.fail(f.name, "must be a finite number ≥ 0, got %g", f.v)
		}
	}
	if a.Params < 0 {
		ck.fail("params", "must be ≥ 0, got %d", a.Params)
	}
	if a.OutDType != Float32 && a.OutDType != Int32 {
		ck.fail("out_dtype", `must be "float32" or "int32", got %q`, a.OutDType)
	}
}

// maxConstant is the most elements a constant may write out: larger
// tensors belong in a weights file, as parameters.
const maxConstant = 1 << 20

func checkConstant(ck *attrChecker, a *Attrs) {
	var s sizer
	n := s.mul(a.Shape...)
	switch {
	case s.bad || n > maxConstant:
		ck.fail("shape", "%v has more than %d elements; a constant that large belongs in a weights file", a.Shape, maxConstant)
		return
	case len(a.Values) != 1 && int64(len(a.Values)) != n:
		ck.fail("value", "has %d numbers, want %d (the shape's elements) or 1", len(a.Values), n)
		return
	}
	for i, v := range a.Values {
		if a.OutDType == Int32 && (v != math.Trunc(v) || v < math.MinInt32 || v > math.MaxInt32) {
			ck.fail("value", "element %d is %g, not an int32", i, v)
			return
		}
	}
}

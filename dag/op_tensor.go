package dag

import "math"

// The rows' pieces of the ops that reshape, select or reduce: concat, mean,
// flatten, reshape, transpose, softmax, slice, pad, reduce_mean,
// reduce_sum, and the ops of no input: parameter and constant.

// lastAxis is concat's and softmax's default axis.
func lastAxis(a *Attrs) { a.Axis = -1 }

// inferConcat: inputs equal but for the axis → their sizes summed there.
func inferConcat(f *inferer) (Shape, DType) {
	f.allFloat()
	x := f.in
	if !f.minRank(0, 1) {
		return nil, Float32
	}
	r := len(x[0].Shape)
	ax, ok := normAxis(f.op.Attrs.Axis, r)
	if !ok {
		f.fail("attrs.axis", "axis %d is out of range for input %q of shape %v", f.op.Attrs.Axis, x[0].Name, x[0].Shape)
		return nil, Float32
	}
	out := append(Shape{}, x[0].Shape...)
	var s sizer
	for i := 1; i < len(x); i++ {
		sh := x[i].Shape
		same := len(sh) == r
		for d := 0; same && d < r; d++ {
			same = d == ax || sh[d] == out[d]
		}
		if !same {
			f.fail("inputs", "input %q has shape %v, which does not match %q's %v but for axis %d", x[i].Name, sh, x[0].Name, x[0].Shape, ax)
			return nil, Float32
		}
		out[ax] = s.add(out[ax], sh[ax])
	}
	if s.bad {
		f.fail("inputs", "concatenated size overflows int64")
	}
	return out, Float32
}

// inferMean: the mean over one axis, which goes.
func inferMean(f *inferer) (Shape, DType) {
	a, x := f.op.Attrs, f.in
	f.float(0)
	if !f.minRank(0, 1) {
		return nil, Float32
	}
	ax, ok := normAxis(a.Axis, len(x[0].Shape))
	if !ok {
		f.fail("attrs.axis", "axis %d is out of range for input %q of shape %v", a.Axis, x[0].Name, x[0].Shape)
		return nil, Float32
	}
	return without(x[0].Shape, ax), Float32
}

// inferFlatten: any shape → [elements].
func inferFlatten(f *inferer) (Shape, DType) {
	f.float(0)
	return Shape{f.in[0].Shape.Elems()}, Float32
}

// inferReshape: the same elements in attrs.shape.
func inferReshape(f *inferer) (Shape, DType) {
	a, x := f.op.Attrs, f.in[0]
	f.float(0)
	if a.Shape.Elems() != x.Shape.Elems() || !allPositive(a.Shape) {
		f.fail("attrs.shape", "%v does not hold the %d elements of input %q of shape %v", a.Shape, x.Shape.Elems(), x.Name, x.Shape)
		return nil, Float32
	}
	return append(Shape{}, a.Shape...), Float32
}

// inferTranspose: out[i] = x[perm[i]].
func inferTranspose(f *inferer) (Shape, DType) {
	f.float(0)
	x := f.in[0].Shape
	p := f.op.Attrs.Perm
	seen := make([]bool, len(x))
	ok := len(p) == len(x)
	for i := 0; ok && i < len(p); i++ {
		ok = p[i] >= 0 && p[i] < int64(len(x)) && !seen[p[i]]
		if ok {
			seen[p[i]] = true
		}
	}
	if !ok {
		f.fail("attrs.perm", "%v is not a permutation of the %d axes of input %q", p, len(x), f.in[0].Name)
		return nil, Float32
	}
	out := make(Shape, len(x))
	for i, j := range p {
		out[i] = x[j]
	}
	return out, Float32
}

// inferSoftmax: the same shape, normalised along attrs.axis.
func inferSoftmax(f *inferer) (Shape, DType) {
	f.float(0)
	if _, ok := f.axis(f.op.Attrs.Axis); !ok {
		return nil, Float32
	}
	return f.in[0].Shape, Float32
}

func sliceDefaults(a *Attrs) { a.Step = 1 }

func checkSlice(ck *attrChecker) {
	if s := ck.op.Attrs.Step; s < 1 {
		ck.fail("step", "must be a positive integer, got %d", s)
	}
}

// SliceRange resolves a slice of a dim of n by Python's rules: the first
// index and the element count (0 when empty).
func SliceRange(n, start, end, step int64) (first, count int64) {
	clamp := func(v int64) int64 {
		if v < 0 {
			v += n
		}
		return min(max(v, 0), n)
	}
	lo, hi := clamp(start), clamp(end)
	if hi <= lo || step < 1 {
		return lo, 0
	}
	return lo, (hi - lo + step - 1) / step
}

// inferSlice: x[start:end:step] along attrs.axis.
func inferSlice(f *inferer) (Shape, DType) {
	a := f.op.Attrs
	f.float(0)
	ax, ok := f.axis(a.Axis)
	if !ok || a.Step < 1 {
		return nil, Float32
	}
	out := append(Shape{}, f.in[0].Shape...)
	_, n := SliceRange(out[ax], a.Start, a.End, a.Step)
	if n < 1 {
		f.fail("attrs.start", "slice [%d:%d:%d] of axis %d (of %d) of input %q is empty", a.Start, a.End, a.Step, ax, out[ax], f.in[0].Name)
		return nil, Float32
	}
	out[ax] = n
	return out, Float32
}

func checkPad(ck *attrChecker) {
	for i, p := range ck.op.Attrs.Pads {
		if p < 0 {
			ck.fail("pads", "element %d must be ≥ 0, got %d", i, p)
		}
	}
}

// inferPad: each axis grown by its begin and end pads.
func inferPad(f *inferer) (Shape, DType) {
	a, x := f.op.Attrs, f.in[0]
	f.float(0)
	r := len(x.Shape)
	if len(a.Pads) != 2*r {
		f.fail("attrs.pads", "has %d numbers, want %d (a begin and an end for each of the %d axes of input %q)", len(a.Pads), 2*r, r, x.Name)
		return nil, Float32
	}
	out := append(Shape{}, x.Shape...)
	var s sizer
	for i := range out {
		out[i] = s.add(out[i], a.Pads[i], a.Pads[r+i])
	}
	if s.bad {
		f.fail("attrs.pads", "the padded size overflows int64")
	}
	return out, Float32
}

func reduceDefaults(a *Attrs) { a.Axes = Shape{} }

// ReduceAxes resolves a reduction's axes on a shape of rank r: sorted,
// non-negative, every axis when axes is empty; ok is false for an axis out
// of range or given twice.
func ReduceAxes(axes Shape, r int) ([]int, bool) {
	if len(axes) == 0 {
		out := make([]int, r)
		for i := range out {
			out[i] = i
		}
		return out, true
	}
	seen := make([]bool, r)
	var out []int
	for _, a := range axes {
		ax, ok := normAxis(a, r)
		if !ok || seen[ax] {
			return nil, false
		}
		seen[ax] = true
	}
	for i, s := range seen {
		if s {
			out = append(out, i)
		}
	}
	return out, true
}

// inferReduce is reduce_mean's and reduce_sum's: the axes go, or stay as 1
// with keepdims.
func inferReduce(f *inferer) (Shape, DType) {
	a := f.op.Attrs
	f.float(0)
	x := f.in[0].Shape
	axes, ok := ReduceAxes(a.Axes, len(x))
	if !ok {
		f.fail("attrs.axes", "%v are not distinct axes of input %q of shape %v", a.Axes, f.in[0].Name, x)
		return nil, Float32
	}
	red := make([]bool, len(x))
	for _, ax := range axes {
		red[ax] = true
	}
	var out Shape
	for i, d := range x {
		switch {
		case !red[i]:
			out = append(out, d)
		case a.KeepDims:
			out = append(out, 1)
		}
	}
	if out == nil {
		out = Shape{}
	}
	return out, Float32
}

// checkShapeAttr is parameter's check: every dim of attrs.shape positive.
func checkShapeAttr(ck *attrChecker) { ck.dims("shape", ck.op.Attrs.Shape) }

// inferParameter: no input → attrs.shape, the parameter itself.
func inferParameter(f *inferer) (Shape, DType) {
	return append(Shape{}, f.op.Attrs.Shape...), Float32
}

func parameterSlots(a *Attrs, _ []*Tensor) (ps, bufs []Param) {
	return []Param{{Name: "value", Shape: append(Shape{}, a.Shape...)}}, nil
}

func parameterCost(k *costing) { k.c.FwdFLOPs, k.c.BwdWeightFLOPs = k.n, k.n }

func constantDefaults(a *Attrs) { a.OutDType = Float32 }

// maxConstant is the most elements a constant may write out: larger
// tensors belong in a weights file, as parameters.
const maxConstant = 1 << 20

// checkConstant: a positive shape, not too large, filled by one value or
// one per element, integers where the dtype is int32.
func checkConstant(ck *attrChecker) {
	a := &ck.op.Attrs
	checkShapeAttr(ck)
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

// inferConstant: no input → attrs.shape of attrs.dtype; an int32
// constant's values bound its range.
func inferConstant(f *inferer) (Shape, DType) {
	a := f.op.Attrs
	if a.OutDType == Int32 {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range a.Values {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		f.rng = &[2]int64{int64(lo), int64(hi) + 1}
	}
	return append(Shape{}, a.Shape...), a.OutDType
}

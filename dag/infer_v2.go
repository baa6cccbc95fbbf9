package dag

import "math"

// runV2 infers the ops model@2 adds.
func (f *inferer) runV2() (Shape, DType) {
	a := f.op.Attrs
	x := f.in
	switch f.op.Kind {
	case Sub, Div:
		f.allFloat()
		return f.broadcast(), Float32
	case Pow, Exp, Log, Sqrt, Neg, Erf, Dropout:
		f.float(0)
		return x[0].Shape, Float32
	case Conv2D:
		return f.conv()
	case BatchNorm:
		f.float(0)
		f.minRank(0, 1)
		return x[0].Shape, Float32
	case MaxPool2D, AvgPool2D:
		return f.pool()
	case GlobalAvgPool:
		f.float(0)
		if !f.minRank(0, 2) {
			return nil, Float32
		}
		out := make(Shape, len(x[0].Shape))
		for i := range out {
			out[i] = 1
		}
		out[0] = x[0].Shape[0]
		return out, Float32
	case MatMul:
		return f.matmul()
	case Reshape:
		f.float(0)
		if a.Shape.Elems() != x[0].Shape.Elems() || !allPositive(a.Shape) {
			f.fail("attrs.shape", "%v does not hold the %d elements of input %q of shape %v", a.Shape, x[0].Shape.Elems(), x[0].Name, x[0].Shape)
			return nil, Float32
		}
		return append(Shape{}, a.Shape...), Float32
	case Transpose:
		return f.transpose()
	case Softmax:
		f.float(0)
		if _, ok := f.axis(a.Axis); !ok {
			return nil, Float32
		}
		return x[0].Shape, Float32
	case Slice:
		return f.slice()
	case Pad:
		f.float(0)
		r := len(x[0].Shape)
		if len(a.Pads) != 2*r {
			f.fail("attrs.pads", "has %d numbers, want %d (a begin and an end for each of the %d axes of input %q)", len(a.Pads), 2*r, r, x[0].Name)
			return nil, Float32
		}
		out := append(Shape{}, x[0].Shape...)
		var s sizer
		for i := range out {
			out[i] = s.add(out[i], a.Pads[i], a.Pads[r+i])
		}
		if s.bad {
			f.fail("attrs.pads", "the padded size overflows int64")
		}
		return out, Float32
	case ReduceMean, ReduceSum:
		return f.reduce()
	case Parameter:
		return append(Shape{}, a.Shape...), Float32
	case Constant:
		if a.OutDType == Int32 {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, v := range a.Values {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
			f.rng = &[2]int64{int64(lo), int64(hi) + 1}
		}
		return append(Shape{}, a.Shape...), a.OutDType
	}
	panic("dag: infer: unhandled kind " + string(f.op.Kind))
}

func allPositive(s Shape) bool {
	for _, d := range s {
		if d <= 0 {
			return false
		}
	}
	return true
}

// axis checks attrs.axis against input 0.
func (f *inferer) axis(a int64) (int, bool) {
	x := f.in[0]
	ax, ok := normAxis(a, len(x.Shape))
	if !ok {
		f.fail("attrs.axis", "axis %d is out of range for input %q of shape %v", a, x.Name, x.Shape)
	}
	return ax, ok
}

// broadcast is NumPy's broadcast of every input's shape.
func (f *inferer) broadcast() Shape {
	var out Shape
	for _, t := range f.in {
		b, ok := Broadcast(out, t.Shape)
		if !ok {
			f.fail("inputs", "input %q has shape %v, which does not broadcast with %v", t.Name, t.Shape, out)
			return nil
		}
		out = b
	}
	return out
}

// Broadcast is NumPy's broadcast of two shapes: aligned from the last axis,
// a dim of 1 stretching to the other's.
func Broadcast(a, b Shape) (Shape, bool) {
	n := max(len(a), len(b))
	out := make(Shape, n)
	for i := 0; i < n; i++ {
		da, db := int64(1), int64(1)
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, false
		}
	}
	return out, true
}

// WindowOut is the output length of a convolution or pool along one axis:
// input length n, padding lo and hi, kernel k, stride s, dilation d, with
// PyTorch's ceil_mode rule. It is ≤ 0 when no window fits.
func WindowOut(n, lo, hi, k, s, d int64, ceil bool) int64 {
	span := n + lo + hi - d*(k-1) - 1
	if span < 0 {
		return 0
	}
	if !ceil {
		return span/s + 1
	}
	out := (span+s-1)/s + 1
	if (out-1)*s >= n+lo { // the last window would start in the padding
		out--
	}
	return out
}

func (f *inferer) conv() (Shape, DType) {
	a := f.op.Attrs
	x := f.in[0]
	f.float(0)
	if !f.rank(0, 3) || !f.ok {
		return nil, Float32
	}
	if a.Groups > 0 && (x.Shape[0]%a.Groups != 0 || a.Out%a.Groups != 0) {
		f.fail("attrs.groups", "%d groups divide neither the %d input channels of %q nor the %d outputs", a.Groups, x.Shape[0], x.Name, a.Out)
		return nil, Float32
	}
	h, w := f.windows(a.Dilation)
	return Shape{a.Out, h, w}, Float32
}

func (f *inferer) pool() (Shape, DType) {
	f.float(0)
	if !f.rank(0, 3) || !f.ok {
		return nil, Float32
	}
	d := f.op.Attrs.Dilation
	if f.op.Kind == AvgPool2D {
		d = Shape{1, 1}
	}
	h, w := f.windows(d)
	return Shape{f.in[0].Shape[0], h, w}, Float32
}

// windows is the output height and width of a convolution or pool whose
// attributes checkAttrs has passed.
func (f *inferer) windows(dil Shape) (int64, int64) {
	a := f.op.Attrs
	x := f.in[0].Shape
	var out [2]int64
	for i := 0; i < 2; i++ {
		lo, hi := a.Padding[i], a.Padding[i+2]
		span := dil[i]*(a.Kernel[i]-1) + 1
		if lo >= span || hi >= span {
			f.fail("attrs.padding", "padding %d, %d on axis %d is not smaller than the window of %d", lo, hi, i+1, span)
		}
		out[i] = WindowOut(x[i+1], lo, hi, a.Kernel[i], a.Stride[i], dil[i], a.CeilMode)
		if out[i] < 1 {
			f.fail("attrs.kernel", "the window of %d does not fit axis %d of input %q of shape %v with its padding", span, i+1, f.in[0].Name, x)
		}
	}
	return out[0], out[1]
}

func (f *inferer) matmul() (Shape, DType) {
	f.allFloat()
	a, b := f.in[0], f.in[1]
	if !f.minRank(0, 2) || !f.minRank(1, 2) {
		return nil, Float32
	}
	r := len(a.Shape)
	ok := len(b.Shape) == r && a.Shape[r-1] == b.Shape[r-2]
	for i := 0; ok && i < r-2; i++ {
		ok = a.Shape[i] == b.Shape[i]
	}
	if !ok {
		f.fail("inputs", "cannot multiply %q of shape %v by %q of shape %v (same rank and leading dims, and [..., m, k]·[..., k, n])", a.Name, a.Shape, b.Name, b.Shape)
		return nil, Float32
	}
	return append(append(Shape{}, a.Shape[:r-1]...), b.Shape[r-1]), Float32
}

func (f *inferer) transpose() (Shape, DType) {
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

func (f *inferer) slice() (Shape, DType) {
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

func (f *inferer) reduce() (Shape, DType) {
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

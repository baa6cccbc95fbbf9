package dag

// Tensor is what Build knows about a named tensor: an input or an op's output.
type Tensor struct {
	Name  string
	Shape Shape
	DType DType
	// Range is the [lo, hi) bound of an int32 input's values, nil otherwise.
	Range *[2]int64
	// Producer is the index of the op in Model.Ops that produces it, -1 for an input.
	Producer int
}

// Bytes is the size of one sample of the tensor.
func (t *Tensor) Bytes() int64 { return t.Shape.Elems() * t.DType.Size() }

// normAxis maps a possibly negative axis onto [0, rank).
func normAxis(axis int64, rank int) (int, bool) {
	if axis < 0 {
		axis += int64(rank)
	}
	if axis < 0 || axis >= int64(rank) {
		return 0, false
	}
	return int(axis), true
}

// inferer checks one op's inputs and computes its output.
type inferer struct {
	op      *Op
	in      []*Tensor
	c       *errs
	ok      bool
	version int
	rng     *[2]int64 // the output's value range, for an int32 constant
}

func (f *inferer) fail(field, format string, args ...any) {
	f.c.op(f.op.Name, field, format, args...)
	f.ok = false
}

func (f *inferer) float(i int) {
	if f.in[i].DType != Float32 {
		f.fail("inputs", "input %q is %s, want float32", f.in[i].Name, f.in[i].DType)
	}
}

func (f *inferer) int32(i int) {
	if f.in[i].DType != Int32 {
		f.fail("inputs", "input %q is %s, want int32 indices", f.in[i].Name, f.in[i].DType)
	}
}

func (f *inferer) minRank(i, r int) bool {
	if len(f.in[i].Shape) < r {
		f.fail("inputs", "input %q has shape %v, want at least %d dims", f.in[i].Name, f.in[i].Shape, r)
		return false
	}
	return true
}

func (f *inferer) rank(i, r int) bool {
	if len(f.in[i].Shape) != r {
		f.fail("inputs", "input %q has shape %v, want %d dims", f.in[i].Name, f.in[i].Shape, r)
		return false
	}
	return true
}

func (f *inferer) sameShapes() {
	for i := 1; i < len(f.in); i++ {
		if !f.in[i].Shape.Equal(f.in[0].Shape) {
			f.fail("inputs", "input %q has shape %v, but %q has %v", f.in[i].Name, f.in[i].Shape, f.in[0].Name, f.in[0].Shape)
			return
		}
	}
}

// bounded checks that an int32 input's declared range lies within [0, hi).
func (f *inferer) bounded(i int, hi int64, what string) {
	r := f.in[i].Range
	if r != nil && (r[0] < 0 || r[1] > hi) {
		f.fail("inputs", "input %q has range [%d, %d), outside [0, %d) of %s", f.in[i].Name, r[0], r[1], hi, what)
	}
}

func (f *inferer) allFloat() {
	for i := range f.in {
		f.float(i)
	}
}

// infer returns the op's output shape and dtype (and, for an int32
// constant, its range); ok is false if it reported problems.
func infer(op *Op, in []*Tensor, c *errs, version int) (Shape, DType, *[2]int64, bool) {
	f := &inferer{op: op, in: in, c: c, ok: true, version: version}
	out, dt := f.run()
	return out, dt, f.rng, f.ok
}

func (f *inferer) run() (Shape, DType) {
	spec := kinds[f.op.Kind]
	if spec.infer == nil {
		panic("dag: infer: unhandled kind " + string(f.op.Kind))
	}
	return spec.infer(f)
}

func withLast(s Shape, d int64) Shape {
	out := append(Shape{}, s...)
	out[len(out)-1] = d
	return out
}

func withAppended(s Shape, d int64) Shape {
	return append(append(Shape{}, s...), d)
}

func without(s Shape, ax int) Shape {
	out := append(Shape{}, s[:ax]...)
	return append(out, s[ax+1:]...)
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

// inferSame is an op of one float32 input whose output has its shape.
func inferSame(f *inferer) (Shape, DType) {
	f.float(0)
	return f.in[0].Shape, Float32
}

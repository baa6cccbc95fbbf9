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
	a := f.op.Attrs
	x := f.in
	switch f.op.Kind {
	case Linear:
		f.float(0)
		if !f.minRank(0, 1) {
			return nil, Float32
		}
		return withLast(x[0].Shape, a.Out), Float32
	case ReLU, GELU, Tanh, Sigmoid:
		f.float(0)
		return x[0].Shape, Float32
	case LayerNorm:
		f.float(0)
		f.minRank(0, 1)
		return x[0].Shape, Float32
	case Add, Mul:
		f.allFloat()
		if f.version >= 2 {
			return f.broadcast(), Float32
		}
		f.sameShapes()
		return x[0].Shape, Float32
	case Concat:
		f.allFloat()
		return f.concat()
	case Mean:
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
	case Flatten:
		f.float(0)
		return Shape{x[0].Shape.Elems()}, Float32
	case Embedding:
		f.int32(0)
		f.bounded(0, a.Num, "attrs.num")
		return withAppended(x[0].Shape, a.Dim), Float32
	case EmbeddingBag:
		f.int32(0)
		f.rank(0, 1)
		f.bounded(0, a.Num, "attrs.num")
		return Shape{a.Dim}, Float32
	case Attention:
		f.float(0)
		if !f.rank(0, 2) {
			return nil, Float32
		}
		if a.Heads > 0 && x[0].Shape[1]%a.Heads != 0 {
			f.fail("attrs.heads", "model width %d of input %q is not divisible by %d heads", x[0].Shape[1], x[0].Name, a.Heads)
		}
		return x[0].Shape, Float32
	case DotInteraction:
		f.allFloat()
		for i := range x {
			f.rank(i, 1)
		}
		f.sameShapes()
		n := int64(len(x))
		return Shape{n * (n - 1) / 2}, Float32
	case SoftmaxCrossEntropy:
		f.float(0)
		f.int32(1)
		if f.rank(0, 1) {
			f.bounded(1, x[0].Shape[0], "the logits' classes")
		}
		f.rank(1, 0)
		return Shape{}, Float32
	case MSE, BCEWithLogits:
		f.allFloat()
		f.sameShapes()
		return Shape{}, Float32
	case Opaque:
		return append(Shape{}, a.OutShape...), a.OutDType
	}
	return f.runV2()
}

func (f *inferer) concat() (Shape, DType) {
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

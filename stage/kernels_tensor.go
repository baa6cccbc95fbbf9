package stage

import "github.com/graphpipe/graphpipe/dag"

// reshape: x [n, ...] → y [n, shape...], the same elements in order.
type reshape[T Num] struct{ shape []int }

func reshapeKernel[T Num](o *opArgs) *reshape[T] {
	return &reshape[T]{shape: toIntsShape(o.op.Attrs.Shape)}
}

func (k *reshape[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](append([]int{x[0].Shape[0]}, k.shape...)...)
	copy(y.Data, x[0].Data)
	return y, nil, nil
}

func (k *reshape[T]) backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] != nil {
		addInto(gx[0].Data, gy.Data)
	}
}

// transpose: x [n, d0, ..., dr-1] → y [n, d_perm[0], ..., d_perm[r-1]].
type transpose[T Num] struct {
	perm   []int
	in     []int // per-sample input dims
	out    []int // per-sample output dims
	stride []int // per output dim, the input stride it walks
}

func transposeKernel[T Num](o *opArgs) *transpose[T] {
	return newTranspose[T](toIntsShape(o.in[0].Shape), toIntsShape(o.op.Attrs.Perm))
}

func newTranspose[T Num](in, perm []int) *transpose[T] {
	k := &transpose[T]{perm: perm, in: in, out: make([]int, len(in)), stride: make([]int, len(in))}
	st := rowStrides(in)
	for i, p := range perm {
		k.out[i], k.stride[i] = in[p], st[p]
	}
	return k
}

// rowStrides is a row-major shape's strides.
func rowStrides(dims []int) []int {
	st := make([]int, len(dims))
	acc := 1
	for i := len(dims) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= dims[i]
	}
	return st
}

// walk calls f(o, i) for every output element o of a sample and the input
// element i it reads, output in order.
func walk(out, stride []int, f func(o, i int)) {
	r := len(out)
	if r == 0 {
		f(0, 0)
		return
	}
	idx := make([]int, r)
	src := 0
	total := 1
	for _, d := range out {
		total *= d
	}
	for o := 0; o < total; o++ {
		f(o, src)
		for d := r - 1; d >= 0; d-- {
			idx[d]++
			src += stride[d]
			if idx[d] < out[d] {
				break
			}
			src -= stride[d] * out[d]
			idx[d] = 0
		}
	}
}

func (k *transpose[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	y := NewValue[T](append([]int{n}, k.out...)...)
	per := sizeOf(k.in)
	for s := 0; s < n; s++ {
		src, dst := x[0].Data[s*per:(s+1)*per], y.Data[s*per:(s+1)*per]
		walk(k.out, k.stride, func(o, i int) { dst[o] = src[i] })
	}
	return y, nil, nil
}

func (k *transpose[T]) backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	per := sizeOf(k.in)
	for s := 0; s < gy.Shape[0]; s++ {
		g, dst := gy.Data[s*per:(s+1)*per], gx[0].Data[s*per:(s+1)*per]
		walk(k.out, k.stride, func(o, i int) { dst[i] += g[o] })
	}
}

// span splits a value's shape around axis ax: the elements before it (the
// batch included), its length, and the elements after it.
func span(shape []int, ax int) (outer, n, inner int) {
	outer, inner = 1, 1
	for _, d := range shape[:ax] {
		outer *= d
	}
	for _, d := range shape[ax+1:] {
		inner *= d
	}
	return outer, shape[ax], inner
}

// softmax along axis (of the batch-major value), stabilised by the maximum.
type softmax[T Num] struct{ axis int }

func softmaxKernel[T Num](o *opArgs) *softmax[T] {
	return &softmax[T]{axis: axis(o.op.Attrs.Axis, len(o.in[0].Shape))}
}

func (k *softmax[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	outer, n, inner := span(x[0].Shape, k.axis)
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			base := o*n*inner + in
			m := x[0].Data[base]
			for j := 1; j < n; j++ {
				m = max(m, x[0].Data[base+j*inner])
			}
			var sum float64
			for j := 0; j < n; j++ {
				e := exp64(float64(x[0].Data[base+j*inner] - m))
				y.Data[base+j*inner] = T(e)
				sum += e
			}
			for j := 0; j < n; j++ {
				y.Data[base+j*inner] = T(float64(y.Data[base+j*inner]) / sum)
			}
		}
	}
	return y, nil, nil
}

// backward: gx = y ⊙ (gy − Σ gy ⊙ y) along the axis.
func (k *softmax[T]) backward(gy *Value[T], _, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	outer, n, inner := span(y.Shape, k.axis)
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			base := o*n*inner + in
			var dot float64
			for j := 0; j < n; j++ {
				dot += float64(gy.Data[base+j*inner]) * float64(y.Data[base+j*inner])
			}
			for j := 0; j < n; j++ {
				p := base + j*inner
				gx[0].Data[p] += T(float64(y.Data[p]) * (float64(gy.Data[p]) - dot))
			}
		}
	}
}

// slice keeps n elements of axis, from first by step.
type slice[T Num] struct{ axis, first, n, step int }

func sliceKernel[T Num](o *opArgs) *slice[T] {
	a, ax := &o.op.Attrs, axis(o.op.Attrs.Axis, len(o.in[0].Shape))
	first, n := dag.SliceRange(o.in[0].Shape[ax-1], a.Start, a.End, a.Step)
	return &slice[T]{axis: ax, first: int(first), n: int(n), step: int(a.Step)}
}

func (k *slice[T]) each(shape []int, f func(dst, src int)) {
	outer, d, inner := span(shape, k.axis)
	for o := 0; o < outer; o++ {
		for j := 0; j < k.n; j++ {
			src := (o*d + k.first + j*k.step) * inner
			dst := (o*k.n + j) * inner
			for in := 0; in < inner; in++ {
				f(dst+in, src+in)
			}
		}
	}
}

func (k *slice[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	shape := append([]int(nil), x[0].Shape...)
	shape[k.axis] = k.n
	y := NewValue[T](shape...)
	k.each(x[0].Shape, func(dst, src int) { y.Data[dst] = x[0].Data[src] })
	return y, nil, nil
}

func (k *slice[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] != nil {
		k.each(x[0].Shape, func(dst, src int) { gx[0].Data[src] += gy.Data[dst] })
	}
}

// pad grows each per-sample axis i by pads[i] before and pads[r+i] after,
// filling with value.
type pad[T Num] struct {
	pads  []int
	value T
}

func padKernel[T Num](o *opArgs) *pad[T] {
	return &pad[T]{pads: toIntsShape(o.op.Attrs.Pads), value: T(o.op.Attrs.PadValue)}
}

// place calls f(dst, src) for every element of x inside the padded value.
func (k *pad[T]) place(xs []int, f func(dst, src int)) {
	r := len(xs) - 1
	out := make([]int, len(xs))
	out[0] = xs[0]
	for i := 0; i < r; i++ {
		out[i+1] = xs[i+1] + k.pads[i] + k.pads[r+i]
	}
	ost := rowStrides(out)
	walk(xs, ost, func(src, dst int) {
		off := 0
		for i := 0; i < r; i++ {
			off += k.pads[i] * ost[i+1]
		}
		f(dst+off, src)
	})
}

func (k *pad[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	r := len(x[0].Shape) - 1
	shape := append([]int(nil), x[0].Shape...)
	for i := 0; i < r; i++ {
		shape[i+1] += k.pads[i] + k.pads[r+i]
	}
	y := NewValue[T](shape...)
	if k.value != 0 {
		for i := range y.Data {
			y.Data[i] = k.value
		}
	}
	k.place(x[0].Shape, func(dst, src int) { y.Data[dst] = x[0].Data[src] })
	return y, nil, nil
}

func (k *pad[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] != nil {
		k.place(x[0].Shape, func(dst, src int) { gx[0].Data[src] += gy.Data[dst] })
	}
}

// matmul: a [n, L..., m, k] · b [n, L..., k, p] → [n, L..., m, p], one
// product per (sample, leading index).
type matmul[T Num] struct{}

func matmulKernel[T Num](*opArgs) *matmul[T] { return &matmul[T]{} }

func (matmul[T]) dims(a, b []int) (batch, m, kk, p int) {
	r := len(a)
	m, kk, p = a[r-2], a[r-1], b[r-1]
	batch = 1
	for _, d := range a[:r-2] {
		batch *= d
	}
	return
}

func (k *matmul[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	batch, m, kk, p := k.dims(x[0].Shape, x[1].Shape)
	shape := append(append([]int(nil), x[0].Shape[:len(x[0].Shape)-1]...), p)
	y := NewValue[T](shape...)
	gemmBatched(false, false, m, p, kk, x[0].Data, kk, m*kk, x[1].Data, p, kk*p, 0, y.Data, p, m*p, batch) // c[m,p] = a[m,k]·b[k,p], each sample
	return y, nil, nil
}

func (k *matmul[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	batch, m, kk, p := k.dims(x[0].Shape, x[1].Shape)
	if gx[0] != nil { // ga[m,k] += g[m,p]·bᵀ[p,k], each sample
		gemmBatched(false, true, m, kk, p, gy.Data, p, m*p, x[1].Data, p, kk*p, 1, gx[0].Data, kk, m*kk, batch)
	}
	if gx[1] != nil { // gb[k,p] += aᵀ[k,m]·g[m,p], each sample
		gemmBatched(true, false, kk, p, m, x[0].Data, kk, m*kk, gy.Data, p, m*p, 1, gx[1].Data, p, kk*p, batch)
	}
}

// broadcast is add, sub, mul or div of inputs whose per-sample shapes
// broadcast (NumPy's rules); add may take more than two.
type broadcast[T Num] struct {
	kind    dag.Kind
	out     []int   // per-sample output dims
	strides [][]int // per input, its stride along each output dim (0 where it stretches)
}

// arithKernel is sub's and div's kernel, and add's and mul's in model@2's
// forms: with a scalar operand, or of inputs that broadcast.
func arithKernel[T Num](o *opArgs) kernel[T] {
	if o.op.Attrs.HasScalar {
		return scalarKernel[T](o)
	}
	return broadcastKernel[T](o)
}

func broadcastKernel[T Num](o *opArgs) *broadcast[T] { return newBroadcast[T](o.op.Kind, o.in, o.out) }

func newBroadcast[T Num](kind dag.Kind, in []*dag.Tensor, out *dag.Tensor) *broadcast[T] {
	k := &broadcast[T]{kind: kind, out: toIntsShape(out.Shape)}
	r := len(k.out)
	for _, t := range in {
		s := toIntsShape(t.Shape)
		st := rowStrides(s)
		full := make([]int, r)
		for d := 0; d < r; d++ {
			if j := len(s) - r + d; j >= 0 && s[j] != 1 {
				full[d] = st[j]
			}
		}
		k.strides = append(k.strides, full)
	}
	return k
}

func (k *broadcast[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	y := NewValue[T](append([]int{n}, k.out...)...)
	per := sizeOf(k.out)
	for j, v := range x {
		pin := len(v.Data) / max(n, 1)
		for s := 0; s < n; s++ {
			src, dst := v.Data[s*pin:(s+1)*pin], y.Data[s*per:(s+1)*per]
			walk(k.out, k.strides[j], func(o, i int) {
				switch {
				case j == 0:
					dst[o] = src[i]
				case k.kind == dag.Add:
					dst[o] += src[i]
				case k.kind == dag.Sub:
					dst[o] -= src[i]
				case k.kind == dag.Mul:
					dst[o] *= src[i]
				default:
					dst[o] /= src[i]
				}
			})
		}
	}
	return y, nil, nil
}

func (k *broadcast[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	n := gy.Shape[0]
	per := sizeOf(k.out)
	pin := func(j int) int { return len(x[j].Data) / max(n, 1) }
	for j := range x {
		if gx[j] == nil {
			continue
		}
		for s := 0; s < n; s++ {
			g := gy.Data[s*per : (s+1)*per]
			dst := gx[j].Data[s*pin(j) : (s+1)*pin(j)]
			var a, b []T
			if len(x) == 2 {
				a, b = x[0].Data[s*pin(0):(s+1)*pin(0)], x[1].Data[s*pin(1):(s+1)*pin(1)]
			}
			ia, ib := 0, 0
			walk(k.out, k.strides[j], func(o, i int) {
				if len(x) == 2 {
					ia, ib = index(o, k.out, k.strides[0]), index(o, k.out, k.strides[1])
				}
				switch k.kind {
				case dag.Add:
					dst[i] += g[o]
				case dag.Sub:
					if j == 0 {
						dst[i] += g[o]
					} else {
						dst[i] -= g[o]
					}
				case dag.Mul:
					dst[i] += g[o] * [2][]T{b, a}[j][[2]int{ib, ia}[j]]
				default: // y = a/b: ∂a = 1/b, ∂b = −a/b²
					if j == 0 {
						dst[i] += g[o] / b[ib]
					} else {
						dst[i] -= g[o] * a[ia] / (b[ib] * b[ib])
					}
				}
			})
		}
	}
}

// index is the input element that output element o of a sample reads.
func index(o int, out, stride []int) int {
	i := 0
	for d := len(out) - 1; d >= 0; d-- {
		i += (o % out[d]) * stride[d]
		o /= out[d]
	}
	return i
}

// scalarOp is x + s, x − s, x · s, x / s, or with reverse s − x, s / x.
type scalarOp[T Num] struct {
	kind    dag.Kind
	s       float64
	reverse bool
}

func scalarKernel[T Num](o *opArgs) *scalarOp[T] {
	return &scalarOp[T]{kind: o.op.Kind, s: o.op.Attrs.Scalar, reverse: o.op.Attrs.Reverse}
}

func (k *scalarOp[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	s := T(k.s)
	for i, v := range x[0].Data {
		switch {
		case k.kind == dag.Add:
			y.Data[i] = v + s
		case k.kind == dag.Mul:
			y.Data[i] = v * s
		case k.kind == dag.Sub && k.reverse:
			y.Data[i] = s - v
		case k.kind == dag.Sub:
			y.Data[i] = v - s
		case k.reverse:
			y.Data[i] = s / v
		default:
			y.Data[i] = v / s
		}
	}
	return y, nil, nil
}

func (k *scalarOp[T]) backward(gy *Value[T], x, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	s := T(k.s)
	for i, g := range gy.Data {
		switch {
		case k.kind == dag.Add:
			gx[0].Data[i] += g
		case k.kind == dag.Mul:
			gx[0].Data[i] += g * s
		case k.kind == dag.Sub && k.reverse:
			gx[0].Data[i] -= g
		case k.kind == dag.Sub:
			gx[0].Data[i] += g
		case k.reverse: // d(s/x) = −s/x² = −y/x
			gx[0].Data[i] -= g * y.Data[i] / x[0].Data[i]
		default:
			gx[0].Data[i] += g / s
		}
	}
}

// parameter: every sample's output is the parameter p[0]; its gradient is
// summed over the batch. It has no inputs: the micro-batch's rows come from
// the executor (ctx).
type parameter[T Num] struct{ ctx *runCtx }

func parameterKernel[T Num](o *opArgs) *parameter[T] { return &parameter[T]{ctx: o.ctx} }

func (k *parameter[T]) forward(_, p []*Value[T]) (*Value[T], any, error) {
	n := k.ctx.pos.Rows
	y := NewValue[T](append([]int{n}, p[0].Shape...)...)
	per := len(p[0].Data)
	for s := 0; s < n; s++ {
		copy(y.Data[s*per:(s+1)*per], p[0].Data)
	}
	return y, nil, nil
}

func (parameter[T]) backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, _, gp []*Value[T]) {
	if gp == nil || gp[0] == nil {
		return
	}
	per := len(gp[0].Data)
	for s := 0; s < gy.Shape[0]; s++ {
		addInto(gp[0].Data, gy.Data[s*per:(s+1)*per])
	}
}

// constant: every sample's output is the constant (float or int32; one
// value fills it all).
type constant[T Num] struct {
	shape  []int
	values []float64
	ints   bool
	ctx    *runCtx
}

func constantKernel[T Num](o *opArgs) *constant[T] {
	a := &o.op.Attrs
	return &constant[T]{shape: toIntsShape(a.Shape), values: a.Values, ints: a.OutDType == dag.Int32, ctx: o.ctx}
}

func (constant[T]) backward(*Value[T], []*Value[T], []*Value[T], *Value[T], any, []*Value[T], []*Value[T]) {
}

func (k *constant[T]) forward(_, _ []*Value[T]) (*Value[T], any, error) {
	n := k.ctx.pos.Rows
	per := sizeOf(k.shape)
	y := &Value[T]{Shape: append([]int{n}, k.shape...)}
	at := func(i int) float64 { return k.values[min(i, len(k.values)-1)] }
	if k.ints {
		y.Ints = make([]int32, n*per)
		for i := range y.Ints {
			y.Ints[i] = int32(at(i % per))
		}
		return y, nil, nil
	}
	y.Data = make([]T, n*per)
	for i := range y.Data {
		y.Data[i] = T(at(i % per))
	}
	return y, nil, nil
}

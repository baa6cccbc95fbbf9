package kernel

import (
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
)

// concat along one axis: each input is [outer, w_i·inner] around the axis.
type concat[T Num] struct{ axis int }

func concatKernel[T Num](o *opArgs) *concat[T] {
	return &concat[T]{axis: axis(o.op.Attrs.Axis, len(o.in[0].Shape))}
}

func (k *concat[T]) split(shape []int) (outer, inner int) {
	return tensor.Size(shape[:k.axis]), tensor.Size(shape[k.axis+1:])
}

func (k *concat[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	shape := append([]int(nil), x[0].Shape...)
	shape[k.axis] = 0
	for _, xi := range x {
		shape[k.axis] += xi.Shape[k.axis]
	}
	y := NewValue[T](shape...)
	outer, inner := k.split(shape)
	width := shape[k.axis] * inner
	off := 0
	for _, xi := range x {
		w := xi.Shape[k.axis] * inner
		for o := 0; o < outer; o++ {
			copy(y.Data[o*width+off:o*width+off+w], xi.Data[o*w:(o+1)*w])
		}
		off += w
	}
	return y, nil, nil
}

func (k *concat[T]) Backward(gy *Value[T], x, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
	outer, inner := k.split(y.Shape)
	width := y.Shape[k.axis] * inner
	off := 0
	for j, xi := range x {
		w := xi.Shape[k.axis] * inner
		if gx[j] != nil {
			for o := 0; o < outer; o++ {
				addInto(gx[j].Data[o*w:(o+1)*w], gy.Data[o*width+off:o*width+off+w])
			}
		}
		off += w
	}
}

// flatten: [n, ...] → [n, product].
type flatten[T Num] struct{}

func flattenKernel[T Num](*opArgs) *flatten[T] { return &flatten[T]{} }

func (flatten[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	y := NewValue[T](n, len(x[0].Data)/max(n, 1))
	copy(y.Data, x[0].Data)
	return y, nil, nil
}

func (flatten[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] != nil {
		addInto(gx[0].Data, gy.Data)
	}
}

// reshape: x [n, ...] → y [n, shape...], the same elements in order.
type reshape[T Num] struct{ shape []int }

func reshapeKernel[T Num](o *opArgs) *reshape[T] {
	return &reshape[T]{shape: IntShape(o.op.Attrs.Shape)}
}

func (k *reshape[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](append([]int{x[0].Shape[0]}, k.shape...)...)
	copy(y.Data, x[0].Data)
	return y, nil, nil
}

func (k *reshape[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
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
	return newTranspose[T](IntShape(o.in[0].Shape), IntShape(o.op.Attrs.Perm))
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

func (k *transpose[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	y := NewValue[T](append([]int{n}, k.out...)...)
	per := SizeOf(k.in)
	for s := 0; s < n; s++ {
		src, dst := x[0].Data[s*per:(s+1)*per], y.Data[s*per:(s+1)*per]
		walk(k.out, k.stride, func(o, i int) { dst[o] = src[i] })
	}
	return y, nil, nil
}

func (k *transpose[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	per := SizeOf(k.in)
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

func (k *slice[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	shape := append([]int(nil), x[0].Shape...)
	shape[k.axis] = k.n
	y := NewValue[T](shape...)
	k.each(x[0].Shape, func(dst, src int) { y.Data[dst] = x[0].Data[src] })
	return y, nil, nil
}

func (k *slice[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
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
	return &pad[T]{pads: IntShape(o.op.Attrs.Pads), value: T(o.op.Attrs.PadValue)}
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

func (k *pad[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
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

func (k *pad[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] != nil {
		k.place(x[0].Shape, func(dst, src int) { gx[0].Data[src] += gy.Data[dst] })
	}
}

package kernel

import (
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
)

// reduce sums (or averages) a value over some per-sample axes.
type reduce[T Num] struct {
	in     []int // per-sample input dims
	out    []int // per-sample output dims (with keepdims' 1s)
	stride []int // per input dim, its stride in the output (0 where reduced)
	axes   []int // the reduced axes, sorted
	mean   bool
	count  int // elements summed into each output
}

func reduceMeanKernel[T Num](o *opArgs) *reduce[T] { return reduceKernel[T](o, true) }

func reduceSumKernel[T Num](o *opArgs) *reduce[T] { return reduceKernel[T](o, false) }

func reduceKernel[T Num](o *opArgs, mean bool) *reduce[T] {
	axes, _ := dag.ReduceAxes(o.op.Attrs.Axes, len(o.in[0].Shape))
	return newReduce[T](IntShape(o.in[0].Shape), IntShape(o.out.Shape), axes, mean)
}

func newReduce[T Num](in, outShape []int, axes []int, mean bool) *reduce[T] {
	red := make([]bool, len(in))
	for _, a := range axes {
		red[a] = true
	}
	var out []int
	for i, d := range in {
		if !red[i] {
			out = append(out, d)
		}
	}
	ost := rowStrides(out)
	k := &reduce[T]{in: in, out: outShape, stride: make([]int, len(in)), axes: axes, mean: mean, count: 1}
	j := 0
	for i, d := range in {
		if red[i] {
			k.count *= d
			continue
		}
		k.stride[i] = ost[j]
		j++
	}
	return k
}

func (k *reduce[T]) scale() float64 {
	if k.mean {
		return 1 / float64(k.count)
	}
	return 1
}

func (k *reduce[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	per := SizeOf(k.in)
	operSample := per / k.count
	acc := make([]float64, operSample)
	y := NewValue[T](append([]int{n}, k.out...)...)
	for s := 0; s < n; s++ {
		clear(acc)
		src := x[0].Data[s*per : (s+1)*per]
		walk(k.in, k.stride, func(i, o int) { acc[o] += float64(src[i]) })
		for o, v := range acc {
			y.Data[s*operSample+o] = T(v * k.scale())
		}
	}
	return y, nil, nil
}

func (k *reduce[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	per := SizeOf(k.in)
	operSample := per / k.count
	sc := T(k.scale())
	for s := 0; s < gy.Shape[0]; s++ {
		g, dst := gy.Data[s*operSample:(s+1)*operSample], gx[0].Data[s*per:(s+1)*per]
		walk(k.in, k.stride, func(i, o int) { dst[i] += g[o] * sc })
	}
}

// mean over one axis: x [outer, L, inner] → y [outer, inner].
type mean[T Num] struct{ axis int }

func meanKernel[T Num](o *opArgs) *mean[T] {
	return &mean[T]{axis: axis(o.op.Attrs.Axis, len(o.in[0].Shape))}
}

func (k *mean[T]) dims(shape []int) (outer, l, inner int) {
	return tensor.Size(shape[:k.axis]), shape[k.axis], tensor.Size(shape[k.axis+1:])
}

func (k *mean[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	shape := append(append([]int(nil), x[0].Shape[:k.axis]...), x[0].Shape[k.axis+1:]...)
	y := NewValue[T](shape...)
	outer, l, inner := k.dims(x[0].Shape)
	for o := 0; o < outer; o++ {
		dst := y.Data[o*inner : (o+1)*inner]
		for j := 0; j < l; j++ {
			addInto(dst, x[0].Data[(o*l+j)*inner:(o*l+j+1)*inner])
		}
		for i := range dst {
			dst[i] /= T(l)
		}
	}
	return y, nil, nil
}

func (k *mean[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	outer, l, inner := k.dims(x[0].Shape)
	for o := 0; o < outer; o++ {
		src := gy.Data[o*inner : (o+1)*inner]
		for j := 0; j < l; j++ {
			dst := gx[0].Data[(o*l+j)*inner : (o*l+j+1)*inner]
			for i := range dst {
				dst[i] += src[i] / T(l)
			}
		}
	}
}

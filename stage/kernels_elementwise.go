package stage

import (
	"math"

	"github.com/graphpipe/graphpipe/dag"
)

func exp64(x float64) float64 { return math.Exp(x) }

// unary is an elementwise op of one input: exp, log, sqrt, neg, erf, or
// pow with a constant exponent.
type unary[T Num] struct {
	kind     dag.Kind
	exponent float64
}

func unaryKernel[T Num](o *opArgs) *unary[T] { return &unary[T]{kind: o.op.Kind} }

func powKernel[T Num](o *opArgs) *unary[T] {
	return &unary[T]{kind: o.op.Kind, exponent: o.op.Attrs.Exponent}
}

func (k *unary[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	for i, v := range x[0].Data {
		f := float64(v)
		switch k.kind {
		case dag.Exp:
			f = math.Exp(f)
		case dag.Log:
			f = math.Log(f)
		case dag.Sqrt:
			f = math.Sqrt(f)
		case dag.Neg:
			f = -f
		case dag.Erf:
			f = math.Erf(f)
		case dag.Pow:
			f = math.Pow(f, k.exponent)
		}
		y.Data[i] = T(f)
	}
	return y, nil, nil
}

func (k *unary[T]) backward(gy *Value[T], x, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	for i, g := range gy.Data {
		f := float64(x[0].Data[i])
		var d float64
		switch k.kind {
		case dag.Exp:
			d = float64(y.Data[i])
		case dag.Log:
			d = 1 / f
		case dag.Sqrt:
			d = 0.5 / float64(y.Data[i])
		case dag.Neg:
			d = -1
		case dag.Erf:
			d = 2 / math.Sqrt(math.Pi) * math.Exp(-f*f)
		case dag.Pow:
			switch k.exponent {
			case 0:
				d = 0
			case 1:
				d = 1
			case 2:
				d = 2 * f
			default:
				d = k.exponent * math.Pow(f, k.exponent-1)
			}
		}
		gx[0].Data[i] += T(float64(g) * d)
	}
}

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
	return newReduce[T](toIntsShape(o.in[0].Shape), toIntsShape(o.out.Shape), axes, mean)
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

func (k *reduce[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	per := sizeOf(k.in)
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

func (k *reduce[T]) backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	per := sizeOf(k.in)
	operSample := per / k.count
	sc := T(k.scale())
	for s := 0; s < gy.Shape[0]; s++ {
		g, dst := gy.Data[s*operSample:(s+1)*operSample], gx[0].Data[s*per:(s+1)*per]
		walk(k.in, k.stride, func(i, o int) { dst[i] += g[o] * sc })
	}
}

// dropout zeroes each element with probability p and scales the rest by
// 1/(1−p), the mask a function of (seed, step, op, sample, element) alone
// (context.go): drawn again by the backward pass, never stashed.
type dropout[T Num] struct {
	op  string
	p   float64
	ctx *runCtx
}

func dropoutKernel[T Num](o *opArgs) *dropout[T] {
	return &dropout[T]{op: o.op.Name, p: o.op.Attrs.P, ctx: o.ctx}
}

func (k *dropout[T]) apply(src, dst []T, shape []int, accumulate bool) {
	n := shape[0]
	per := len(src) / max(n, 1)
	key := dropKey(k.ctx.seed, k.op, k.ctx.pos.Step)
	scale := T(1 / (1 - k.p))
	for s := 0; s < n; s++ {
		sample := uint64(k.ctx.pos.Sample + s)
		for e := 0; e < per; e++ {
			i := s*per + e
			if dropped(key, sample, uint64(e), k.p) {
				continue
			}
			if accumulate {
				dst[i] += src[i] * scale
			} else {
				dst[i] = src[i] * scale
			}
		}
	}
}

func (k *dropout[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	if k.ctx.pos.Eval {
		copy(y.Data, x[0].Data)
		return y, nil, nil
	}
	k.apply(x[0].Data, y.Data, x[0].Shape, false)
	return y, nil, nil
}

func (k *dropout[T]) backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] != nil {
		k.apply(gy.Data, gx[0].Data, gy.Shape, true)
	}
}

package kernel

import (
	"github.com/graphpipe/graphpipe/dag"
)

// add: y = Σ x_i, equal shapes.
type add[T Num] struct{}

// addKernel is add's, or in model@2's forms (a scalar, inputs that
// broadcast) the kernel of those.
func addKernel[T Num](o *opArgs) Kernel[T] {
	if broadcasts(o) {
		return arithKernel[T](o)
	}
	return &add[T]{}
}

func (add[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	for _, xi := range x {
		addInto(y.Data, xi.Data)
	}
	return y, nil, nil
}

func (add[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	for _, g := range gx {
		if g != nil {
			addInto(g.Data, gy.Data)
		}
	}
}

// mul: y = a ⊙ b.
type mul[T Num] struct{}

// mulKernel is mul's, or in model@2's forms that of those (addKernel).
func mulKernel[T Num](o *opArgs) Kernel[T] {
	if broadcasts(o) {
		return arithKernel[T](o)
	}
	return &mul[T]{}
}

func (mul[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	for i := range y.Data {
		y.Data[i] = x[0].Data[i] * x[1].Data[i]
	}
	return y, nil, nil
}

func (mul[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	for j := 0; j < 2; j++ {
		if gx[j] == nil {
			continue
		}
		other := x[1-j].Data
		for i, g := range gy.Data {
			gx[j].Data[i] += g * other[i]
		}
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
func arithKernel[T Num](o *opArgs) Kernel[T] {
	if o.op.Attrs.HasScalar {
		return scalarKernel[T](o)
	}
	return broadcastKernel[T](o)
}

func broadcastKernel[T Num](o *opArgs) *broadcast[T] { return newBroadcast[T](o.op.Kind, o.in, o.out) }

func newBroadcast[T Num](kind dag.Kind, in []*dag.Tensor, out *dag.Tensor) *broadcast[T] {
	k := &broadcast[T]{kind: kind, out: IntShape(out.Shape)}
	r := len(k.out)
	for _, t := range in {
		s := IntShape(t.Shape)
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

func (k *broadcast[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	y := NewValue[T](append([]int{n}, k.out...)...)
	per := SizeOf(k.out)
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

func (k *broadcast[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	n := gy.Shape[0]
	per := SizeOf(k.out)
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

func (k *scalarOp[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
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

func (k *scalarOp[T]) Backward(gy *Value[T], x, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
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

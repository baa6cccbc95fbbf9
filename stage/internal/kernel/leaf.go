package kernel

import (
	"github.com/graphpipe/graphpipe/dag"
)

// parameter: every sample's output is the parameter p[0]; its gradient is
// summed over the batch. It has no inputs: the micro-batch's rows come from
// the executor (ctx).
type parameter[T Num] struct{ ctx *Pass }

func parameterKernel[T Num](o *opArgs) *parameter[T] { return &parameter[T]{ctx: o.ctx} }

func (k *parameter[T]) Forward(_, p []*Value[T]) (*Value[T], any, error) {
	n := k.ctx.Pos.Rows
	y := NewValue[T](append([]int{n}, p[0].Shape...)...)
	per := len(p[0].Data)
	for s := 0; s < n; s++ {
		copy(y.Data[s*per:(s+1)*per], p[0].Data)
	}
	return y, nil, nil
}

func (parameter[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, _, gp []*Value[T]) {
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
	ctx    *Pass
}

func constantKernel[T Num](o *opArgs) *constant[T] {
	a := &o.op.Attrs
	return &constant[T]{shape: IntShape(a.Shape), values: a.Values, ints: a.OutDType == dag.Int32, ctx: o.ctx}
}

func (constant[T]) Backward(*Value[T], []*Value[T], []*Value[T], *Value[T], any, []*Value[T], []*Value[T]) {
}

func (k *constant[T]) Forward(_, _ []*Value[T]) (*Value[T], any, error) {
	n := k.ctx.Pos.Rows
	per := SizeOf(k.shape)
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

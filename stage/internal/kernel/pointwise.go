package kernel

import (
	"math"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
)

func exp64(x float64) float64 { return math.Exp(x) }

// unary is an elementwise op of one input: exp, log, sqrt, neg, erf,
// hard_swish, pow with a constant exponent, or hard_sigmoid with its slope
// and offset.
type unary[T Num] struct {
	kind        dag.Kind
	exponent    float64
	alpha, beta float64 // hard_sigmoid
}

func unaryKernel[T Num](o *opArgs) *unary[T] { return &unary[T]{kind: o.op.Kind} }

func powKernel[T Num](o *opArgs) *unary[T] {
	return &unary[T]{kind: o.op.Kind, exponent: o.op.Attrs.Exponent}
}

// hardSigmoidKernel: x [n, ...] → y = max(0, min(1, alpha·x + beta)).
func hardSigmoidKernel[T Num](o *opArgs) *unary[T] {
	return &unary[T]{kind: o.op.Kind, alpha: o.op.Attrs.Alpha, beta: o.op.Attrs.Beta}
}

func (k *unary[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
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
		case dag.HardSigmoid:
			f = max(0, min(1, k.alpha*f+k.beta))
		case dag.HardSwish: // x·relu6(x + 3)/6, PyTorch's
			f = f * min(max(f+3, 0), 6) / 6
		}
		y.Data[i] = T(f)
	}
	return y, nil, nil
}

func (k *unary[T]) Backward(gy *Value[T], x, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
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
		case dag.HardSigmoid: // the slope inside (0, 1), nothing at or past its ends
			if v := k.alpha*f + k.beta; v > 0 && v < 1 {
				d = k.alpha
			}
		case dag.HardSwish: // PyTorch's: 0 below −3, x/3 + 1/2 up to 3, 1 past it
			switch {
			case f < -3:
				d = 0
			case f <= 3:
				d = f/3 + 0.5
			default:
				d = 1
			}
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

// dropout zeroes each element with probability p and scales the rest by
// 1/(1−p), the mask a function of (seed, step, op, sample, element) alone
// (random.go): drawn again by the backward pass, never stashed.
type dropout[T Num] struct {
	op  string
	p   float64
	ctx *Pass
}

func dropoutKernel[T Num](o *opArgs) *dropout[T] {
	return &dropout[T]{op: o.op.Name, p: o.op.Attrs.P, ctx: o.ctx}
}

func (k *dropout[T]) apply(src, dst []T, shape []int, accumulate bool) {
	n := shape[0]
	per := len(src) / max(n, 1)
	key := dropKey(k.ctx.Seed, k.op, k.ctx.Pos.Step)
	scale := T(1 / (1 - k.p))
	for s := 0; s < n; s++ {
		sample := uint64(k.ctx.Pos.SampleOf(s))
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

func (k *dropout[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	if k.ctx.Pos.Eval {
		copy(y.Data, x[0].Data)
		return y, nil, nil
	}
	k.apply(x[0].Data, y.Data, x[0].Shape, false)
	return y, nil, nil
}

func (k *dropout[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] != nil {
		k.apply(gy.Data, gx[0].Data, gy.Shape, true)
	}
}

// pointwise: relu, gelu (exact, erf), tanh, sigmoid; y has x's shape.
type pointwise[T Num] struct{ kind dag.Kind }

func pointwiseKernel[T Num](o *opArgs) *pointwise[T] { return &pointwise[T]{kind: o.op.Kind} }

func (k *pointwise[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	if x32, ok := any(x[0].Data).([]float32); ok && k.kind == dag.GELU {
		tensor.GELU(any(y.Data).([]float32), x32) // AVX2 where the CPU has it
		return y, nil, nil
	}
	if x32, ok := any(x[0].Data).([]float32); ok && k.kind == dag.ReLU {
		y32 := any(y.Data).([]float32)
		EachSpan(len(x32), func(lo, hi int) { tensor.ReLU(y32[lo:hi], x32[lo:hi]) }) // AVX2 where the CPU has it
		return y, nil, nil
	}
	if k.kind == dag.ReLU {
		for i, v := range x[0].Data {
			if !(v <= 0) { // NaN passes, as in PyTorch; y starts at 0
				y.Data[i] = v
			}
		}
		return y, nil, nil
	}
	for i, v := range x[0].Data {
		f := float64(v)
		switch k.kind {
		case dag.GELU:
			f = 0.5 * f * (1 + math.Erf(f/math.Sqrt2))
		case dag.Tanh:
			f = math.Tanh(f)
		case dag.Sigmoid:
			f = 1 / (1 + math.Exp(-f))
		}
		y.Data[i] = T(f)
	}
	return y, nil, nil
}

func (k *pointwise[T]) Backward(gy *Value[T], x, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	if x32, ok := any(x[0].Data).([]float32); ok && k.kind == dag.GELU {
		tensor.GELUGrad(any(gx[0].Data).([]float32), x32, any(gy.Data).([]float32))
		return
	}
	if x32, ok := any(x[0].Data).([]float32); ok && k.kind == dag.ReLU {
		gx32, gy32 := any(gx[0].Data).([]float32), any(gy.Data).([]float32)
		EachSpan(len(x32), func(lo, hi int) { tensor.ReLUGrad(gx32[lo:hi], x32[lo:hi], gy32[lo:hi]) })
		return
	}
	if k.kind == dag.ReLU {
		for i, g := range gy.Data {
			if x[0].Data[i] > 0 { // where x ≤ 0 nothing flows, not even an Inf·0
				gx[0].Data[i] += g
			}
		}
		return
	}
	for i, g := range gy.Data {
		var d float64
		switch k.kind {
		case dag.GELU:
			f := float64(x[0].Data[i])
			d = 0.5*(1+math.Erf(f/math.Sqrt2)) + f*math.Exp(-f*f/2)/math.Sqrt(2*math.Pi)
		case dag.Tanh:
			yv := float64(y.Data[i])
			d = 1 - yv*yv
		case dag.Sigmoid:
			yv := float64(y.Data[i])
			d = yv * (1 - yv)
		}
		gx[0].Data[i] += g * T(d)
	}
}

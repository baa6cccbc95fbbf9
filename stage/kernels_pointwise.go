package stage

import (
	"math"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
)

// pointwise: relu, gelu (exact, erf), tanh, sigmoid; y has x's shape.
type pointwise[T Num] struct{ kind dag.Kind }

func pointwiseKernel[T Num](o *opArgs) *pointwise[T] { return &pointwise[T]{kind: o.op.Kind} }

func (k *pointwise[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	if x32, ok := any(x[0].Data).([]float32); ok && k.kind == dag.GELU {
		tensor.GELU(any(y.Data).([]float32), x32) // AVX2 where the CPU has it
		return y, nil, nil
	}
	if x32, ok := any(x[0].Data).([]float32); ok && k.kind == dag.ReLU {
		y32 := any(y.Data).([]float32)
		eachSpan(len(x32), func(lo, hi int) { tensor.ReLU(y32[lo:hi], x32[lo:hi]) }) // AVX2 where the CPU has it
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

func (k *pointwise[T]) backward(gy *Value[T], x, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	if x32, ok := any(x[0].Data).([]float32); ok && k.kind == dag.GELU {
		tensor.GELUGrad(any(gx[0].Data).([]float32), x32, any(gy.Data).([]float32))
		return
	}
	if x32, ok := any(x[0].Data).([]float32); ok && k.kind == dag.ReLU {
		gx32, gy32 := any(gx[0].Data).([]float32), any(gy.Data).([]float32)
		eachSpan(len(x32), func(lo, hi int) { tensor.ReLUGrad(gx32[lo:hi], x32[lo:hi], gy32[lo:hi]) })
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

// add: y = Σ x_i, equal shapes.
type add[T Num] struct{}

// addKernel is add's, or in model@2's forms (a scalar, inputs that
// broadcast) the kernel of those.
func addKernel[T Num](o *opArgs) kernel[T] {
	if broadcasts(o) {
		return arithKernel[T](o)
	}
	return &add[T]{}
}

func (add[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	for _, xi := range x {
		addInto(y.Data, xi.Data)
	}
	return y, nil, nil
}

func (add[T]) backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	for _, g := range gx {
		if g != nil {
			addInto(g.Data, gy.Data)
		}
	}
}

// mul: y = a ⊙ b.
type mul[T Num] struct{}

// mulKernel is mul's, or in model@2's forms that of those (addKernel).
func mulKernel[T Num](o *opArgs) kernel[T] {
	if broadcasts(o) {
		return arithKernel[T](o)
	}
	return &mul[T]{}
}

func (mul[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	for i := range y.Data {
		y.Data[i] = x[0].Data[i] * x[1].Data[i]
	}
	return y, nil, nil
}

func (mul[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
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

// concat along one axis: each input is [outer, w_i·inner] around the axis.
type concat[T Num] struct{ axis int }

func concatKernel[T Num](o *opArgs) *concat[T] {
	return &concat[T]{axis: axis(o.op.Attrs.Axis, len(o.in[0].Shape))}
}

func (k *concat[T]) split(shape []int) (outer, inner int) {
	return tensor.Size(shape[:k.axis]), tensor.Size(shape[k.axis+1:])
}

func (k *concat[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
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

func (k *concat[T]) backward(gy *Value[T], x, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
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

// mean over one axis: x [outer, L, inner] → y [outer, inner].
type mean[T Num] struct{ axis int }

func meanKernel[T Num](o *opArgs) *mean[T] {
	return &mean[T]{axis: axis(o.op.Attrs.Axis, len(o.in[0].Shape))}
}

func (k *mean[T]) dims(shape []int) (outer, l, inner int) {
	return tensor.Size(shape[:k.axis]), shape[k.axis], tensor.Size(shape[k.axis+1:])
}

func (k *mean[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
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

func (k *mean[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
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

// flatten: [n, ...] → [n, product].
type flatten[T Num] struct{}

func flattenKernel[T Num](*opArgs) *flatten[T] { return &flatten[T]{} }

func (flatten[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n := x[0].Shape[0]
	y := NewValue[T](n, len(x[0].Data)/max(n, 1))
	copy(y.Data, x[0].Data)
	return y, nil, nil
}

func (flatten[T]) backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] != nil {
		addInto(gx[0].Data, gy.Data)
	}
}

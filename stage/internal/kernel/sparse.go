package kernel

import (
	"fmt"
)

// embedding: indices [n, ...] → y [n, ..., dim] = W[idx]; W [num, dim].
type embedding[T Num] struct {
	op       string
	num, dim int
}

func embeddingKernel[T Num](o *opArgs) *embedding[T] {
	return &embedding[T]{op: o.op.Name, num: int(o.op.Attrs.Num), dim: int(o.op.Attrs.Dim)}
}

func checkIndex(op string, idx int32, num int) error {
	if idx < 0 || int(idx) >= num {
		return &OpError{op, fmt.Sprintf("index %d is outside the table's %d rows", idx, num)}
	}
	return nil
}

func (k *embedding[T]) Forward(x, p []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](append(append([]int(nil), x[0].Shape...), k.dim)...)
	for i, idx := range x[0].Ints {
		if err := checkIndex(k.op, idx, k.num); err != nil {
			return nil, nil, err
		}
		copy(y.Data[i*k.dim:(i+1)*k.dim], p[0].Data[int(idx)*k.dim:])
	}
	return y, nil, nil
}

func (k *embedding[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, _, gp []*Value[T]) {
	if gp == nil || gp[0] == nil {
		return
	}
	for i, idx := range x[0].Ints { // scatter-add into the rows read
		addInto(gp[0].Data[int(idx)*k.dim:(int(idx)+1)*k.dim], gy.Data[i*k.dim:(i+1)*k.dim])
	}
}

// embeddingBag: indices [n, bag] → y [n, dim], the sum or mean of the rows.
type embeddingBag[T Num] struct {
	op       string
	num, dim int
	mean     bool
}

func embeddingBagKernel[T Num](o *opArgs) *embeddingBag[T] {
	a := &o.op.Attrs
	return &embeddingBag[T]{op: o.op.Name, num: int(a.Num), dim: int(a.Dim), mean: a.Mode == "mean"}
}

func (k *embeddingBag[T]) Forward(x, p []*Value[T]) (*Value[T], any, error) {
	n, bag := x[0].Shape[0], x[0].Shape[1]
	y := NewValue[T](n, k.dim)
	for b := 0; b < n; b++ {
		dst := y.Data[b*k.dim : (b+1)*k.dim]
		for _, idx := range x[0].Ints[b*bag : (b+1)*bag] {
			if err := checkIndex(k.op, idx, k.num); err != nil {
				return nil, nil, err
			}
			addInto(dst, p[0].Data[int(idx)*k.dim:(int(idx)+1)*k.dim])
		}
		if k.mean {
			for i := range dst {
				dst[i] /= T(bag)
			}
		}
	}
	return y, nil, nil
}

func (k *embeddingBag[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, _, gp []*Value[T]) {
	if gp == nil || gp[0] == nil {
		return
	}
	n, bag := x[0].Shape[0], x[0].Shape[1]
	w := T(1)
	if k.mean {
		w = 1 / T(bag)
	}
	for b := 0; b < n; b++ {
		g := gy.Data[b*k.dim : (b+1)*k.dim]
		for _, idx := range x[0].Ints[b*bag : (b+1)*bag] {
			dst := gp[0].Data[int(idx)*k.dim : (int(idx)+1)*k.dim]
			for i := range dst {
				dst[i] += w * g[i]
			}
		}
	}
}

// dot: m vectors [n, d] → y [n, m(m-1)/2], x_i·x_j for i<j in row-major order.
type dot[T Num] struct{}

func dotKernel[T Num](*opArgs) *dot[T] { return &dot[T]{} }

func (dot[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n, d, m := x[0].Shape[0], x[0].Shape[1], len(x)
	pairs := m * (m - 1) / 2
	y := NewValue[T](n, pairs)
	for b := 0; b < n; b++ {
		p := 0
		for i := 0; i < m; i++ {
			for j := i + 1; j < m; j++ {
				var s T
				xi, xj := x[i].Data[b*d:(b+1)*d], x[j].Data[b*d:(b+1)*d]
				for e := range xi {
					s += xi[e] * xj[e]
				}
				y.Data[b*pairs+p] = s
				p++
			}
		}
	}
	return y, nil, nil
}

func (dot[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	n, d, m := x[0].Shape[0], x[0].Shape[1], len(x)
	pairs := m * (m - 1) / 2
	for b := 0; b < n; b++ {
		p := 0
		for i := 0; i < m; i++ {
			for j := i + 1; j < m; j++ {
				g := gy.Data[b*pairs+p]
				p++
				if gx[i] != nil {
					dst, src := gx[i].Data[b*d:(b+1)*d], x[j].Data[b*d:(b+1)*d]
					for e := range dst {
						dst[e] += g * src[e]
					}
				}
				if gx[j] != nil {
					dst, src := gx[j].Data[b*d:(b+1)*d], x[i].Data[b*d:(b+1)*d]
					for e := range dst {
						dst[e] += g * src[e]
					}
				}
			}
		}
	}
}

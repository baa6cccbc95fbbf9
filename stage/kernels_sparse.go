package stage

import (
	"fmt"
	"math"
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

func (k *embedding[T]) forward(x, p []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](append(append([]int(nil), x[0].Shape...), k.dim)...)
	for i, idx := range x[0].Ints {
		if err := checkIndex(k.op, idx, k.num); err != nil {
			return nil, nil, err
		}
		copy(y.Data[i*k.dim:(i+1)*k.dim], p[0].Data[int(idx)*k.dim:])
	}
	return y, nil, nil
}

func (k *embedding[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, _, gp []*Value[T]) {
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

func (k *embeddingBag[T]) forward(x, p []*Value[T]) (*Value[T], any, error) {
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

func (k *embeddingBag[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, _, gp []*Value[T]) {
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

func (dot[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
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

func (dot[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
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

// crossEntropy: logits [n, c], labels [n] → the mean over n of
// logsumexp(logits) − logits[label]. y is [1].
type crossEntropy[T Num] struct{ op string }

func crossEntropyKernel[T Num](o *opArgs) *crossEntropy[T] { return &crossEntropy[T]{op: o.op.Name} }

func (k *crossEntropy[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	n, c := x[0].Shape[0], x[0].Shape[1]
	probs := make([]T, n*c)
	var loss float64
	for b := 0; b < n; b++ {
		lab := x[1].Ints[b]
		if err := checkIndex(k.op, lab, c); err != nil {
			return nil, nil, err
		}
		row := x[0].Data[b*c : (b+1)*c]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(sum)
		loss += lse - float64(row[lab])
		for j, v := range row {
			probs[b*c+j] = T(math.Exp(float64(v) - lse))
		}
	}
	y := NewValue[T](1)
	y.Data[0] = T(loss / float64(n))
	return y, probs, nil
}

func (k *crossEntropy[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], st any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	probs := st.([]T)
	n, c := x[0].Shape[0], x[0].Shape[1]
	g := gy.Data[0] / T(n)
	for b := 0; b < n; b++ {
		for j := 0; j < c; j++ {
			d := probs[b*c+j]
			if int32(j) == x[1].Ints[b] {
				d--
			}
			gx[0].Data[b*c+j] += g * d
		}
	}
}

// mse: the mean over batch and elements of (p − t)². y is [1].
type mse[T Num] struct{}

func mseKernel[T Num](*opArgs) *mse[T] { return &mse[T]{} }

func (mse[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	var s float64
	for i, p := range x[0].Data {
		d := float64(p - x[1].Data[i])
		s += d * d
	}
	y := NewValue[T](1)
	y.Data[0] = T(s / float64(len(x[0].Data)))
	return y, nil, nil
}

func (mse[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	g := 2 * gy.Data[0] / T(len(x[0].Data))
	for i, p := range x[0].Data {
		d := g * (p - x[1].Data[i])
		if gx[0] != nil {
			gx[0].Data[i] += d
		}
		if gx[1] != nil {
			gx[1].Data[i] -= d
		}
	}
}

// bce: binary cross-entropy on logits, mean over batch and elements:
// max(z,0) − z·t + log(1 + e^−|z|). y is [1].
type bce[T Num] struct{}

func bceKernel[T Num](*opArgs) *bce[T] { return &bce[T]{} }

func (bce[T]) forward(x, _ []*Value[T]) (*Value[T], any, error) {
	var s float64
	for i, z := range x[0].Data {
		zf, t := float64(z), float64(x[1].Data[i])
		s += math.Max(zf, 0) - zf*t + math.Log1p(math.Exp(-math.Abs(zf)))
	}
	y := NewValue[T](1)
	y.Data[0] = T(s / float64(len(x[0].Data)))
	return y, nil, nil
}

func (bce[T]) backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	g := gy.Data[0] / T(len(x[0].Data))
	for i, z := range x[0].Data {
		if gx[0] != nil {
			gx[0].Data[i] += g * (T(1/(1+math.Exp(-float64(z)))) - x[1].Data[i])
		}
		if gx[1] != nil {
			gx[1].Data[i] -= g * z
		}
	}
}

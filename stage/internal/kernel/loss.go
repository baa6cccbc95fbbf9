package kernel

import (
	"math"
)

// labelClass is softmax_cross_entropy's label: the teacher's best class.
func labelClass(z []float64, tgt *Value[float32], s int) {
	best := 0
	for o := range z {
		if z[o] > z[best] {
			best = o
		}
	}
	tgt.Ints[s] = int32(best)
}

// labelValues is mse's: the teacher's outputs.
func labelValues(z []float64, tgt *Value[float32], s int) {
	for o, v := range z {
		tgt.Data[s*len(z)+o] = float32(v)
	}
}

// labelBits is bce_with_logits': 1 where the teacher's output is positive.
func labelBits(z []float64, tgt *Value[float32], s int) {
	for o, v := range z {
		tgt.Data[s*len(z)+o] = 0
		if v > 0 {
			tgt.Data[s*len(z)+o] = 1
		}
	}
}

// crossEntropy: logits [n, c], labels [n] → the mean over n of
// logsumexp(logits) − logits[label]. y is [1].
type crossEntropy[T Num] struct{ op string }

func crossEntropyKernel[T Num](o *opArgs) *crossEntropy[T] { return &crossEntropy[T]{op: o.op.Name} }

func (k *crossEntropy[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
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

func (k *crossEntropy[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], st any, gx, _ []*Value[T]) {
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

func (mse[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	var s float64
	for i, p := range x[0].Data {
		d := float64(p - x[1].Data[i])
		s += d * d
	}
	y := NewValue[T](1)
	y.Data[0] = T(s / float64(len(x[0].Data)))
	return y, nil, nil
}

func (mse[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
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

func (bce[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	var s float64
	for i, z := range x[0].Data {
		zf, t := float64(z), float64(x[1].Data[i])
		s += math.Max(zf, 0) - zf*t + math.Log1p(math.Exp(-math.Abs(zf)))
	}
	y := NewValue[T](1)
	y.Data[0] = T(s / float64(len(x[0].Data)))
	return y, nil, nil
}

func (bce[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
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

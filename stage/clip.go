package stage

import (
	"math"
	"sort"
)

// Clipping by the global norm is torch.nn.utils.clip_grad_norm_ over the
// whole model: total = √(Σ‖g‖²) over every parameter's gradient,
// coef = max / (total + 1e-6), and every gradient is multiplied by coef
// when coef < 1. A pipeline's stages each hold some of the parameters: each
// computes its parameters' squared norms (SquaredNorms), the stages pool
// them, and GlobalNorm sums them in the order of the parameters' names, so
// that the total is the same number in every plan and in one process.

// normBlock is the elements one partial sum of a squared norm covers: a
// fixed cut, so the sum does not depend on the cores.
const normBlock = 1 << 14

// SquaredNorms is ‖g‖² of each gradient, by parameter name, summed in
// float64 in a fixed order.
func SquaredNorms(grads map[string]*Value[float32]) map[string]float64 {
	out := make(map[string]float64, len(grads))
	for name, g := range grads {
		out[name] = sumSquares(g.Data)
	}
	return out
}

// sumSquares is Σx² in float64: blocks of normBlock elements summed in
// parallel, their sums added in block order. A block belongs to the span
// its first element falls in.
func sumSquares(x []float32) float64 {
	parts := make([]float64, (len(x)+normBlock-1)/normBlock)
	eachSpan(len(x), func(lo, hi int) {
		for b := (lo + normBlock - 1) / normBlock; b*normBlock < hi; b++ {
			s := 0.0
			for _, v := range x[b*normBlock : min(len(x), (b+1)*normBlock)] {
				s += float64(v) * float64(v)
			}
			parts[b] = s
		}
	})
	total := 0.0
	for _, p := range parts {
		total += p
	}
	return total
}

// GlobalNorm is √ of the squared norms' sum, taken in name order.
func GlobalNorm(squares map[string]float64) float64 {
	names := make([]string, 0, len(squares))
	for n := range squares {
		names = append(names, n)
	}
	sort.Strings(names)
	total := 0.0
	for _, n := range names {
		total += squares[n]
	}
	return math.Sqrt(total)
}

// ClipCoef is clip_grad_norm_'s coefficient for a global norm, in float32
// as PyTorch computes it (max · (1 / (norm + 1e-6))), clamped to at most 1.
// A NaN norm gives NaN, as in PyTorch.
func ClipCoef(maxNorm, norm float64) float32 {
	c := float32(maxNorm) * (1 / (float32(norm) + 1e-6))
	if c >= 1 {
		return 1
	}
	return c
}

// ScaleGrads multiplies every gradient by c (nothing when c is 1).
func ScaleGrads(grads map[string]*Value[float32], c float32) {
	if c == 1 {
		return
	}
	for _, g := range grads {
		d := g.Data
		eachSpan(len(d), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				d[i] *= c
			}
		})
	}
}

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
// float64 in a fixed order: one pass over every gradient (eachPiece), each
// block of normBlock elements summed in order, a gradient's blocks added in
// block order.
func SquaredNorms(grads map[string]*Value[float32]) map[string]float64 {
	names := sortedKeys(grads)
	sizes, parts := make([]int, len(names)), make([][]float64, len(names))
	for k, name := range names {
		sizes[k] = len(grads[name].Data)
		parts[k] = make([]float64, (sizes[k]+normBlock-1)/normBlock)
	}
	eachPiece(sizes, func(k, lo, hi int) {
		s := 0.0
		for _, v := range grads[names[k]].Data[lo:hi] {
			s += float64(v) * float64(v)
		}
		parts[k][lo/normBlock] = s
	})
	out := make(map[string]float64, len(grads))
	for k, name := range names {
		total := 0.0
		for _, p := range parts[k] {
			total += p
		}
		out[name] = total
	}
	return out
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

// ScaleGrads multiplies every gradient by c (nothing when c is 1), in one
// pass over them all.
func ScaleGrads(grads map[string]*Value[float32], c float32) {
	if c == 1 {
		return
	}
	all := gradData(grads)
	eachPiece(sizesOf(all), func(k, lo, hi int) {
		d := all[k][lo:hi]
		for i := range d {
			d[i] *= c
		}
	})
}

// gradData is every gradient's data, in name order.
func gradData(grads map[string]*Value[float32]) [][]float32 {
	names := sortedKeys(grads)
	out := make([][]float32, len(names))
	for k, name := range names {
		out[k] = grads[name].Data
	}
	return out
}

func sizesOf(x [][]float32) []int {
	out := make([]int, len(x))
	for k, d := range x {
		out[k] = len(d)
	}
	return out
}

package kernel

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/graphpipe/graphpipe/dag"
)

// RNG is a generator seeded by a seed and names, so that a value depends on
// what it is, never on where it is computed.
func RNG(seed int64, names ...string) *rand.Rand {
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

// InitParams initialises op i's parameters and buffers as PyTorch's modules
// do by default, each from (seed, op name, slot), keyed by slot; its kind's
// row (table.go) says how, zeros where it says nothing:
//
//	linear          weight, bias ~ U(−1/√in, 1/√in)
//	conv2d          weight, bias ~ U(−1/√fan_in, 1/√fan_in), fan_in = c/groups·kh·kw
//	layer_norm      weight = 1, bias = 0
//	batch_norm      weight = 1, bias = 0; running_mean = 0, running_var = 1
//	embedding(_bag) weight ~ N(0, 1)
//	attention       in_proj_weight ~ U(±√(6/(d+3d))) (Xavier), in_proj_bias = 0,
//	                out_proj.weight ~ U(±1/√d), out_proj.bias = 0
//	parameter       value = 0
func InitParams(g *dag.Graph, i int, seed int64) map[string]*Value[float32] {
	o := newOpArgs(g, i, nil)
	init := kernels[o.op.Kind].init
	out := map[string]*Value[float32]{}
	for _, p := range append(append([]dag.Param(nil), g.Params(i)...), g.Buffers(i)...) {
		v := NewValue[float32](IntShape(p.Shape)...)
		r := RNG(seed, o.op.Name, p.Name)
		if init != nil {
			init(o, p, r, v.Data)
		}
		out[p.Name] = v
	}
	return out
}

// uniform fills v from U(−bound, bound).
func uniform(v []float32, r *rand.Rand, bound float64) {
	for j := range v {
		v[j] = float32((2*r.Float64() - 1) * bound)
	}
}

// initLinear: every parameter ~ U(±1/√in).
func initLinear(o *opArgs, _ dag.Param, r *rand.Rand, v []float32) {
	x := o.in[0].Shape
	uniform(v, r, 1/math.Sqrt(float64(x[len(x)-1])))
}

// initConv2D: every parameter ~ U(±1/√fan_in), fan_in = c/groups·kh·kw.
func initConv2D(o *opArgs, _ dag.Param, r *rand.Rand, v []float32) {
	w := o.g.Params(o.i)[0].Shape
	uniform(v, r, 1/math.Sqrt(float64(w[1]*w[2]*w[3])))
}

// initOnes sets the named slots to 1, leaving the others 0.
func initOnes(slots ...string) func(o *opArgs, p dag.Param, r *rand.Rand, v []float32) {
	return func(_ *opArgs, p dag.Param, _ *rand.Rand, v []float32) {
		if !slices.Contains(slots, p.Name) {
			return
		}
		for j := range v {
			v[j] = 1
		}
	}
}

// initNormal: every parameter ~ N(0, 1).
func initNormal(_ *opArgs, _ dag.Param, r *rand.Rand, v []float32) {
	for j := range v {
		v[j] = float32(r.NormFloat64())
	}
}

// initAttention: the projections' weights as torch.nn.MultiheadAttention
// makes them (in_proj Xavier-uniform), the biases 0.
func initAttention(_ *opArgs, p dag.Param, r *rand.Rand, v []float32) {
	switch p.Name {
	case "in_proj_weight": // [3d, d]
		d := float64(p.Shape[1])
		uniform(v, r, math.Sqrt(6/(d+3*d)))
	case "out_proj.weight": // [d, d]
		uniform(v, r, 1/math.Sqrt(float64(p.Shape[1])))
	}
}

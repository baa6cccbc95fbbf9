package stage

import (
	"hash/fnv"
	"math"
	"math/rand/v2"

	"github.com/graphpipe/graphpipe/dag"
)

// rng is a generator seeded by a seed and names, so that a value depends on
// what it is, never on where it is computed.
func rng(seed int64, names ...string) *rand.Rand {
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

// InitParams initialises op i's parameters and buffers as PyTorch's modules
// do by default, each from (seed, op name, slot), keyed by slot:
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
	op := g.Op(i)
	out := map[string]*Value[float32]{}
	for _, p := range append(append([]dag.Param(nil), g.Params(i)...), g.Buffers(i)...) {
		v := NewValue[float32](toIntsShape(p.Shape)...)
		r := rng(seed, op.Name, p.Name)
		uniform := func(bound float64) {
			for j := range v.Data {
				v.Data[j] = float32((2*r.Float64() - 1) * bound)
			}
		}
		switch {
		case op.Kind == dag.Linear:
			uniform(1 / math.Sqrt(float64(g.OpInputs(i)[0].Shape[len(g.OpInputs(i)[0].Shape)-1])))
		case op.Kind == dag.Conv2D:
			w := g.Params(i)[0].Shape
			uniform(1 / math.Sqrt(float64(w[1]*w[2]*w[3])))
		case (op.Kind == dag.LayerNorm || op.Kind == dag.BatchNorm) && p.Name == "weight",
			op.Kind == dag.BatchNorm && p.Name == "running_var":
			for j := range v.Data {
				v.Data[j] = 1
			}
		case op.Kind == dag.Embedding || op.Kind == dag.EmbeddingBag:
			for j := range v.Data {
				v.Data[j] = float32(r.NormFloat64())
			}
		case op.Kind == dag.Attention && p.Name == "in_proj_weight":
			d := float64(p.Shape[1])
			uniform(math.Sqrt(6 / (d + 3*d)))
		case op.Kind == dag.Attention && p.Name == "out_proj.weight":
			uniform(1 / math.Sqrt(float64(p.Shape[1])))
		}
		out[p.Name] = v
	}
	return out
}

func toIntsShape(s dag.Shape) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}

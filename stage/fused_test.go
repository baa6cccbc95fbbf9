package stage

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"testing"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// refStep is the simple thing the fused step is held to: the step's passes
// one after another, each parameter on one core, in the arithmetic of
// torch.optim's single-tensor loops as optim.go documents it: the gradients
// scaled (clip), the update, the gradients cleared.
func refStep(name string, o TrainOptions, t int, st map[string][]float32, params, grads map[string]*Value[float32], lr float64, scale float32) {
	for _, g := range grads {
		if scale != 1 {
			for i := range g.Data {
				g.Data[i] *= scale
			}
		}
	}
	for _, n := range sortedKeys(params) {
		p, g := params[n].Data, grads[n].Data
		wd := decay(o.WeightDecay, o.NoDecayBiasNorm, params[n])
		switch name {
		case "sgd":
			rate, w, mu := float32(lr), float32(wd), float32(o.Momentum)
			b, first := st[n], st[n] == nil
			if first {
				b = make([]float32, len(p))
				st[n] = b
			}
			for i := range p {
				d := g[i]
				if w != 0 {
					d += w * p[i]
				}
				if mu != 0 {
					if first {
						b[i] = d
					} else {
						b[i] = mu*b[i] + d
					}
					if o.Nesterov {
						d += mu * b[i]
					} else {
						d = b[i]
					}
				}
				p[i] -= rate * d
			}
		default: // adam, adamw
			const beta1, beta2, eps = float32(0.9), float32(0.999), float32(1e-8)
			if st[n+".m"] == nil {
				st[n+".m"], st[n+".v"] = make([]float32, len(p)), make([]float32, len(p))
			}
			m, v := st[n+".m"], st[n+".v"]
			step := float32(lr / (1 - math.Pow(float64(beta1), float64(t))))
			sqrtBC2 := float32(math.Sqrt(1 - math.Pow(float64(beta2), float64(t))))
			for i := range p {
				gi := g[i]
				if name == "adam" && wd != 0 {
					gi += float32(wd) * p[i]
				}
				if name == "adamw" && wd != 0 {
					p[i] *= float32(1 - lr*wd)
				}
				m[i] = beta1*m[i] + (1-beta1)*gi
				v[i] = beta2*v[i] + (1-beta2)*gi*gi
				p[i] -= step * m[i] / (float32(math.Sqrt(float64(v[i])))/sqrtBC2 + eps)
			}
		}
	}
	for _, g := range grads {
		clear(g.Data)
	}
}

// TestFusedStepMatchesPasses: the CPU backend's one pass (fusedOptimizer's
// step with the clip's scale and the clear) leaves the parameters, the
// optimizer's state and the gradients bit for bit where the passes one
// after another leave them, for every optimizer, on many parameters large
// and small, on one core and on all of them.
func TestFusedStepMatchesPasses(t *testing.T) {
	cases := []struct {
		name string
		o    TrainOptions
	}{
		{"sgd", TrainOptions{Optimizer: "sgd", WeightDecay: 0.01}},
		{"sgd", TrainOptions{Optimizer: "sgd", Momentum: 0.9, WeightDecay: 0.001}},
		{"sgd", TrainOptions{Optimizer: "sgd", Momentum: 0.9, Nesterov: true, NoDecayBiasNorm: true, WeightDecay: 0.01}},
		{"adam", TrainOptions{Optimizer: "adam"}},
		{"adam", TrainOptions{Optimizer: "adam", WeightDecay: 0.01}},
		{"adamw", TrainOptions{Optimizer: "adamw", WeightDecay: 0.1, NoDecayBiasNorm: true}},
	}
	shapes := map[string][]int{"a.w": {300, 700}, "a.b": {700}, "b.w": {3, 5}, "c.w": {1 << 10, 300}, "c.b": {1}}
	for _, cores := range []int{1, 2} {
		for ci, c := range cases {
			t.Run(fmt.Sprintf("%s-%d/cores=%d", c.name, ci, cores), func(t *testing.T) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cores))
				r := rand.New(rand.NewSource(int64(ci)))
				params, want := map[string]*Value[float32]{}, map[string]*Value[float32]{}
				for n, s := range shapes {
					params[n] = NewValue[float32](s...)
					for i := range params[n].Data {
						params[n].Data[i] = float32(r.NormFloat64())
					}
					want[n] = params[n].Clone()
				}
				c.o.LR = 0.01
				opt, err := NewOptimizer(c.o)
				if err != nil {
					t.Fatal(err)
				}
				st := map[string][]float32{}
				for step := 1; step <= 4; step++ {
					grads, ref := map[string]*Value[float32]{}, map[string]*Value[float32]{}
					for n, s := range shapes {
						grads[n] = NewValue[float32](s...)
						for i := range grads[n].Data {
							grads[n].Data[i] = float32(r.NormFloat64())
						}
						ref[n] = grads[n].Clone()
					}
					scale := []float32{1, 0.37}[step%2]
					lr := 0.01 * float64(step)
					opt.(fusedOptimizer).step(params, grads, lr, scale, true)
					refStep(c.name, c.o, step, st, want, ref, lr, scale)
					for n := range shapes {
						for i, v := range params[n].Data {
							if math.Float32bits(v) != math.Float32bits(want[n].Data[i]) {
								t.Fatalf("step %d: %s[%d] = %v, the passes give %v", step, n, i, v, want[n].Data[i])
							}
							if grads[n].Data[i] != 0 {
								t.Fatalf("step %d: the gradient %s[%d] = %v after the step", step, n, i, grads[n].Data[i])
							}
						}
					}
				}
			})
		}
	}
}

// TestEachPieceCoversOnce: every element of every range is given to f
// exactly once, the empty ranges included, on one core and on several.
func TestEachPieceCoversOnce(t *testing.T) {
	sizes := []int{0, 1, pieceSize - 1, pieceSize, pieceSize + 1, 5 * kernel.MinSpan, 3}
	for _, cores := range []int{1, 2, 4} {
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cores))
			seen := make([][]int32, len(sizes))
			for k, n := range sizes {
				seen[k] = make([]int32, n)
			}
			eachPiece(sizes, func(k, lo, hi int) {
				if hi-lo > pieceSize || lo >= hi {
					t.Errorf("range %d: piece [%d,%d)", k, lo, hi)
				}
				for i := lo; i < hi; i++ {
					seen[k][i]++ // pieces are disjoint: no two goroutines touch one element
				}
			})
			for k := range seen {
				for i, c := range seen[k] {
					if c != 1 {
						t.Fatalf("cores %d: range %d element %d seen %d times", cores, k, i, c)
					}
				}
			}
		}()
	}
}

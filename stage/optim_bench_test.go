package stage

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkOptimizerStep times an optimizer step over one 8 Mi-element
// parameter, on every core and on one (the loop before eachSpan): the host
// runs the step for GPU stages too, and a large model's step is seconds on
// one core.
func BenchmarkOptimizerStep(b *testing.B) {
	const n = 8 << 20
	for _, name := range []string{"adam", "adamw", "sgd"} {
		for _, cores := range []int{runtime.GOMAXPROCS(0), 1} {
			b.Run(fmt.Sprintf("%s/cores=%d", name, cores), func(b *testing.B) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cores))
				p, g := NewValue[float32](n), NewValue[float32](n)
				for i := range g.Data {
					g.Data[i] = float32(i%13) / 13
				}
				params, grads := map[string]*Value[float32]{"w": p}, map[string]*Value[float32]{"w": g}
				o := TrainOptions{Optimizer: name, LR: 1e-3, WeightDecay: 1e-2}
				if name == "sgd" {
					o.Momentum = 0.9
				}
				opt, err := NewOptimizer(o)
				if err != nil {
					b.Fatal(err)
				}
				opt.Step(params, grads, 1e-3) // the state's first touch
				b.SetBytes(4 * n)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					opt.Step(params, grads, 1e-3)
				}
			})
		}
	}
}

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

// BenchmarkFiniteCheck times the check every step makes of its gradients
// (Finite over one 8 Mi-element gradient) beside the optimizer step it
// precedes, on the same parameter, in the same run: what the check adds to
// a step is the ratio of the two.
func BenchmarkFiniteCheck(b *testing.B) {
	const n = 8 << 20
	g := NewValue[float32](n)
	for i := range g.Data {
		g.Data[i] = float32(i%13) / 13
	}
	for _, cores := range []int{runtime.GOMAXPROCS(0), 1} {
		b.Run(fmt.Sprintf("finite/cores=%d", cores), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cores))
			b.SetBytes(4 * n)
			for i := 0; i < b.N; i++ {
				if !Finite(g.Data) {
					b.Fatal("not finite")
				}
			}
		})
		b.Run(fmt.Sprintf("sgd-step/cores=%d", cores), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cores))
			p := NewValue[float32](n)
			params, grads := map[string]*Value[float32]{"w": p}, map[string]*Value[float32]{"w": g}
			opt, _ := NewOptimizer(TrainOptions{Optimizer: "sgd", LR: 1e-3})
			b.SetBytes(4 * n)
			for i := 0; i < b.N; i++ {
				opt.Step(params, grads, 1e-3)
			}
		})
	}
}

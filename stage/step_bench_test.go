package stage

import (
	"testing"

	"github.com/graphpipe/graphpipe/models"
)

// BenchmarkTrainStep times graphpipe train's step on the zoo's small presets
// (AdamW with decoupled decay, a cosine schedule and clipping by the global
// norm, 4 micro-batches): forward, backward, accumulation, the finite check,
// the norm, the clip and the optimizer update, in one process on the CPU.
func BenchmarkTrainStep(b *testing.B) {
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		b.Run(name, func(b *testing.B) {
			e, err := models.Lookup(name)
			if err != nil {
				b.Fatal(err)
			}
			g, err := e.Build(e.Small)
			if err != nil {
				b.Fatal(err)
			}
			o := TrainOptions{Optimizer: "adamw", LR: 1e-3, WeightDecay: 1e-2, Schedule: "cosine", WarmupSteps: 2,
				Steps: 1 << 30, ClipGradNorm: 0.1, MicroBatch: int(g.BatchSize()) / 4}
			tr, err := NewTrainer(g, o)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := tr.Step(0); err != nil { // the optimizer state's first touch
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := tr.Step(i + 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package runtime

import (
	"context"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// BenchmarkLocalRun times iterations of a 3-stage CPU pipeline of the small
// MMT (AdamW, clipping by the global norm, so every stage pools its norms)
// run by goroutines over the in-memory transport: the workers' actions and
// their optimizer steps, without a network.
func BenchmarkLocalRun(b *testing.B) {
	e, err := models.Lookup("mmt")
	if err != nil {
		b.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		b.Fatal(err)
	}
	p, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: 3, MicroBatch: 4})
	if err != nil {
		b.Fatal(err)
	}
	o := Options{Train: stage.TrainOptions{Optimizer: "adamw", LR: 1e-3, WeightDecay: 1e-2, ClipGradNorm: 0.1}}
	const steps = 8
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		job := &Job{Run: "bench", Graph: g, Plan: p, Steps: steps, Options: o}
		if _, err := RunLocal(context.Background(), job, wire.NewMemory(1, wire.Faults{}, 1<<20)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N*steps), "s/iter")
}

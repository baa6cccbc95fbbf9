package runtime

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// TestClippedPipelineEqualsSingleProcess: with clipping by the global norm
// active, a schedule with warm-up and weight decay, a 3-stage pipeline and
// a plan with data-parallel stages end with the single process's
// parameters (within 1e-5), and every worker clipped by the norm the single
// process computed: the stages pooled their squared norms, each parameter
// counted once however many replicas hold it.
func TestClippedPipelineEqualsSingleProcess(t *testing.T) {
	for _, c := range []struct {
		model   string
		devices int
		train   stage.TrainOptions
		wide    bool // the plan must have a data-parallel stage
	}{
		{"mmt", 3, stage.TrainOptions{Optimizer: "adamw", LR: 2e-3, WeightDecay: 0.1, NoDecayBiasNorm: true, Schedule: "cosine", WarmupSteps: 1, ClipGradNorm: 0.05}, false},
		{"mlp", 6, stage.TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3, Schedule: "linear", WarmupSteps: 1, ClipGradNorm: 0.05}, true},
	} {
		t.Run(c.model, func(t *testing.T) {
			const steps = 4
			c.train.Steps = steps
			g, _ := smallPlan(t, c.model, c.devices, 8)
			plan, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: c.devices, MicroBatch: 8})
			if err != nil {
				t.Fatal(err)
			}
			lay := layout(plan)
			if len(plan.Stages) < 3 && !c.wide || c.wide && lay.total == len(plan.Stages) {
				t.Fatalf("plan of %d stages on %d devices: not the plan the test needs", len(plan.Stages), lay.total)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := RunLocal(ctx, &Job{Run: "clip", Graph: g, Plan: plan, Steps: steps, Options: Options{Train: c.train}}, wire.NewMemory(1, wire.Faults{}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			o := c.train
			o.MicroBatch = int(plan.MicroBatch)
			tr, err := stage.NewTrainer(g, o)
			if err != nil {
				t.Fatal(err)
			}
			clipped := 0
			for s := 0; s < steps; s++ {
				if _, _, err := tr.Step(s); err != nil {
					t.Fatal(err)
				}
				if got, want := res.GradNorms[s], tr.GradNorm(); math.Abs(got-want) > 1e-5*want {
					t.Errorf("step %d: the workers' global norm %.9g, one process's %.9g", s, got, want)
				}
				if tr.GradNorm() > c.train.ClipGradNorm {
					clipped++
				}
			}
			if clipped < steps-1 {
				t.Fatalf("clipping acted on %d of %d steps: the test does not exercise it", clipped, steps)
			}
			equalParams(t, res.Params, tr.Ex.Params, 1e-5)
			t.Logf("%d stages on %d workers; norms %.4g", len(plan.Stages), lay.total, res.GradNorms)
		})
	}
}

package runtime

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
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

// normTap records, of every frame published, the norm exchange's: which
// worker sent it to which.
type normTap struct {
	wire.Transport
	mu    sync.Mutex
	sends [][2]int32 // from, to
}

func (n *normTap) Publish(subject string, data []byte) error {
	var to int32
	if f, err := wire.DecodeFrame(data); err == nil && f.Edge == normEdge && f.Kind == wire.KindData {
		if _, err := fmt.Sscanf(subject[strings.LastIndex(subject, ".s")+2:], "%d", &to); err == nil {
			n.mu.Lock()
			n.sends = append(n.sends, [2]int32{f.From, to})
			n.mu.Unlock()
		}
	}
	return n.Transport.Publish(subject, data)
}

// TestNormsGoToOtherStagesOnly: a stage's replica 0 sends its squared
// norms to the workers of the other stages, never to its own stage's
// replicas, which hold the same norms and never read them: sent to them,
// the message could arrive after they left and hold the sender's last
// drain for ever (a run hung at its end, 4 runs in 10, before).
func TestNormsGoToOtherStagesOnly(t *testing.T) {
	g, _ := smallPlan(t, "mlp", 6, 8)
	pl, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: 6, MicroBatch: 8, OptimizerState: "replicated"})
	if err != nil {
		t.Fatal(err)
	}
	lay := layout(pl)
	if lay.total == len(pl.Stages) {
		t.Fatalf("plan of %d stages on %d workers: the test needs a stage with replicas", len(pl.Stages), lay.total)
	}
	tap := &normTap{Transport: wire.NewMemory(1, wire.Faults{}, 1<<20)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := stage.TrainOptions{Optimizer: "adam", LR: 1e-3, ClipGradNorm: 0.05, Steps: 3}
	if _, err := RunLocal(ctx, &Job{Run: "norms", Graph: g, Plan: pl, Steps: 3, Options: Options{Train: o}}, tap); err != nil {
		t.Fatal(err)
	}
	if len(tap.sends) == 0 {
		t.Fatal("no norm was sent: the test does not see the exchange")
	}
	for _, s := range tap.sends {
		from, _ := lay.where(int(s[0]))
		to, _ := lay.where(int(s[1]))
		if from == to {
			t.Errorf("worker %d (stage %d) sent its norms to worker %d of its own stage", s[0], from, s[1])
		}
	}
}

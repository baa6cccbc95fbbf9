package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// reference trains g in one process with the plan's micro-batch size.
func reference(t *testing.T, g *dag.Graph, mb int64, steps int, o stage.TrainOptions) (map[string]*stage.Value[float32], []float64) {
	o.MicroBatch = int(mb)
	tr, err := stage.NewTrainer(g, o)
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for s := 0; s < steps; s++ {
		l, _, err := tr.Step(s)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	return tr.Ex.Params, losses
}

func equalParams(t *testing.T, got, want map[string]*stage.Value[float32], tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d parameters, want %d", len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		scale, worst := 0.0, 0.0
		for i := range w.Data {
			scale = math.Max(scale, math.Abs(float64(w.Data[i])))
			worst = math.Max(worst, math.Abs(float64(g.Data[i]-w.Data[i])))
		}
		if worst > tol*math.Max(scale, 1e-12) {
			t.Fatalf("%s differs from the single-process run by %.3g (scale %.3g)", name, worst, scale)
		}
	}
}

// TestPipelineEqualsSingleProcess: 3-4 stages, gpp and spp plans, 1F1B and
// GPipe, 5 steps: the same parameters as graphpipe train.
func TestPipelineEqualsSingleProcess(t *testing.T) {
	type model struct {
		name string
		g    *dag.Graph
	}
	var cases []model
	for _, n := range []string{"mmt", "dlrm", "candle-uno", "case-study", "transformer"} {
		e, _ := models.Lookup(n)
		g, err := e.Build(e.Small)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, model{n, g})
	}
	for _, shape := range [][2]int{{3, 3}, {2, 5}} {
		g, err := models.Branchy(shape[0], shape[1], 8)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, model{g.Name(), g})
	}
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}
	deferred := 0 // zb plans that run some W after a later compute action
	defer func() {
		t.Logf("%d zb plans defer a weight gradient", deferred)
		if deferred == 0 {
			t.Error("no zb plan deferred a weight gradient past another pass: the test does not exercise deferral")
		}
	}()
	for _, c := range cases {
		for _, strategy := range []string{"gpp", "spp"} {
			for _, sched := range []string{"1f1b", "zb", "gpipe"} {
				t.Run(fmt.Sprintf("%s/%s/%s", c.name, strategy, sched), func(t *testing.T) {
					devices := 4
					if c.name == "transformer" {
						devices = 3
					}
					plan, err := search.Search(c.g, search.Options{Device: plan.Profiles["cpu"], Devices: devices, Strategy: strategy, Schedule: sched, MicroBatch: 4})
					if err != nil {
						t.Skipf("no plan: %v", err)
					}
					if defersWeights(t, plan) {
						deferred++
					}
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					res, err := RunLocal(ctx, &Job{Run: "eq", Graph: c.g, Plan: plan, Steps: 5, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
					if err != nil {
						t.Fatal(err)
					}
					want, losses := reference(t, c.g, plan.MicroBatch, 5, o.Train)
					equalParams(t, res.Params, want, 1e-5)
					for i := range losses {
						if math.Abs(res.Losses[i]-losses[i]) > 1e-5*math.Abs(losses[i]) {
							t.Fatalf("loss %d: %v, single process %v", i, res.Losses[i], losses[i])
						}
					}
				})
			}
		}
	}
}

// defersWeights says whether some stage of plan runs a W after another F or
// B that followed its micro-batch's B.
func defersWeights(t *testing.T, plan *plan.Plan) bool {
	sch, err := plan.ScheduleOf()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range sch.Lists {
		open := map[int]bool{} // micro-batches past B, before W
		for _, a := range l {
			switch a.Kind {
			case microbatch.Weight:
				delete(open, a.MB)
			case microbatch.Forward, microbatch.Backward:
				if len(open) > 0 {
					return true
				}
				if a.Kind == microbatch.Backward && sch.Split {
					open[a.MB] = true
				}
			}
		}
	}
	return false
}

// TestFaultyTransport: 5% drops, duplicates and reordering, delays and tiny
// chunks give bit-identical parameters to a clean run.
func TestFaultyTransport(t *testing.T) {
	g, plan := smallPlan(t, "mmt", 4, 4)
	o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9}}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	clean, err := RunLocal(ctx, &Job{Run: "clean", Graph: g, Plan: plan, Steps: 3, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	faulty := wire.NewMemory(7, wire.Faults{Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Delay: 2 * time.Millisecond}, 700)
	bad, err := RunLocal(ctx, &Job{Run: "faulty", Graph: g, Plan: plan, Steps: 3, Options: o}, faulty)
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, bad.Params, clean.Params, 0)
	var resent, dups int64
	for _, s := range bad.Stats {
		resent += s.Resent
		dups += s.Duplicates
	}
	if resent == 0 || dups == 0 {
		t.Errorf("the faults never bit: %d resent, %d duplicates dropped", resent, dups)
	}
	t.Logf("faulty run: %d frames resent, %d duplicates dropped", resent, dups)
}

// TestPlanForAnotherModel: a plan made for another model is refused by
// one check (plan.CheckModelHash) wherever it meets the model: loading it,
// validating the job, coordinating and running it, each a
// *plan.ModelMismatchError that names what refused it and both hashes.
func TestPlanForAnotherModel(t *testing.T) {
	e, _ := models.Lookup("mlp")
	g, _ := e.Build(e.Small)
	p, _ := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: 2})
	other, _ := models.Lookup("candle-uno")
	h, _ := other.Build(other.Small)
	job := &Job{Run: "x", Graph: h, Plan: p, Steps: 1, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.1}}}
	ctx := context.Background()
	for _, tc := range []struct {
		op  string
		run func() error
	}{
		{"plan", func() error { _, err := plan.LoadPlan(p.Encode(), h); return err }},
		{"job", job.Validate},
		{"coordinate", func() error { _, err := Coordinate(ctx, job, wire.NewMemory(1, wire.Faults{}, 1<<20), nil); return err }},
		{"run local", func() error { _, err := RunLocal(ctx, job, wire.NewMemory(1, wire.Faults{}, 1<<20)); return err }},
	} {
		err := tc.run()
		var mm *plan.ModelMismatchError
		if !errors.As(err, &mm) || mm.Op != tc.op || mm.PlanHash != p.Model.SHA256 || mm.ModelHash != dag.ModelHash(h) {
			t.Errorf("%s: got %v (%#v), want a ModelMismatchError of op %q, hashes %.12s and %.12s", tc.op, err, mm, tc.op, p.Model.SHA256, dag.ModelHash(h))
			continue
		}
		for _, hash := range []string{p.Model.SHA256, dag.ModelHash(h)} {
			if !strings.Contains(err.Error(), hash[:12]) {
				t.Errorf("%s: %q does not name hash %.12s", tc.op, err, hash)
			}
		}
	}
}

// TestDataParallelStages: plans whose stages run on several devices train as
// replicas that split each micro-batch's rows and sum their gradients in
// replica order; the parameters equal the single process's.
func TestDataParallelStages(t *testing.T) {
	replicated := 0
	for _, name := range []string{"mlp", "candle-uno", "case-study", "dlrm"} {
		e, _ := models.Lookup(name)
		g, _ := e.Build(e.Small)
		plan, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: 6, MicroBatch: 8})
		if err != nil {
			t.Fatal(err)
		}
		wide := 0
		for _, s := range plan.Stages {
			if len(s.Devices) > 1 {
				wide++
			}
		}
		if wide == 0 {
			continue
		}
		replicated++
		t.Run(name, func(t *testing.T) {
			o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}
			if name == "case-study" {
				// attention's key bias has no gradient (softmax ignores a
				// constant added to a row of scores): what it gets is
				// rounding, which Adam scales up to steps of lr, so another
				// order of summation (a replica's half-batch) moves it by
				// ~1e-7; SGD keeps rounding at rounding's size
				o.Train = stage.TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := RunLocal(ctx, &Job{Run: "dp", Graph: g, Plan: plan, Steps: 4, Options: o}, wire.NewMemory(3, wire.Faults{Drop: 0.03, Duplicate: 0.03, Reorder: 0.03}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			want, losses := reference(t, g, plan.MicroBatch, 4, o.Train)
			equalParams(t, res.Params, want, 1e-5)
			if math.Abs(res.Losses[3]-losses[3]) > 1e-5*math.Abs(losses[3]) {
				t.Errorf("loss %v, single process %v", res.Losses[3], losses[3])
			}
			t.Logf("%d stages, %d on several devices, %d workers", len(plan.Stages), wide, layout(plan).total)
		})
	}
	if replicated == 0 {
		t.Fatal("no plan had a data-parallel stage: the test exercised nothing")
	}
}

// smallPlan builds the small preset of a zoo model and plans it on cpu
// devices with a fixed micro-batch.
func smallPlan(t *testing.T, model string, devices int, micro int64) (*dag.Graph, *plan.Plan) {
	t.Helper()
	e, err := models.Lookup(model)
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: devices, MicroBatch: micro})
	if err != nil {
		t.Fatal(err)
	}
	return g, plan
}

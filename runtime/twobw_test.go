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
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// referenceTwoBW trains g in one process keeping two versions of its
// weights (graphpipe train --schedule 2bw).
func referenceTwoBW(t *testing.T, g *dag.Graph, mb int64, steps int, o stage.TrainOptions) (map[string]*stage.Value[float32], []float64) {
	t.Helper()
	o.MicroBatch = int(mb)
	tr, err := stage.NewTrainer(g, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Ex.SetTwoVersions(); err != nil {
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

// twoBWPlan is a 2bw plan of g on the cpu profile.
func twoBWPlan(t *testing.T, g *dag.Graph, devices int, strategy string) *plan.Plan {
	t.Helper()
	p, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: devices, Strategy: strategy, Schedule: "2bw", MicroBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTwoBWPipelineEqualsSingleProcess: a pipeline without a flush (its
// stages running the next batch's forwards ahead of their updates, the
// coordinator not holding them between iterations) trains what one
// process keeping two versions trains, parameters and losses, with SGD and
// Adam; and not what 1F1B trains.
func TestTwoBWPipelineEqualsSingleProcess(t *testing.T) {
	var cases []*dag.Graph
	for _, n := range []string{"mmt", "dlrm", "case-study"} {
		e, _ := models.Lookup(n)
		g, err := e.Build(e.Small)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, g)
	}
	br, err := models.Branchy(3, 3, 8)
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, br)
	ahead := 0
	for _, g := range cases {
		for _, o := range []stage.TrainOptions{{Optimizer: "sgd", LR: 0.05}, {Optimizer: "adam", LR: 1e-3}} {
			t.Run(fmt.Sprintf("%s/%s", g.Name(), o.Optimizer), func(t *testing.T) {
				p := twoBWPlan(t, g, 4, "gpp")
				sch, err := p.ScheduleOf()
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range sch.Ahead() {
					ahead += n
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				res, err := RunLocal(ctx, &Job{Run: "twobw", Graph: g, Plan: p, Steps: 5, Options: Options{Train: o}}, wire.NewMemory(1, wire.Faults{}, 1<<20))
				if err != nil {
					t.Fatal(err)
				}
				want, losses := referenceTwoBW(t, g, p.MicroBatch, 5, o)
				equalParams(t, res.Params, want, 1e-5)
				for i := range losses {
					if math.Abs(res.Losses[i]-losses[i]) > 1e-5*math.Abs(losses[i]) {
						t.Fatalf("loss %d: %v, single process %v", i, res.Losses[i], losses[i])
					}
				}
				sync, _ := reference(t, g, p.MicroBatch, 5, o)
				if d := worstRel(res.Params, sync); d < 1e-4 {
					t.Errorf("within %.3g of 1F1B's parameters: not told apart", d)
				}
			})
		}
	}
	if ahead == 0 {
		t.Error("no plan ran a forward ahead of an update: the test does not exercise 2bw")
	}
}

// worstRel is the largest max|a−b|/max|b| over b's tensors.
func worstRel(a, b map[string]*stage.Value[float32]) float64 {
	worst := 0.0
	for name, w := range b {
		scale, diff := 1e-12, 0.0
		for i, x := range w.Data {
			scale = math.Max(scale, math.Abs(float64(x)))
			diff = math.Max(diff, math.Abs(float64(a[name].Data[i])-float64(x)))
		}
		worst = math.Max(worst, diff/scale)
	}
	return worst
}

// TestTwoBWStopResumes: a 2bw run stopped between iterations (the
// coordinator having told the next go ahead, so the stop lands one
// iteration later) checkpoints both weight versions, and the run resumed
// from it ends bit for bit where the uninterrupted one does.
func TestTwoBWStopResumes(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	p := twoBWPlan(t, g, 3, "gpp")
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, &Job{Run: "ref", Graph: g, Plan: p, Steps: 6, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	run := func(id string, c Config, progress func(int64, float64)) (*Result, error) {
		return natsRun(t, ctx, srv, Job{Graph: g, Plan: p, Steps: 6, Options: o}, id, c, progress)
	}
	stop := make(chan struct{})
	dir := t.TempDir()
	_, err = run("stopped", Config{CheckpointDir: dir, Stop: stop}, func(n int64, _ float64) {
		if n == 1 {
			close(stop)
		}
	})
	var se *StoppedError
	if !errors.As(err, &se) || se.Step != 3 || !se.Saved {
		t.Fatalf("got %v, want a stop at step 3 (the go of 2 told ahead) with a checkpoint", err)
	}
	ck, err := LoadCheckpoint(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	stale := 0
	for slot := range ck.Optim {
		if strings.HasSuffix(slot, ".stale") {
			stale++
		}
	}
	if stale != len(ck.Params) {
		t.Fatalf("the checkpoint holds %d stale versions of %d parameters", stale, len(ck.Params))
	}
	res, err := run("resumed", Config{Resume: ck}, nil)
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, res.Params, want.Params, 0)
}

// TestTwoBWJobRefused: selective backprop and a model with buffers are
// refused by a 2bw job, the field named.
func TestTwoBWJobRefused(t *testing.T) {
	e, _ := models.Lookup("mlp")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	p := twoBWPlan(t, g, 2, "spp")
	sb := &stage.Selective{Beta: 1, Window: 64}
	var je *JobError
	err = (&Job{Run: "r", Graph: g, Plan: p, Steps: 2, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.1, Selective: sb}}}).Validate()
	if !errors.As(err, &je) || je.Field != "Options.Train.Selective" || !strings.Contains(err.Error(), "2bw") {
		t.Errorf("selective backprop: %v", err)
	}
	bn, err := dag.Load([]byte(dropNet))
	if err != nil {
		t.Fatal(err)
	}
	// the search plans no 2bw for a model with buffers (search's
	// TestNoFlushOnlyWhereItTrains): the plan a person would make by hand,
	// a flushed one relabelled, which reads as a 2bw plan
	bp, err := search.Search(bn, search.Options{Device: plan.Profiles["cpu"], Devices: 2, Strategy: "spp", MicroBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	bp.Schedule = "2bw"
	if bp, err = plan.DecodePlan(bp.Encode()); err != nil {
		t.Fatal(err)
	}
	err = (&Job{Run: "r", Graph: bn, Plan: bp, Steps: 2, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.1}}}).Validate()
	if !errors.As(err, &je) || je.Field != "Plan" || !strings.Contains(err.Error(), "buffers") {
		t.Errorf("buffers: %v", err)
	}
}

// TestTwoBWInterplay: 2bw with a stage's optimizer state sharded across
// its replicas (the stale version whole on each, its pieces in each
// shard's state), and with every stage recomputing its forward (which
// reads the micro-batch's version again), trains what one process does.
func TestTwoBWInterplay(t *testing.T) {
	for _, c := range []struct {
		model string
		o     search.Options
		check func(*plan.Plan) bool
	}{
		{"candle-uno", search.Options{Devices: 6, MicroBatch: 8, OptimizerState: "sharded"}, func(p *plan.Plan) bool {
			for _, st := range p.Stages {
				if st.StateName() == plan.StateSharded {
					return true
				}
			}
			return false
		}},
		{"mmt", search.Options{Devices: 3, MicroBatch: 4, Recompute: "all"}, (*plan.Plan).Recomputes},
		// the all-reduce overlapped with the last weight pass, in buckets
		// small enough to be several, and a sharded stage's all-gather run
		// late, while the next iteration (here: the next batch's forwards
		// run ahead) begins
		{"candle-uno", search.Options{Devices: 6, MicroBatch: 8, OptimizerState: "replicated"}, func(p *plan.Plan) bool {
			return replicated(p, func(st *plan.PlanStage) { st.BucketBytes = 4096 })
		}},
		{"candle-uno", search.Options{Devices: 6, MicroBatch: 8, OptimizerState: "sharded"}, func(p *plan.Plan) bool {
			return replicated(p, func(st *plan.PlanStage) { st.GatherS = 1e-4 })
		}},
	} {
		t.Run(c.model, func(t *testing.T) {
			e, _ := models.Lookup(c.model)
			g, err := e.Build(e.Small)
			if err != nil {
				t.Fatal(err)
			}
			c.o.Device, c.o.Schedule = plan.Profiles["cpu"], "2bw"
			p, err := search.Search(g, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(p) {
				t.Fatalf("the plan does not shard, recompute or replicate: %+v", p.Stages)
			}
			o := stage.TrainOptions{Optimizer: "adam", LR: 1e-3}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := RunLocal(ctx, &Job{Run: "twobw", Graph: g, Plan: p, Steps: 4, Options: Options{Train: o}}, wire.NewMemory(1, wire.Faults{}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := referenceTwoBW(t, g, p.MicroBatch, 4, o)
			equalParams(t, res.Params, want, 1e-5)
		})
	}
}

// replicated applies set to every stage of p with several replicas, and
// says whether there was one.
func replicated(p *plan.Plan, set func(*plan.PlanStage)) bool {
	any := false
	for i := range p.Stages {
		if len(p.Stages[i].Devices) > 1 {
			set(&p.Stages[i])
			any = true
		}
	}
	return any
}

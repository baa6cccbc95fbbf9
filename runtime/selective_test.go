package runtime

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// sbOptions trains with selective backprop at beta 2 over a short window,
// after one step of warm-up.
// (Adam at a rate of 1e-3, as TestDataParallelStages: a larger one makes
// rounding of another summation order, a replica's rows, visible.)
var sbOptions = Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3,
	Selective: &stage.Selective{Beta: 2, Window: 48, WarmupSteps: 1}}}

// sbPlan plans a zoo model's small preset for selective backprop.
func sbPlan(t *testing.T, name string, o search.Options) (*dag.Graph, *plan.Plan) {
	t.Helper()
	e, err := models.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	o.Device, o.BackpropFraction = plan.Profiles["cpu"], 1.0/3
	p, err := search.Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	return g, p
}

// selectiveReference trains g in one process as sbOptions say, at the
// plan's micro-batch: its parameters, losses and each step's samples with
// a backward pass.
func selectiveReference(t *testing.T, g *dag.Graph, mb int64, steps int) (map[string]*stage.Value[float32], []float64, []int) {
	t.Helper()
	o := sbOptions.Train
	o.MicroBatch = int(mb)
	tr, err := stage.NewTrainer(g, o)
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	var kept []int
	for s := 0; s < steps; s++ {
		l, _, err := tr.Step(s)
		if err != nil {
			t.Fatal(err)
		}
		losses, kept = append(losses, l), append(kept, tr.Backprop())
	}
	return tr.Ex.Params, losses, kept
}

// TestSelectiveRunEqualsTrainer: a pipeline run with selective backprop
// keeps the samples one process keeps, step by step, and ends with its
// parameters and losses: 3-stage plans under 1F1B and zb (a deferred
// weight pass on compacted rows), and a plan whose stages before the
// loss's run as data-parallel replicas (each cutting its rows of the kept
// list), over a transport that drops, duplicates and reorders.
func TestSelectiveRunEqualsTrainer(t *testing.T) {
	for _, c := range []struct {
		name  string
		model string
		o     search.Options
	}{
		{"mlp/1f1b", "mlp", search.Options{Devices: 3, MicroBatch: 8, Strategy: "spp"}},
		{"candle-uno/zb", "candle-uno", search.Options{Devices: 3, MicroBatch: 8, Schedule: "zb"}},
		{"mlp/replicas", "mlp", search.Options{Devices: 6, MicroBatch: 8}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, p := sbPlan(t, c.model, c.o)
			if len(p.Stages) < 2 {
				t.Fatalf("a plan of %d stage(s)", len(p.Stages))
			}
			if p.BackpropFraction == 0 {
				t.Fatal("the plan does not record its backprop fraction")
			}
			replicated := false
			for _, s := range p.Stages {
				replicated = replicated || len(s.Devices) > 1
			}
			if c.name == "mlp/replicas" && !replicated {
				t.Fatal("no stage on several devices: the case tests nothing")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := RunLocal(ctx, &Job{Run: "sb", Graph: g, Plan: p, Steps: 5, Options: sbOptions}, wire.NewMemory(2, wire.Faults{Drop: 0.03, Duplicate: 0.03, Reorder: 0.03}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			want, losses, kept := selectiveReference(t, g, p.MicroBatch, 5)
			if !slices.Equal(res.Backprop, kept) {
				t.Fatalf("backprop samples %v, one process %v", res.Backprop, kept)
			}
			if kept[4] >= int(p.BatchSize) {
				t.Fatalf("every sample kept after warm-up (%v): selection was not exercised", kept)
			}
			equalParams(t, res.Params, want, 1e-5)
			for i := range losses {
				if math.Abs(res.Losses[i]-losses[i]) > 1e-5*math.Abs(losses[i]) {
					t.Fatalf("loss %d: %v, single process %v", i, res.Losses[i], losses[i])
				}
			}
			t.Logf("%d stages on %d devices; backprop %v of %d a step", len(p.Stages), layout(p).total, kept, p.BatchSize)
		})
	}
}

// TestSelectiveResumeIsBitIdentical: a run with selective backprop stopped
// after step 3 and resumed from its checkpoint keeps the samples and ends
// with the parameters of an uninterrupted run, bit for bit: the history of
// losses is in the checkpoint.
func TestSelectiveResumeIsBitIdentical(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, p := sbPlan(t, "mlp", search.Options{Devices: 3, MicroBatch: 8, Strategy: "spp"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want, err := RunLocal(ctx, &Job{Run: "ref", Graph: g, Plan: p, Steps: 6, Options: sbOptions}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	run := func(id string, c Config, progress func(int64, float64)) (*Result, error) {
		return natsRun(t, ctx, srv, Job{Graph: g, Plan: p, Steps: 6, Options: sbOptions}, id, c, progress)
	}
	stop := make(chan struct{})
	dir := t.TempDir()
	_, err = run("stopped", Config{CheckpointDir: dir, Stop: stop}, func(n int64, _ float64) {
		if n == 2 {
			close(stop)
		}
	})
	var se *StoppedError
	if !errors.As(err, &se) || se.Step != 3 {
		t.Fatalf("got %v, want a stop at step 3", err)
	}
	ck, err := LoadCheckpoint(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ck.Manifest.SBHistory) == 0 {
		t.Fatal("the checkpoint holds no history of losses")
	}
	res, err := run("resumed", Config{Resume: ck}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Backprop, want.Backprop[3:]) {
		t.Fatalf("resumed, backprop samples %v; uninterrupted %v", res.Backprop, want.Backprop[3:])
	}
	equalParams(t, res.Params, want.Params, 0)
}

// TestSelectiveJobRefused: a job with selective backprop is refused, the
// field named, for bad settings, a model with batch_norm, a plan that puts
// the loss on replicas, and a plan priced for it run without it.
func TestSelectiveJobRefused(t *testing.T) {
	g, p := sbPlan(t, "mlp", search.Options{Devices: 3, MicroBatch: 8})
	wide := *p // the loss's stage on two devices
	wide.Stages = slices.Clone(p.Stages)
	wide.Stages[len(wide.Stages)-1].Devices = []int{2, 3}
	bn, err := dag.Load([]byte(dropNet))
	if err != nil {
		t.Fatal(err)
	}
	bnPlan, err := search.Search(bn, search.Options{Device: plan.Profiles["cpu"], Devices: 2, MicroBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	bad := sbOptions
	bad.Train.Selective = &stage.Selective{Beta: -1, Window: 4}
	for _, c := range []struct {
		name  string
		job   Job
		field string
	}{
		{"beta", Job{Graph: g, Plan: p, Options: bad}, "Options.Train.Selective"},
		{"batch_norm", Job{Graph: bn, Plan: bnPlan, Options: sbOptions}, "Options.Train.Selective"},
		{"replicated loss", Job{Graph: g, Plan: &wide, Options: sbOptions}, "Options.Train.Selective"},
		{"priced, not run", Job{Graph: g, Plan: p, Options: Options{Train: stage.TrainOptions{Optimizer: "adam"}}}, "Options.Train.Selective"},
	} {
		c.job.Run, c.job.Steps = "x", 1
		var je *JobError
		if err := c.job.Validate(); !errors.As(err, &je) || je.Field != c.field {
			t.Errorf("%s: got %v, want a JobError of %s", c.name, err, c.field)
		}
	}
}

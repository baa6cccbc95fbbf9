package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// withBuckets is a copy of p whose stages of several replicas all-reduce
// in buckets of bytes while their last weight pass runs (0: after it), and
// keep their optimizer state as state says ("": as p has it).
func withBuckets(p *plan.Plan, bytes int64, state string) *plan.Plan {
	q := *p
	q.Stages = append([]plan.PlanStage(nil), p.Stages...)
	for i := range q.Stages {
		st := &q.Stages[i]
		if len(st.Devices) < 2 {
			continue
		}
		st.BucketBytes = bytes
		if state != "" {
			st.OptimizerState = state
		}
	}
	return &q
}

// TestOverlapIsBitIdentical: a run whose replicated stages all-reduce
// bucket by bucket during their last weight pass ends with the parameters
// and losses of the run that all-reduces after it, bit for bit: under
// 1F1B and zb (a deferred weight pass, its ops in forward order), with
// clipping (norms pooled after the buckets), with the optimizer state
// sharded (the buckets' reduce-scatter, the all-gather after the update),
// with buckets of a few elements and of more than the stage, over a
// transport that drops, duplicates and reorders.
func TestOverlapIsBitIdentical(t *testing.T) {
	clip := stage.TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9, ClipGradNorm: 0.05}
	adam := stage.TrainOptions{Optimizer: "adam", LR: 1e-3}
	for _, c := range []struct {
		model, schedule, state string
		devices                int
		micro                  int64
		train                  stage.TrainOptions
		bytes                  int64
	}{
		{"transformer", "1f1b", "", 3, 16, adam, 1024},
		{"mlp", "zb", "", 6, 16, adam, 128},
		{"transformer", "1f1b", plan.StateSharded, 4, 16, clip, 2048},
		{"mlp", "1f1b", "", 6, 16, clip, 64},
		{"mlp", "zb", plan.StateSharded, 6, 16, adam, 256},
		{"case-study", "1f1b", "", 8, 8, adam, 1 << 30},
	} {
		t.Run(fmt.Sprintf("%s/%s/%s/%d", c.model, c.schedule, c.state, c.bytes), func(t *testing.T) {
			g, p := replicatedPlan(t, c.model, c.schedule, c.devices, c.micro)
			const steps = 3
			c.train.Steps = steps
			runs := map[int64]*Result{}
			for _, bytes := range []int64{0, c.bytes} {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				res, err := RunLocal(ctx, &Job{Run: "ovl", Graph: g, Plan: withBuckets(p, bytes, c.state), Steps: steps, Options: Options{Train: c.train}},
					wire.NewMemory(1, wire.Faults{Drop: 0.03, Duplicate: 0.03, Reorder: 0.03}, 1<<20))
				cancel()
				if err != nil {
					t.Fatalf("buckets of %d bytes: %v", bytes, err)
				}
				runs[bytes] = res
			}
			equalParams(t, runs[c.bytes].Params, runs[0].Params, 0)
			for i, l := range runs[0].Losses {
				if runs[c.bytes].Losses[i] != l {
					t.Errorf("loss %d: %v overlapped, %v after the pass", i, runs[c.bytes].Losses[i], l)
				}
			}
			buckets := allReduceSpans(runs[c.bytes])
			if buckets == 0 {
				t.Error("no bucket's all-reduce on the overlapped run's timeline")
			}
			t.Logf("%d buckets on the timelines; replicas %v", buckets, replicaCounts(p))
			if buckets := allReduceSpans(runs[0]); buckets != 0 {
				t.Errorf("%d buckets on the timeline of the run that all-reduces after the pass", buckets)
			}
		})
	}
}

// replicatedPlan plans a zoo model's small preset on cpu devices, where
// some stage with parameters runs on 3 or more (on 2, the sum of two
// replicas' values is the same in either order: no test of the order).
func replicatedPlan(t *testing.T, model, schedule string, devices int, micro int64) (*dag.Graph, *plan.Plan) {
	t.Helper()
	e, err := models.Lookup(model)
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	p, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: devices, MicroBatch: micro, Schedule: schedule})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.Stages {
		if len(st.Devices) > 2 && st.Params > 0 {
			return g, p
		}
	}
	t.Fatalf("%s's plan on %d devices has no stage of 3 replicas or more with parameters: %v", model, devices, replicaCounts(p))
	return nil, nil
}

// allReduceSpans counts the buckets on a run's timelines.
func allReduceSpans(res *Result) int {
	n := 0
	for _, es := range res.Events {
		for _, e := range es {
			if microbatch.Kind(e.Kind) == microbatch.AllReduce {
				n++
			}
		}
	}
	return n
}

// TestOverlapStartsDuringThePass: the first bucket of a replicated stage is
// handed to its ring while the stage's last backward still runs, and its
// all-reduce outlasts the action no longer than the rest of the step: the
// overlap on a real run's timeline.
func TestOverlapStartsDuringThePass(t *testing.T) {
	g, p := replicatedPlan(t, "transformer", "1f1b", 3, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunLocal(ctx, &Job{Run: "ovl", Graph: g, Plan: withBuckets(p, 64, ""), Steps: 2, Options: Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}}},
		wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for s, es := range res.Events {
		if len(p.Stages[s].Devices) < 2 || p.Stages[s].Params == 0 {
			continue
		}
		var last Event // the stage's last backward
		first := Event{Start: -1}
		for _, e := range es {
			switch microbatch.Kind(e.Kind) {
			case microbatch.Backward:
				if e.End > last.End {
					last = e
				}
			case microbatch.AllReduce:
				if first.Start < 0 || e.Start < first.Start {
					first = e
				}
			}
		}
		if first.Start < 0 {
			t.Fatalf("stage %d: no bucket on its timeline", s)
		}
		if !(first.Start < last.End && first.Start >= last.Start) {
			t.Errorf("stage %d: the first bucket was handed over at %.6f s, outside its last backward [%.6f, %.6f]", s, first.Start, last.Start, last.End)
		}
		seen++
	}
	if seen == 0 {
		t.Fatal("no replicated stage with parameters")
	}
}

// replicaCounts is each stage's device count.
func replicaCounts(p *plan.Plan) []int {
	var out []int
	for _, st := range p.Stages {
		out = append(out, len(st.Devices))
	}
	return out
}

// TestOverlapOnAnEmulatedDevice: on the CUDA code path (its CPU emulator,
// every worker on one device), buckets come down through the staging
// during the pass and their sums go up piece by piece: the same parameters
// bit for bit as the run that all-reduces after the pass, the optimizer
// state replicated and sharded.
func TestOverlapOnAnEmulatedDevice(t *testing.T) {
	lib, err := cuda.EmulatorLibrary()
	if errors.Is(err, cuda.ErrNoCompiler) {
		t.Skipf("the CUDA kernels' CPU emulator needs a C++ compiler: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model, state string
		devices      int
		bytes        int64
	}{
		{"transformer", "", 3, 2048},
		{"mlp", plan.StateSharded, 6, 128},
	} {
		t.Run(c.model+"/"+c.state, func(t *testing.T) {
			g, p := replicatedPlan(t, c.model, "1f1b", c.devices, 16)
			o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3, ClipGradNorm: 0.05}}
			runs := map[int64]*Result{}
			for _, bytes := range []int64{0, c.bytes} {
				dev, err := cuda.OpenEmulator(lib)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				res, err := RunLocal(ctx, &Job{Run: "ovl-emu", Graph: g, Plan: withBuckets(p, bytes, c.state), Steps: 2, Options: o, Config: Config{Device: dev}},
					wire.NewMemory(5, wire.Faults{Drop: 0.03, Reorder: 0.03}, 1<<20))
				cancel()
				dev.Close()
				if err != nil {
					t.Fatalf("buckets of %d bytes: %v", bytes, err)
				}
				runs[bytes] = res
			}
			equalParams(t, runs[c.bytes].Params, runs[0].Params, 0)
			if allReduceSpans(runs[c.bytes]) == 0 {
				t.Error("no bucket on the overlapped run's timeline")
			}
		})
	}
}

// withLateGather is p with its sharded stages' all-gathers run late
// (plan.PlanStage.GatherS), in buckets of bytes where bytes > 0
// (GatherBucketBytes; the first forward then waits for none of it).
func withLateGather(p *plan.Plan, bytes int64) *plan.Plan {
	q := *p
	q.Stages = append([]plan.PlanStage(nil), p.Stages...)
	for i := range q.Stages {
		if st := &q.Stages[i]; st.StateName() == plan.StateSharded && len(st.Devices) > 1 {
			st.GatherS, st.GatherBucketBytes = 1e-3, bytes
			if bytes > 0 {
				st.GatherS = 0
			}
		}
	}
	return &q
}

// TestLateGatherIsBitIdentical: a run whose sharded stages all-gather
// their parameters late (after the optimizer step, while the next
// iteration begins) ends with the parameters and losses of the run that
// all-gathers in the step, bit for bit: on the CPU over a transport that
// drops, duplicates and reorders, with clipping, with buckets, and with
// the all-gather in buckets too (each op's forward waiting for its own),
// and on the CUDA emulator.
func TestLateGatherIsBitIdentical(t *testing.T) {
	lib, err := cuda.EmulatorLibrary()
	emulator := err == nil
	if err != nil && !errors.Is(err, cuda.ErrNoCompiler) {
		t.Fatal(err)
	}
	clip := stage.TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9, ClipGradNorm: 0.05}
	adam := stage.TrainOptions{Optimizer: "adam", LR: 1e-3}
	for _, c := range []struct {
		model   string
		devices int
		train   stage.TrainOptions
		bytes   int64
		gather  int64
		device  bool
		prec    string
	}{
		{"transformer", 4, clip, 0, 0, false, ""},
		{"transformer", 4, clip, 0, 1024, false, ""},
		{"mlp", 6, adam, 256, 0, false, ""},
		{"mlp", 6, adam, 256, 512, false, ""},
		{"mlp", 6, adam, 0, 0, true, ""},
		{"mlp", 6, adam, 0, 512, true, ""},
		{"mlp", 6, adam, 0, 512, true, "bf16"}, // each bucket's parameters' bf16 copies made again
	} {
		t.Run(fmt.Sprintf("%s/%d/gather=%d/device=%v%s", c.model, c.bytes, c.gather, c.device, c.prec), func(t *testing.T) {
			if c.device && !emulator {
				t.Skip("the CUDA kernels' CPU emulator needs a C++ compiler")
			}
			g, p := replicatedPlan(t, c.model, "1f1b", c.devices, 16)
			base := withBuckets(p, c.bytes, plan.StateSharded)
			const steps = 3
			c.train.Steps = steps
			runs := make([]*Result, 2)
			for i, q := range []*plan.Plan{base, withLateGather(base, c.gather)} {
				job := &Job{Run: "late", Graph: g, Plan: q, Steps: steps, Options: Options{Train: c.train}}
				if c.device {
					dev, err := cuda.OpenEmulator(lib)
					if err != nil {
						t.Fatal(err)
					}
					defer dev.Close()
					job.Config.Device, job.Config.Precision = dev, c.prec
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				res, err := RunLocal(ctx, job, wire.NewMemory(3, wire.Faults{Drop: 0.03, Duplicate: 0.03, Reorder: 0.03}, 1<<20))
				cancel()
				if err != nil {
					t.Fatalf("late %v: %v", i == 1, err)
				}
				runs[i] = res
			}
			equalParams(t, runs[1].Params, runs[0].Params, 0)
			for i, l := range runs[0].Losses {
				if runs[1].Losses[i] != l {
					t.Errorf("loss %d: %v gathered late, %v in the step", i, runs[1].Losses[i], l)
				}
			}
		})
	}
}

// TestLateGatherServed: workers that join over NATS (Serve, the
// coordinator's verdicts and checkpoints) with their sharded stages'
// all-gathers run late, in buckets, end with the parameters of the local run that
// all-gathers in the step, bit for bit, and write checkpoints that hold
// them.
func TestLateGatherServed(t *testing.T) {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	g, q := replicatedPlan(t, "transformer", "1f1b", 4, 16)
	p := withBuckets(q, 0, plan.StateSharded)
	late := withLateGather(p, 256)
	moved := 0
	for _, st := range late.Stages {
		if st.GathersLate() {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("the transformer's plan on 4 has no sharded stage: %v", replicaCounts(p))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o := Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 1e-3}, CheckpointEvery: 2}
	want, err := RunLocal(ctx, &Job{Run: "ref", Graph: g, Plan: p, Steps: 4, Options: Options{Train: o.Train}}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := runJoined(t, ctx, srv, &Job{Run: "late", Graph: g, Plan: late, Steps: 4, Options: o, Config: Config{CheckpointDir: dir}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, res.Params, want.Params, 0)
	ck, err := LoadCheckpoint(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	equalParams(t, ck.Params, want.Params, 0)
}

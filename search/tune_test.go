package search

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/graphpipe/graphpipe/microbatch"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// untuned is p's iteration time with Warmup's schedule, as the plan was
// before tune.
func untuned(t *testing.T, p *plan.Plan) float64 {
	t.Helper()
	q := *p
	q.Stages = append([]plan.PlanStage(nil), p.Stages...)
	q.SetSchedule(nil)
	q.Actions = nil
	if err := schedule(&q); err != nil {
		t.Fatal(err)
	}
	if err := q.Predict(); err != nil {
		t.Fatal(err)
	}
	return q.Predicted.IterationS
}

// TestTuneNeverSlower: on random DAGs and both tuned schedules, the searched
// plan is never slower than its own stages under Warmup's schedule, and
// still fits (checkPlan); somewhere tuning helps. Half the seeds plan with
// NoOverlap and 8 micro-batches: with the all-reduce and the all-gather
// overlapped, most of these small graphs plan as one data-parallel stage,
// or one a branch, at one micro-batch, which have nothing to tune.
func TestTuneNeverSlower(t *testing.T) {
	helped := 0
	for seed := int64(0); seed < 40; seed++ {
		g, err := models.RandomDAG(seed, 4+int(seed)%30, 256)
		if err != nil {
			t.Fatal(err)
		}
		for _, sched := range []string{"1f1b", "zb"} {
			p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 2 + int(seed%7), Batch: 64, Schedule: sched, NoOverlap: seed%2 == 1, MicroBatch: 8 * (seed % 2)})
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, g, p)
			before := untuned(t, p)
			if p.Predicted.IterationS > before*(1+1e-12) {
				t.Fatalf("seed %d, %s: tuned %v, Warmup's %v", seed, sched, p.Predicted.IterationS, before)
			}
			if p.Predicted.IterationS < before*(1-1e-9) {
				helped++
			}
		}
	}
	if helped == 0 {
		t.Error("tuning never helped: the test does not exercise it")
	}
	t.Logf("tuning shortened %d of 80 plans", helped)
}

// TestTuneDLRM: the paper's DLRM on 32 v100 at batch 65536, its rings
// after the passes (NoOverlap: overlapped, one data-parallel stage is
// faster), where gpp's plan (8 unequal stages, 16 micro-batches) gains
// from running further ahead than Warmup's steady-state rule.
func TestTuneDLRM(t *testing.T) {
	e, _ := models.Lookup("dlrm")
	g, err := e.Build(e.Default)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 32, Batch: 65536, NoOverlap: true})
	if err != nil {
		t.Fatal(err)
	}
	before := untuned(t, p)
	if gain := before/p.Predicted.IterationS - 1; gain < 0.01 {
		t.Errorf("tuning gained %.2f%% (%v s against %v s), want at least 1%%", 100*gain, p.Predicted.IterationS, before)
	} else {
		t.Logf("tuning gained %.2f%%: %v s against %v s", 100*gain, p.Predicted.IterationS, before)
	}
}

// TestActionsCountsLists: the count tune budgets with is the lists' length.
func TestActionsCountsLists(t *testing.T) {
	e, _ := models.Lookup("case-study")
	g, _ := e.Build(e.Small)
	for _, sched := range []string{"1f1b", "zb"} {
		p, err := Search(g, Options{Device: plan.Profiles["cpu"], Devices: 4, MicroBatch: 2, Schedule: sched})
		if err != nil {
			t.Fatal(err)
		}
		sch, err := p.ScheduleOf()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range sch.Lists {
			n += len(l)
		}
		if got := actions(p.Pipeline(), microbatch.Splits(sched)); got != n || len(p.Edges) == 0 {
			t.Errorf("%s: actions %d, the lists hold %d (%d edges)", sched, got, n, len(p.Edges))
		}
	}
}

// TestIterationFloor: no 1F1B, zb or 2bw schedule of a searched plan, whatever
// its warm-up counts, simulates faster than iterationFloor, and the floor
// is reached somewhere (so that tune's stop at it is ever taken): plans
// of random DAGs, as Search tuned them, each under Warmup's counts and many
// raised at random, half of them with random beginnings, message costs,
// holds and a fixed cost. (Search weighs a plan untuned where its floor lies
// above its planner's fastest as tuned: TestRestFloorSamePlans.)
func TestIterationFloor(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	checked, tight := 0, 0
	for seed := int64(0); seed < 30; seed++ {
		g, err := models.RandomDAG(300+seed, 4+int(seed)%20, 256)
		if err != nil {
			t.Fatal(err)
		}
		for _, sched := range []string{"1f1b", "zb", "2bw"} {
			k, _ := microbatch.KindOf(sched)
			p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 2 + int(seed%7), Batch: 16 << (seed % 3), Schedule: sched})
			if err != nil {
				t.Fatal(err)
			}
			pipe, tm := p.Pipeline(), p.Timing()
			if floor := iterationFloor(pipe, tm, k); floor > p.Predicted.IterationS*(1+1e-12) { // Search tuned it
				t.Fatalf("seed %d %s: the searched plan simulates %v, below its floor %v", seed, sched, p.Predicted.IterationS, floor)
			}
			if seed%2 == 1 { // what a run pays beside its ops: beginnings, messages, holds, a fixed cost
				it := p.Predicted.IterationS
				tm.Fixed, tm.Begin = it*r.Float64()/10, make([]float64, pipe.Stages)
				for s := range tm.Begin {
					tm.Begin[s] = it * r.Float64() / 20
				}
				for range pipe.Edges {
					tm.Post, tm.Take, tm.Hold = append(tm.Post, it*r.Float64()/50), append(tm.Take, it*r.Float64()/50), append(tm.Hold, it*r.Float64()/50)
				}
			}
			floor := iterationFloor(pipe, tm, k)
			warm, err := microbatch.Warmup(pipe, tm, 0)
			if err != nil {
				t.Fatal(err)
			}
			for try := 0; try < 12; try++ {
				w := warm
				if try > 0 {
					s := r.IntN(pipe.Stages)
					w = raise(pipe, warm, s, min(pipe.MicroBatches, warm[s]+1+r.IntN(4)))
				}
				sch, err := k.Warmed(pipe, tm, w)
				if err != nil && k.NoFlush {
					continue // a sink raised, or a stage more than a batch ahead: not a 2bw schedule
				}
				if err != nil {
					t.Fatal(err)
				}
				res, err := microbatch.Summarize(sch, tm)
				if err != nil {
					t.Fatal(err)
				}
				if floor > res.Iteration*(1+1e-12) {
					t.Fatalf("seed %d %s, warm-up %v: simulated %v, below the floor %v", seed, sched, w, res.Iteration, floor)
				}
				checked++
				if floor >= res.Iteration*(1-1e-10) {
					tight++
				}
			}
		}
	}
	if tight == 0 {
		t.Errorf("the floor is never reached in %d schedules: tune never stops at it", checked)
	}
	t.Logf("%d schedules, %d at the floor", checked, tight)
}

// TestTuneFloorSamePlans: tune stopping where the iteration is at its floor
// keeps the same plans as tuning on until a round finds nothing, byte for
// byte (bisectCases).
func TestTuneFloorSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.tuneFloor }, "stopping tuning at the floor")
}

// TestRestFloorSamePlans: weighing untuned the plans whose floor lies above
// their planner's fastest as tuned keeps the same plans as tuning them
// all, byte for byte (bisectCases).
func TestRestFloorSamePlans(t *testing.T) {
	t.Parallel()
	samePlansToggled(t, func(tu *tuning) *bool { return &tu.restFloor }, "weighing the hopeless untuned")
}

// TestRestFloorLateGathers: the same on the paper's DLRM and CANDLE-Uno
// on 32 v100 at batches whose plans shard their optimizer state, where
// tuning moves all-gathers out of the flush (lateGathers): a plan's floor
// must leave them out, or it lies above what tuning makes of it and the
// plan that tunes fastest is weighed untuned (DLRM at 4096).
func TestRestFloorLateGathers(t *testing.T) {
	t.Parallel()
	late := 0
	for _, c := range []struct {
		model string
		batch int64
	}{{"dlrm", 2048}, {"dlrm", 4096}, {"candle-uno", 2048}, {"candle-uno", 4096}} {
		e, _ := models.Lookup(c.model)
		g, err := e.Build(e.Default)
		if err != nil {
			t.Fatal(err)
		}
		o := Options{Device: plan.Profiles["v100"], Devices: 32, Batch: c.batch}
		on, off := searchToggled(t, g, o, func(tu *tuning) *bool { return &tu.restFloor })
		if !bytes.Equal(on, off) {
			t.Errorf("%s at %d: the plan weighing the hopeless untuned differs from the one tuning them all:\n%s\n---\n%s", c.model, c.batch, on, off)
		}
		if p, err := Search(g, o); err == nil && gathersLate(p) {
			late++
		}
	}
	if late == 0 {
		t.Error("no plan gathers late: the test does not exercise the floor's gathers")
	}
}

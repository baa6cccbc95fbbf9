package search

import (
	"testing"

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
// still fits (checkPlan); somewhere tuning helps.
func TestTuneNeverSlower(t *testing.T) {
	helped := 0
	for seed := int64(0); seed < 40; seed++ {
		g, err := models.RandomDAG(seed, 4+int(seed)%30, 256)
		if err != nil {
			t.Fatal(err)
		}
		for _, sched := range []string{"1f1b", "zb"} {
			p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 2 + int(seed%7), Batch: 64, Schedule: sched})
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

// TestTuneDLRM: the paper's DLRM on 32 v100 at batch 65536, where gpp's
// plan (8 unequal stages, 16 micro-batches) gains from running further ahead
// than Warmup's steady-state rule.
func TestTuneDLRM(t *testing.T) {
	e, _ := models.Lookup("dlrm")
	g, err := e.Build(e.Default)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 32, Batch: 65536})
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
		if got := actions(p.Pipeline(), sched == "zb"); got != n || len(p.Edges) == 0 {
			t.Errorf("%s: actions %d, the lists hold %d (%d edges)", sched, got, n, len(p.Edges))
		}
	}
}

package search

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// TestShare: shares of groups among parts are each at least one and at
// most most, add up to groups where that is possible (and never past it),
// and are within one of the parts' proportional shares above one.
func TestShare(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 2000; trial++ {
		n := 1 + r.IntN(16)
		groups, most := n+r.IntN(64), 1+r.IntN(40)
		work := make([]float64, n)
		var sum float64
		for i := range work {
			if r.IntN(4) > 0 {
				work[i] = r.Float64() * 10
			}
			sum += work[i]
		}
		got := share(append([]float64(nil), work...), groups, most)
		uncapped := sum > 0 // no part's proportional share reaches most
		for _, w := range work {
			uncapped = uncapped && 1+w/sum*float64(groups-n) < float64(most-1)
		}
		total := 0
		for i, s := range got {
			total += s
			if s < 1 || s > max(1, most) {
				t.Fatalf("share(%v, %d, %d) = %v: part %d outside 1..most", work, groups, most, got, i)
			}
			if want := 1 + work[i]/sum*float64(groups-n); uncapped && math.Abs(float64(s)-want) >= 1+1e-9 {
				t.Fatalf("share(%v, %d, %d) = %v: part %d has %d, its share %g", work, groups, most, got, i, s, want)
			}
		}
		if total > groups || sum > 0 && total < min(groups, n*most) {
			t.Fatalf("share(%v, %d, %d) = %v: %d in all", work, groups, most, got, total)
		}
	}
}

// TestBranchParallel: the paper's MMT at its own batch (128) on 32 v100,
// at one micro-batch of 128: the gpp planner offers a plan of each branch
// one data-parallel stage, the units after them a stage of their own, far
// faster than the DP's own plans at that size (its deep pipelines of
// short stages run one after another at one micro-batch).
func TestBranchParallel(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Default)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Options{Device: plan.Profiles["v100"], Devices: 32, MicroBatch: 128}.withDefaults(g.BatchSize())
	if err != nil {
		t.Fatal(err)
	}
	sp := &spaces{tu: defaultTuning()}
	cm := sp.costModel(g, &o)
	pl := &planner{g: g, o: &o, cm: cm, sp: sp.graph(g, &o, cm), who: "gpp", hints: &sp.hints}
	var branches *plan.Plan
	dpBest := math.Inf(1)
	if err := pl.plans(func(p *plan.Plan, _ string) {
		if len(p.Stages) == 5 && strings.HasSuffix(p.Stages[0].Ops[len(p.Stages[0].Ops)-1], ".pool") {
			branches = p
		} else if len(p.Stages) > 1 {
			dpBest = math.Min(dpBest, p.Predicted.IterationS)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if branches == nil {
		t.Fatal("no branch-parallel plan offered")
	}
	for s, st := range branches.Stages[:4] {
		if !strings.HasSuffix(st.Ops[0], ".emb") || !strings.HasSuffix(st.Ops[len(st.Ops)-1], ".pool") || len(st.Devices) < 6 {
			t.Errorf("stage %d on %d devices: %s .. %s, want a whole branch", s, len(st.Devices), st.Ops[0], st.Ops[len(st.Ops)-1])
		}
	}
	if got := branches.Predicted.IterationS; got > dpBest/2 {
		t.Errorf("branch-parallel %g s an iteration, the DP's best pipeline %g", got, dpBest)
	}
}

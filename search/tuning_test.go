package search

import (
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// TestTuningReachesEveryPart: a search's tuning is the one each of its
// parts reads: the cost model of every device kind and every DP's prices,
// on devices of one kind and on clusters of several; and a cost model
// built alone runs as defaultTuning says.
func TestTuningReachesEveryPart(t *testing.T) {
	t.Parallel()
	tu := defaultTuning()
	tu.midFirst, tu.eagerRecFit, tu.maxDPDevices, tu.frontierSizes = false, true, 7, 1
	one := oracleCases(t)[3]
	cases := []oracleCase{one}
	for _, kc := range kindsCases(t)[:8] {
		cases = append(cases, kc.oracleCase)
	}
	for _, tc := range cases {
		o := tc.o
		if alone := newCostModel(tc.g, &o); alone.tu != defaultTuning() {
			t.Fatalf("seed %d: a cost model built alone runs as %+v", tc.seed, alone.tu)
		}
		sp := &spaces{tu: tu}
		cm := sp.costModel(tc.g, &o)
		models := []*costModel{cm}
		if o.Cluster != nil {
			if len(cm.kinds) != len(o.Cluster.Kinds) {
				t.Fatalf("seed %d: %d cost models for %d kinds", tc.seed, len(cm.kinds), len(o.Cluster.Kinds))
			}
			models = cm.kinds
		}
		for i, m := range models {
			if m.tu != tu {
				t.Fatalf("seed %d: kind %d's cost model runs as %+v, the search as %+v", tc.seed, i, m.tu, tu)
			}
		}
		for _, s := range []*space{sp.graph(tc.g, &o, cm), sp.sequential(tc.g, &o, cm)} {
			pl := &planner{g: tc.g, o: &o, cm: cm, sp: s}
			if d := pl.dp(tc.b); d.tu != tu {
				t.Fatalf("seed %d: the DP's prices run as %+v, the search as %+v", tc.seed, d.tu, tu)
			}
		}
	}
}

// TestTunedSearchesRunSideBySide: searches that run at once, each with a
// tuning of its own, plan as each does alone: a search's tuning is its
// own, not the package's. The frontier's limits (shallowerPlans) change
// DLRM's plan (TestFrontierDLRM), so a leak between the two would show.
func TestTunedSearchesRunSideBySide(t *testing.T) {
	t.Parallel()
	e, err := models.Lookup("dlrm")
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Device: plan.Profiles["v100"], Devices: 16, Batch: 256}
	noFrontier := defaultTuning()
	noFrontier.shallowerPlans = 0
	tunings := []tuning{defaultTuning(), noFrontier}
	alone := make([][]byte, len(tunings))
	for i, tu := range tunings {
		p, err := searchTuned(g, o, tu)
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = encodeNoTime(p)
	}
	if string(alone[0]) == string(alone[1]) {
		t.Fatal("the frontier does not change the plan: the test does not tell")
	}
	together := make([][]byte, 2*len(tunings))
	if err := each(len(together), func(i int) error {
		p, err := searchTuned(g, o, tunings[i%len(tunings)])
		if err == nil {
			together[i] = encodeNoTime(p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i, got := range together {
		if want := alone[i%len(tunings)]; string(got) != string(want) {
			t.Errorf("search %d (tuning %d) run beside others planned differently from alone:\n%s\n---\n%s", i, i%len(tunings), got, want)
		}
	}
}

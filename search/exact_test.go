package search

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// seqAll enumerates every sequential pipeline over the ops: ordered stages,
// each prefix closed under predecessors, on exactly k devices.
func seqAll(g *dag.Graph, done map[int]bool, k int) [][]bfStage {
	var rest []int
	for _, op := range g.Order() {
		if !done[op] {
			rest = append(rest, op)
		}
	}
	if len(rest) == 0 {
		if k == 0 {
			return [][]bfStage{nil}
		}
		return nil
	}
	var out [][]bfStage
	for mask := 1; mask < 1<<len(rest); mask++ {
		var stage []int
		next := map[int]bool{}
		for op := range done {
			next[op] = true
		}
		for i, op := range rest {
			if mask&(1<<i) != 0 {
				stage = append(stage, op)
				next[op] = true
			}
		}
		closed := true
		for op := range next {
			for _, p := range g.Producers(op) {
				closed = closed && next[p]
			}
		}
		if !closed {
			continue
		}
		for k1 := 1; k1 <= k; k1++ {
			for _, r := range seqAll(g, next, k-k1) {
				out = append(out, append([]bfStage{{stage, k1, len(r) + 1, false}}, r...))
			}
		}
	}
	return out
}

// liveOf prices a sequential stage's links by what is live across its cuts.
func liveOf(g *dag.Graph, before map[int]bool) int64 {
	var live int64
	for op := range before {
		for _, c := range g.Consumers(op) {
			if !before[c] {
				live += g.Out(op).Bytes()
				break
			}
		}
	}
	return live
}

func TestExactEqualsBruteForce(t *testing.T) {
	checked := 0
	for _, tc := range oracleCases(t) {
		if tc.ops > 6 || tc.k > 3 {
			continue
		}
		o := tc.o
		o.MaxSeries, o.MaxDownsets = 0, 1<<20
		cm := newCostModel(tc.g, &o)
		ds, err := enumerate(tc.g, partition.Decompose(tc.g, 0).Root.Leaves(), o.MaxDownsets, (*dag.Tensor).Bytes)
		if err != nil {
			t.Fatal(err)
		}
		ep := newExactProblem(cm, ds, &o, tc.b)
		got, _, _, ok := ep.solve(cm, tc.k, false)
		if !ok {
			got = math.Inf(1)
		}
		want := math.Inf(1)
		for _, plan := range seqAll(tc.g, map[int]bool{}, tc.k) {
			worst := 0.0
			before := map[int]bool{}
			for _, s := range plan {
				in := liveOf(tc.g, before)
				for _, op := range s.ops {
					before[op] = true
				}
				out := liveOf(tc.g, before)
				one := []bfStage{s}
				v := value(cm, one, tc.b, tc.mbs, false, func([]int) (int64, int64) { return in, out })
				worst = math.Max(worst, v)
			}
			want = math.Min(want, worst)
		}
		if !close(got, want) {
			t.Fatalf("seed %d (%d ops, %d devices): spp-exact %v, brute force %v", tc.seed, tc.ops, tc.k, got, want)
		}
		// spp cuts one topological order: it can only be as good or worse
		sp := newSpace(cm, chainTree(chainUnits(tc.g, 1000)), liveCross(tc.g, (*dag.Tensor).Bytes))
		spp, ok := newDP(sp, tc.k, tc.b, tc.mbs, false).minT(tc.k)
		if ok && spp < got*(1-1e-9) {
			t.Fatalf("seed %d: spp %v beats the exact sequential optimum %v", tc.seed, spp, got)
		}
		checked++
	}
	if checked < 40 {
		t.Errorf("only %d cases checked", checked)
	}
}

func TestExactStopsAtItsLimit(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, _ := e.Build(e.Default)
	_, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 8, Strategy: "spp-exact"})
	var le *LimitError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "more than 4096 downsets") {
		t.Fatalf("got %v", err)
	}
	// a chain has as many downsets as ops: spp-exact runs and matches spp's depth rule
	s, _ := models.Lookup("transformer")
	g, _ = s.Build(s.Small)
	p, err := Search(g, Options{Device: plan.Profiles["cpu"], Devices: 4, Strategy: "spp-exact"})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, g, p)
}

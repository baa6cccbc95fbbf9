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

// TestBranchParallel: the paper's MMT at its own batch (128) on 32 v100
// plans each branch as one data-parallel stage at one micro-batch, the
// units after them on a stage of their own, faster than the DP's
// pipelines and the best sequential plan.
func TestBranchParallel(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Default)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 32})
	if err != nil {
		t.Fatal(err)
	}
	if p.MicroBatches != 1 || len(p.Stages) != 5 {
		t.Fatalf("%d stages at %d micro-batches, want 5 at one", len(p.Stages), p.MicroBatches)
	}
	for s, st := range p.Stages[:4] {
		if !strings.HasSuffix(st.Ops[0], ".emb") || !strings.HasSuffix(st.Ops[len(st.Ops)-1], ".pool") || len(st.Devices) < 6 {
			t.Errorf("stage %d on %d devices: %s .. %s, want a whole branch", s, len(st.Devices), st.Ops[0], st.Ops[len(st.Ops)-1])
		}
	}
	if over := p.Predicted.SamplesPerS / p.Search.Sequential.SamplesPerS; over < 1.2 {
		t.Errorf("%g samples/s, %.3f over the best sequential plan", p.Predicted.SamplesPerS, over)
	}
}

package bench

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/search"
)

// TestPlanBreakdown: a plan's shares of its device-time add up to one, the
// share at the best efficiency is its fraction of the ideal bound, a plan of
// one stage idles only where it leaves devices unused, a pipeline idles in
// its fill and drain, and what is exposed of the transfers and all-reduces
// is a part of the iteration.
func TestPlanBreakdown(t *testing.T) {
	for _, tc := range []struct {
		model    string
		devices  int
		batch    int64
		strategy string
		stages   int // 1: a plan of one stage; 0: more than one
	}{
		{"transformer", 4, 64, "spp", 1},
		{"dlrm", 32, 512, "gpp", 0}, // mmt plans one data-parallel stage since its rings overlap the passes, in two levels
		{"candle-uno", 32, 1024, "gpp", 0},
	} {
		e, err := models.Lookup(tc.model)
		if err != nil {
			t.Fatal(err)
		}
		g, err := e.Build(e.Default)
		if err != nil {
			t.Fatal(err)
		}
		p, err := search.Search(g, options("v100", tc.devices, tc.batch, 0, tc.strategy, "1f1b"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := PlanBreakdown(g, p)
		if err != nil {
			t.Fatal(err)
		}
		sum := b.Ideal + b.BelowBest + b.AllReduce + b.Optimizer + b.Bubble + b.EndWait + b.Unused
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%s: the shares add up to %g: %+v", tc.model, sum, b)
		}
		if of := p.Predicted.SamplesPerS / p.Ideal(g); math.Abs(b.Ideal-of) > 1e-9 {
			t.Errorf("%s: at the best efficiency %g of the time, the plan %g of the ideal bound", tc.model, b.Ideal, of)
		}
		for name, v := range map[string]float64{"below best": b.BelowBest, "all-reduce": b.AllReduce, "optimizer": b.Optimizer, "bubble": b.Bubble,
			"end wait": b.EndWait, "transfers exposed": b.ExposedTransfers, "all-reduce exposed": b.ExposedAllReduce} {
			if v < -1e-12 || v >= 1 {
				t.Errorf("%s: %s %g, not a part of the iteration", tc.model, name, v)
			}
		}
		switch {
		case tc.stages == 1 && len(p.Stages) != 1:
			t.Fatalf("%s: %d stages, want the one the test is for", tc.model, len(p.Stages))
		case tc.stages == 1 && (b.Bubble > 1e-9 || b.EndWait > 1e-9 || b.ExposedTransfers != 0):
			t.Errorf("%s: one stage idles %g before its flush and %g after, %g in transfers", tc.model, b.Bubble, b.EndWait, b.ExposedTransfers)
		case tc.stages == 0 && (len(p.Stages) < 2 || b.Bubble <= 0):
			t.Errorf("%s: %d stages idle %g before their flush: a pipeline fills and drains", tc.model, len(p.Stages), b.Bubble)
		}
		var late, flushes float64 // a late all-gather is all-reduce, not bubble
		for _, st := range p.Stages {
			late += float64(len(st.Devices)) * st.GatherS
			flushes += float64(len(st.Devices)) * st.FlushS
		}
		if late > 0 {
			if total := float64(p.Devices) * b.IterationS; b.AllReduce+b.Optimizer < (late+flushes)/total-1e-9 {
				t.Errorf("%s: all-reduce and optimizer %g of the time, the flushes and late all-gathers %g", tc.model, b.AllReduce+b.Optimizer, (late+flushes)/total)
			}
		} else if tc.model == "candle-uno" {
			t.Errorf("%s: no stage all-gathers late: the case for it", tc.model)
		}
	}
}

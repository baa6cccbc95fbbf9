package search

import (
	"fmt"
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// TestOverlapARBounds: the DP's price of an all-reduce overlapped with a
// last weight pass of window seconds is never more than the ring after the
// pass, and never less than what of that ring the pass cannot hide:
// max(0, ring − window).
func TestOverlapARBounds(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Options{Device: plan.Profiles["v100"], Devices: 32}.withDefaults(g.BatchSize())
	if err != nil {
		t.Fatal(err)
	}
	cm := newCostModel(g, &o)
	no := o
	no.NoOverlap = true
	off := newCostModel(g, &no)
	checked := 0
	for _, pl := range []placement{placeReplicated, placeSharded} {
		var rings []ring
		for _, k := range []int{2, 3, 8, 32} {
			for _, inter := range []bool{false, true} {
				rings = append(rings, flatRing(cm.dev, k, inter))
			}
		}
		rings = append(rings, twoLevel(cm.dev, 2, 4), twoLevel(cm.dev, 8, 4))
		for _, r := range rings {
			for _, params := range []int64{1, 1000, 1 << 20, 1 << 28} {
				ar := r.allReduce(4 * float64(params))
				for _, window := range []float64{0, 1e-6, 1e-4, 1e-2, 1, 100} {
					got := cm.overlapAR(pl, params, r, ar, window)
					if got > ar || got < max(0, ar-window) {
						t.Errorf("placement %d, %d params on %+v, window %g s: %g s, want in [%g, %g]", pl, params, r, window, got, max(0, ar-window), ar)
					}
					if serial := off.overlapAR(pl, params, r, ar, window); serial != ar {
						t.Errorf("NoOverlap prices %g s, want the ring's %g", serial, ar)
					}
					checked++
				}
			}
		}
	}
	if r := flatRing(cm.dev, 32, false); cm.overlapAR(placeReplicated, 1<<28, r, r.allReduce(4<<28), 1) >= r.allReduce(4<<28) {
		t.Error("a second-long pass hides nothing of a 1 GiB ring")
	}
	t.Logf("%d cases", checked)
}

// TestPlanFlushBounds: in the plans the search makes for the paper models
// at 32 v100, each replicated stage's flush, priced with its buckets from
// its ops' own order and times, lies between the flush whose all-reduce
// the pass hides as far as it is long (max(0, ring − pass)) and the flush
// that all-reduces after the pass; every bucket size planFlush tries does,
// and a stage it gives buckets is priced below the serial flush. With
// -short, mmt under 1F1B alone.
func TestPlanFlushBounds(t *testing.T) {
	withBuckets := 0
	for n, c := range []struct {
		model    string
		batch    int64
		schedule string
	}{
		{"mmt", 512, "1f1b"}, {"dlrm", 512, "1f1b"}, {"candle-uno", 65536, "1f1b"}, {"mmt", 512, "zb"},
	} {
		t.Run(fmt.Sprintf("%s/%d/%s", c.model, c.batch, c.schedule), func(t *testing.T) {
			if testing.Short() && n > 0 {
				t.Skip("the other paper models at 32 devices: without -short")
			}
			e, _ := models.Lookup(c.model)
			g, err := e.Build(e.Default)
			if err != nil {
				t.Fatal(err)
			}
			for _, strategy := range []string{"gpp", "spp"} {
				o := Options{Device: plan.Profiles["v100"], Devices: 32, Batch: c.batch, Strategy: strategy, Schedule: c.schedule}
				p, err := Search(g, o)
				if err != nil {
					t.Fatal(err)
				}
				d, err := o.withDefaults(g.BatchSize())
				if err != nil {
					t.Fatal(err)
				}
				cm := newCostModel(g, &d)
				for s := range p.Stages {
					st := &p.Stages[s]
					pl, k, r := placementOf(st), len(st.Devices), cm.planRing(p, s)
					ar := r.allReduce(4 * float64(st.Params))
					serial := cm.placedFlush(pl, st.Params, k, ar, 1)
					pass := cm.passReady(st)
					if k < 2 || st.Params == 0 || pass == nil {
						continue
					}
					hidden := cm.placedFlush(pl, st.Params, k, max(0, ar-pass.len), 1)
					const eps = 1e-12
					got, bytes := cm.planFlush(p, s, 1)
					if got > serial+eps || got < hidden-eps {
						t.Errorf("%s stage %d (%d params on %d): flush %g s in buckets of %d, want in [%g, %g]", strategy, s, st.Params, k, got, bytes, hidden, serial)
					}
					if bytes > 0 && got >= serial {
						t.Errorf("%s stage %d: buckets of %d bytes that price no shorter (%g s) than the serial flush", strategy, s, bytes, got)
					}
					if bytes > 0 {
						withBuckets++
					}
					for _, size := range bucketSizes {
						ar2 := cm.bucketsAR(pass, cm.bucketParts(pass, size, r.k), pl, r)
						if ar2 < max(0, ar-pass.len)-eps {
							t.Errorf("%s stage %d: buckets of %d price %g s of all-reduce, below max(0, %g − %g)", strategy, s, size, ar2, ar, pass.len)
						}
					}
				}
			}
		})
	}
	if withBuckets == 0 {
		t.Error("no plan's stage all-reduces in buckets")
	}
}

// TestLateGathers: in dlrm's and candle-uno's plans at their own batch
// on 32 v100, some sharded stage all-gathers late; each such stage's
// all-gather (the second half of its ring) is out of its flush, and what
// of it the first forward waits for (gatherWait: no more than the whole)
// is at the start of its iteration (plan.Timing's Begin); the plan is faster
// than the same lists with every all-gather back in its flush; and with
// NoOverlap no stage gathers late.
func TestLateGathers(t *testing.T) {
	for n, model := range []string{"dlrm", "candle-uno"} {
		t.Run(model, func(t *testing.T) {
			if testing.Short() && n > 0 {
				t.Skip("candle-uno: without -short")
			}
			e, _ := models.Lookup(model)
			g, err := e.Build(e.Default)
			if err != nil {
				t.Fatal(err)
			}
			o := Options{Device: plan.Profiles["v100"], Devices: 32, Batch: 1024}
			p, err := Search(g, o)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := o.withDefaults(g.BatchSize())
			cm := newCostModel(g, &d)
			late, tm := 0, p.Timing()
			back := *p
			back.Stages = append([]plan.PlanStage(nil), p.Stages...)
			for s := range p.Stages {
				st := &p.Stages[s]
				if !st.GathersLate() {
					continue
				}
				late++
				whole := cm.gatherS(p, s)
				want, bytes := cm.gatherWait(p, s)
				if math.Abs(st.GatherS-want) > 1e-12 || st.GatherBucketBytes != bytes || want > whole {
					t.Errorf("stage %d waits %g s for its late all-gather in buckets of %d, want %g in %d (the whole ring's all-gather %g)", s, st.GatherS, st.GatherBucketBytes, want, bytes, whole)
				}
				if tm.Begin == nil && st.BeginS+st.GatherS > 0 || tm.Begin != nil && tm.Begin[s] != st.BeginS+st.GatherS {
					t.Errorf("stage %d: the timing's begin %v, want %g + %g", s, tm.Begin, st.BeginS, st.GatherS)
				}
				b := &back.Stages[s]
				b.FlushS, b.GatherS, b.GatherBucketBytes = b.FlushS+whole, 0, 0
			}
			if late == 0 {
				t.Fatal("no stage gathers late")
			}
			if err := back.Predict(); err != nil {
				t.Fatal(err)
			}
			if back.Predicted.IterationS <= p.Predicted.IterationS {
				t.Errorf("the plan takes %g s an iteration, %g with its all-gathers back in the flush", p.Predicted.IterationS, back.Predicted.IterationS)
			}
			o.NoOverlap = true
			q, err := Search(g, o)
			if err != nil {
				t.Fatal(err)
			}
			for s, st := range q.Stages {
				if st.GathersLate() || st.BucketBytes != 0 {
					t.Errorf("NoOverlap: stage %d gathers late (%g s, buckets of %d) or all-reduces in buckets (%d)", s, st.GatherS, st.GatherBucketBytes, st.BucketBytes)
				}
			}
		})
	}
}

// TestForwardWait: the first forward's wait for a late all-gather in
// buckets (forwardWait), against what it must be in the cases it can be
// worked out by hand: no compute (the last bucket's arrival), one bucket
// (its arrival less the ops before its first), buckets that arrive before
// their ops run (nothing), and never more than the wait for every bucket
// before the first op.
func TestForwardWait(t *testing.T) {
	const lat, bw, k = 1e-5, 1e9, 4
	in := func(bs []bucketPart, b int) float64 { // bucket b's arrival, written out
		load, hop := 0.0, 0.0
		for _, x := range bs[:b+1] {
			load += lat + 4*float64(x.elems-x.least)/bw
			hop = max(hop, lat+4*float64(x.most)/bw)
		}
		return load + (k-2)*hop
	}
	three := []bucketPart{{1000, 0, 1000, 0, []int{0}}, {4000, 1000, 1000, 2, []int{1, 2}}, {2000, 500, 500, 3, []int{3}}}
	for _, c := range []struct {
		name string
		bs   []bucketPart
		f    []float64
		want float64
	}{
		{"no compute", three, []float64{0, 0, 0, 0}, in(three, 2)},
		{"one bucket", three[1:2], []float64{1e-4, 2e-4, 0, 5e-5}, in(three[1:2], 0) - 1e-4},
		{"in before needed", three, []float64{1, 1, 1, 1}, in(three, 0)},
		{"slow links", three, []float64{1e-6, 1e-6, 1e-6, 1e-6}, in(three, 2) - 3e-6},
	} {
		got := forwardWait(c.bs, c.f, ring{k, lat, bw})
		if math.Abs(got-max(0, c.want)) > 1e-12 {
			t.Errorf("%s: waits %g, want %g", c.name, got, c.want)
		}
		if all := in(c.bs, len(c.bs)-1); got > all+1e-12 {
			t.Errorf("%s: waits %g, more than every bucket's arrival %g", c.name, got, all)
		}
	}
}

// TestGatherBucketsPriced: the paper's MMT at 512 on 32 v100 plans as
// one data-parallel stage whose sharded all-gather runs late in buckets;
// its first forward waits for less than a tenth of the whole all-gather,
// and the plan is faster than with the whole all-gather late and than
// with it in the flush.
func TestGatherBucketsPriced(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Default)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Device: plan.Profiles["v100"], Devices: 32, Batch: 512}
	p, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := o.withDefaults(g.BatchSize())
	cm := newCostModel(g, &d)
	if len(p.Stages) != 1 || p.Stages[0].GatherBucketBytes == 0 {
		t.Fatalf("%d stages, the first's all-gather in buckets of %d: want one stage, bucketed", len(p.Stages), p.Stages[0].GatherBucketBytes)
	}
	whole := cm.gatherS(p, 0)
	if st := p.Stages[0]; st.GatherS >= whole/10 {
		t.Errorf("the forward waits %g s of a %g s all-gather", st.GatherS, whole)
	}
	for _, late := range []bool{true, false} {
		q := *p
		q.Stages = append([]plan.PlanStage(nil), p.Stages...)
		st := &q.Stages[0]
		st.GatherS, st.GatherBucketBytes = whole, 0
		if !late {
			st.GatherS, st.FlushS = 0, st.FlushS+whole
		}
		if err := q.Predict(); err != nil {
			t.Fatal(err)
		}
		if q.Predicted.IterationS <= p.Predicted.IterationS {
			t.Errorf("whole and late %v: %g s an iteration, in buckets %g", late, q.Predicted.IterationS, p.Predicted.IterationS)
		}
	}
}

// TestTwoLevelRingPrice: a ring in two levels is priced as its levels'
// halves written out (within the node L−1 steps of S/L, across it N−1
// of S/(L·N), each with its link's latency), and below one ring of all
// N·L over the links between nodes.
func TestTwoLevelRingPrice(t *testing.T) {
	d := plan.Profiles["v100"]
	for _, c := range [][2]int{{2, 2}, {2, 4}, {8, 4}, {3, 2}} {
		N, L := c[0], c[1]
		r := twoLevel(d, N, L)
		for _, S := range []float64{1, 1e6, 4e9} {
			want := float64(L-1)*(d.IntraLat+S/float64(L)/d.IntraBW) + float64(N-1)*(d.InterLat+S/float64(L*N)/d.InterBW)
			if got := r.half(S); math.Abs(got-want) > 1e-9*want {
				t.Errorf("%d nodes of %d, %g bytes: a half %g s, want %g", N, L, S, got, want)
			}
			if got, flat := r.allReduce(S), flatRing(d, N*L, true).allReduce(S); got >= flat {
				t.Errorf("%d nodes of %d, %g bytes: %g s, one ring %g", N, L, S, got, flat)
			}
		}
	}
}

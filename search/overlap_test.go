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
		for _, k := range []int{2, 3, 8, 32} {
			for _, inter := range []bool{false, true} {
				for _, params := range []int64{1, 1000, 1 << 20, 1 << 28} {
					ar := allReduce(cm.dev, 4*float64(params), k, inter)
					for _, window := range []float64{0, 1e-6, 1e-4, 1e-2, 1, 100} {
						got := cm.overlapAR(pl, params, k, inter, ar, window)
						if got > ar || got < max(0, ar-window) {
							t.Errorf("placement %d, %d params on %d (inter %v), window %g s: %g s, want in [%g, %g]", pl, params, k, inter, window, got, max(0, ar-window), ar)
						}
						if serial := off.overlapAR(pl, params, k, inter, ar, window); serial != ar {
							t.Errorf("NoOverlap prices %g s, want the ring's %g", serial, ar)
						}
						checked++
					}
				}
			}
		}
	}
	if cm.overlapAR(placeReplicated, 1<<28, 32, false, allReduce(cm.dev, 4<<28, 32, false), 1) >= allReduce(cm.dev, 4<<28, 32, false) {
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
					pl, k, inter := placementOf(st), len(st.Devices), spans(p, st.Devices)
					ar := allReduce(cm.dev, 4*float64(st.Params), k, inter)
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
						ar2 := cm.bucketsAR(pass, cm.bucketParts(pass, size, k), pl, k, inter)
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
// all-gather is the second half of its ring, out of its flush and into
// the start of its iteration (plan.Timing's Begin); the plan is faster
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
				if st.GatherS == 0 {
					continue
				}
				late++
				if want := cm.gatherS(p, s); math.Abs(st.GatherS-want) > 1e-12 {
					t.Errorf("stage %d gathers late for %g s, its ring's all-gather is %g", s, st.GatherS, want)
				}
				if tm.Begin == nil || tm.Begin[s] != st.BeginS+st.GatherS {
					t.Errorf("stage %d: the timing's begin %v, want %g + %g", s, tm.Begin, st.BeginS, st.GatherS)
				}
				b := &back.Stages[s]
				b.FlushS, b.GatherS = b.FlushS+b.GatherS, 0
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
				if st.GatherS != 0 || st.BucketBytes != 0 {
					t.Errorf("NoOverlap: stage %d gathers late (%g s) or in buckets (%d)", s, st.GatherS, st.BucketBytes)
				}
			}
		})
	}
}

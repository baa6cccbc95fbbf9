package search

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// valueRec is value with every stage free to recompute: a stage keeps its
// activations where that fits (it is never slower), else recomputes where
// that fits, else the plan is out of memory.
func valueRec(cm *costModel, stages []bfStage, b int64, mbs int, gpipe bool, cross func([]int) (int64, int64)) float64 {
	worst := 0.0
	for _, s := range stages {
		if int64(s.k) > b {
			return math.Inf(1)
		}
		blk := cm.newBlock(s.ops, cross)
		keep := cm.priceOps(s.ops, blk, s.k, b, mbs)
		inflight := min(mbs, s.depth)
		if gpipe {
			inflight = mbs
		}
		c := keep
		if c.memory(inflight) > cm.limit || c.memory(1) > cm.limit {
			c = recomputed(keep, blk)
			if c.memory(inflight) > cm.limit || c.memory(1) > cm.limit {
				return math.Inf(1)
			}
		}
		worst = math.Max(worst, math.Max(c.period, c.link))
	}
	return worst
}

func bestRec(cm *costModel, plans [][]bfStage, b int64, mbs int, gpipe bool, cross func([]int) (int64, int64)) float64 {
	v := math.Inf(1)
	for _, p := range plans {
		v = math.Min(v, valueRec(cm, p, b, mbs, gpipe, cross))
	}
	return v
}

// recomputeCases are the oracle's random DAGs with memory squeezed so that
// activations bind: the limit sits between what the whole graph's weights
// need and that plus a few micro-batches of every activation.
func recomputeCases(t *testing.T) []oracleCase {
	var cases []oracleCase
	for _, tc := range oracleCases(t) {
		var static, stash int64
		for i := 0; i < tc.g.NumOps(); i++ {
			static += tc.g.Cost(i).Params * 16
			stash += tc.g.Cost(i).StashBytes
		}
		tc.b, tc.mbs = 2, 8 // more in flight than the oracle's usual 4
		for _, eighths := range []int64{4, 8, 16, 32} {
			tc.o.MemoryLimit = static/int64(tc.k) + stash*tc.b*eighths/8
			cases = append(cases, tc)
		}
	}
	return cases
}

// TestRecomputeEqualsBruteForce: with recomputation allowed, the DP's
// optimum (gpp's graph space and spp's chains, 1F1B and GPipe) equals an
// enumeration of every plan of the same space with each stage keeping or
// recomputing, and its rebuilt plan recomputes only where keeping does not
// fit. Recomputation must lower the optimum in some cases, or the test
// proves nothing.
func TestRecomputeEqualsBruteForce(t *testing.T) {
	helped, feasible, mayHelp := 0, 0, 0
	for _, tc := range recomputeCases(t) {
		cm := newCostModel(tc.g, &tc.o)
		for _, gpipe := range []bool{false, true} {
			for _, chain := range []bool{false, true} {
				var sp *space
				var plans [][]bfStage
				cross := cm.boundary
				if chain {
					cross = liveCross(tc.g, (*dag.Tensor).Bytes)
					sp = newSpace(cm, chainTree(chainUnits(tc.g, 1000)), cross)
					plans = chainPlans(tc.g.Order(), tc.k)
				} else {
					sp = newSpace(cm, partition.Decompose(tc.g, 0).Root, cross)
					plans = treePlans(sp.root, tc.k)
				}
				d := newDP(sp, tc.k, tc.b, tc.mbs, gpipe)
				help := d.recHelp
				d.recFits()
				mayHelp += checkRecHelp(t, d, help)
				keep, ok := d.minT(tc.k)
				if !ok {
					keep = math.Inf(1)
				}
				d.allowRecompute()
				got, ok := d.minT(tc.k)
				if !ok {
					got = math.Inf(1)
				}
				want := bestRec(cm, plans, tc.b, tc.mbs, gpipe, cross)
				if !close(got, want) {
					t.Fatalf("seed %d (%d ops, %d devices, gpipe %v, chain %v): DP %v, brute force %v", tc.seed, tc.ops, tc.k, gpipe, chain, got, want)
				}
				if got > keep*(1+1e-12) {
					t.Fatalf("seed %d: recomputation allowed made the optimum worse: %v against %v", tc.seed, got, keep)
				}
				if got < keep {
					helped++
				}
				if ok {
					feasible++
					checkRecExtract(t, tc, cm, d, gpipe, cross, got)
				}
			}
		}
	}
	t.Logf("recomputation lowered the optimum in %d of %d feasible solves", helped, feasible)
	if helped < 20 {
		t.Errorf("recomputation helped in only %d solves: the memory squeeze does not bind", helped)
	}
	if mayHelp < 100 {
		t.Errorf("recomputeMayHelp said yes only %d times: recHelp is barely checked", mayHelp)
	}
}

// checkRecExtract: the DP's rebuilt plan binds at its T, each stage priced
// as the DP chose (recomputing only where keeping does not fit at its
// depth), and every stage fits in memory at that depth.
func checkRecExtract(t *testing.T, tc oracleCase, cm *costModel, d *dp, gpipe bool, cross func([]int) (int64, int64), T float64) {
	t.Helper()
	var plan []bfStage
	worst := 0.0
	for _, a := range d.extract(d.sp.root, tc.k) {
		ops := d.sp.blocks[a.block].ops
		plan = append(plan, bfStage{ops, a.k, a.depth, false})
		c := d.cost(a)
		inflight := min(tc.mbs, a.depth)
		if gpipe {
			inflight = tc.mbs
		}
		if c.memory(inflight) > cm.limit {
			t.Fatalf("seed %d: stage %v (recompute %v) needs %d bytes at %d in flight, over %d", tc.seed, ops, c.recompute, c.memory(inflight), inflight, cm.limit)
		}
		keep := d.keepCost(a.block, a.k)
		if c.recompute && keep.memory(inflight) <= cm.limit && math.Max(keep.period, keep.link) <= T {
			t.Fatalf("seed %d: stage %v recomputes where keeping fits", tc.seed, ops)
		}
		worst = math.Max(worst, math.Max(c.period, c.link))
	}
	if !close(worst, T) {
		t.Fatalf("seed %d: the rebuilt plan binds at %v, the DP at %v", tc.seed, worst, T)
	}
	if v := valueRec(cm, plan, tc.b, tc.mbs, gpipe, cross); !close(v, T) {
		t.Fatalf("seed %d: the brute force prices the rebuilt plan at %v, the DP at %v", tc.seed, v, T)
	}
}

// leastLimit is the least memory per device (to 1%) at which Search finds
// a plan of g with o, and that plan.
func leastLimit(t *testing.T, g *dag.Graph, o Options) (int64, *plan.Plan) {
	t.Helper()
	lo, hi := int64(1), int64(1)<<40
	var at *plan.Plan
	for hi-lo > hi/100 {
		mid := lo + (hi-lo)/2
		o.MemoryLimit = mid
		p, err := Search(g, o)
		var np *NoPlanError
		switch {
		case errors.As(err, &np):
			lo = mid
		case err != nil:
			t.Fatal(err)
		default:
			hi, at = mid, p
		}
	}
	return hi, at
}

// TestRecomputeFitsWhereKeepingDoesNot: a model that no plan fits keeping
// its activations gets one that recomputes, within the memory, from gpp and
// from spp; on 1F1B and GPipe.
func TestRecomputeFitsWhereKeepingDoesNot(t *testing.T) {
	g, err := models.Branchy(2, 4, 64) // narrow layers, wide micro-batches: activations outweigh weights
	if err != nil {
		t.Fatal(err)
	}
	for _, strategy := range []string{"gpp", "spp"} {
		for _, sched := range []string{"1f1b", "gpipe"} {
			t.Run(strategy+"/"+sched, func(t *testing.T) {
				// 1F1B holds fewer micro-batches the smaller they are: at
				// a forced size, the pipeline's depth is what binds
				o := Options{Device: plan.Profiles["v100"], Devices: 4, Batch: 4096, MicroBatch: 256, Strategy: strategy, Schedule: sched, Recompute: "off", OptimizerState: plan.StateReplicated}
				if sched == "gpipe" {
					o.MicroBatch = 0
				}
				keepLimit, _ := leastLimit(t, g, o)
				o.Recompute = "auto"
				recLimit, p := leastLimit(t, g, o)
				t.Logf("least memory per device: %d bytes keeping, %d recomputing", keepLimit, recLimit)
				if recLimit >= keepLimit {
					t.Fatalf("recomputation needs %d bytes, keeping %d: it fits nothing more", recLimit, keepLimit)
				}
				o.MemoryLimit = recLimit
				o.Recompute = "off"
				if _, err := Search(g, o); err == nil {
					t.Fatalf("keeping fits at %d bytes", recLimit)
				}
				if !p.Recomputes() || !p.Predicted.Feasible || p.Predicted.PeakMemory > recLimit {
					t.Fatalf("the plan at %d bytes: recomputes %v, feasible %v, peak %d", recLimit, p.Recomputes(), p.Predicted.Feasible, p.Predicted.PeakMemory)
				}
				back, err := plan.DecodePlan(p.Encode())
				if err != nil {
					t.Fatal(err)
				}
				if !back.Recomputes() {
					t.Fatal("the plan file lost which stages recompute")
				}
			})
		}
	}
}

// TestRecomputeLeavesPlansAlone: where memory does not bind, auto's plan is
// off's byte for byte (but for the search's wall time), with no recompute
// field; "all" makes every stage recompute and is slower.
func TestRecomputeLeavesPlansAlone(t *testing.T) {
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		e, _ := models.Lookup(name)
		g, err := e.Build(e.Small)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			o := Options{Device: plan.Profiles["v100"], Devices: 4, Batch: 64}
			enc := func(r string) (*plan.Plan, []byte) {
				o.Recompute = r
				p, err := Search(g, o)
				if err != nil {
					t.Fatal(err)
				}
				p.Search.Seconds = 0
				return p, p.Encode()
			}
			_, off := enc("off")
			pa, auto := enc("auto")
			if !bytes.Equal(off, auto) {
				t.Fatalf("auto's plan differs from off's where memory does not bind")
			}
			if pa.Recomputes() || bytes.Contains(auto, []byte(`"recompute"`)) {
				t.Fatal("a plan that recomputes nothing names the field")
			}
			all, _ := enc("all")
			for _, s := range all.Stages {
				if !s.Recompute {
					t.Fatalf("stage %d keeps its activations under --recompute all", s.ID)
				}
			}
			if all.Predicted.SamplesPerS >= pa.Predicted.SamplesPerS {
				t.Fatalf("recomputing every stage (%.4g samples/s) is not slower than keeping (%.4g)", all.Predicted.SamplesPerS, pa.Predicted.SamplesPerS)
			}
		})
	}
}

// TestRecomputeAllExact: spp-exact, told every stage recomputes, plans so,
// and the DOT rendering says which stages do.
func TestRecomputeAllExact(t *testing.T) {
	g, err := models.Branchy(2, 2, 64)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 3, Strategy: "spp-exact", Recompute: "all"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Stages {
		if !s.Recompute {
			t.Fatalf("stage %d keeps its activations", s.ID)
		}
	}
	if n := bytes.Count(p.DOT(), []byte("recomputes")); n != len(p.Stages) {
		t.Fatalf("the DOT rendering names %d recomputing stages of %d", n, len(p.Stages))
	}
}

// TestRecomputeOptions: unknown choices and zb with all are refused, naming the flag.
func TestRecomputeOptions(t *testing.T) {
	g, _ := models.Branchy(2, 2, 8)
	for _, o := range []Options{{Recompute: "sometimes"}, {Recompute: "all", Schedule: "zb"}} {
		o.Device, o.Devices = plan.Profiles["v100"], 2
		_, err := Search(g, o)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Flag != "recompute" {
			t.Fatalf("%+v: %v, want an error naming --recompute", o, err)
		}
	}
}

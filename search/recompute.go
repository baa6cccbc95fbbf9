package search

import (
	"math"

	"github.com/graphpipe/graphpipe/plan"
)

// Activation recomputation (see doc.go): a stage may keep only the tensors
// it reads from outside for each micro-batch in flight and rerun its
// forward at the start of each backward. The DP then has two variants of
// every candidate stage, and a stage fits if either does (fits); a
// solution's stage recomputes only where keeping does not fit (keeps).

// allowRecompute lets the DP choose, per stage, to recompute.
func (d *dp) allowRecompute() {
	d.rfit = d.recFits()
	d.ts = nil       // the recomputing stages' times are candidates too
	d.solved = false // what the memo holds was solved without them
}

// keeps says whether block id on k devices, depth stages from the end, fits
// at T keeping its activations.
func (d *dp) keeps(id, k, depth int) bool {
	e := &d.fit[d.fitIndex(id, k)]
	return e.t <= d.T && d.inflight(depth) <= e.maxIn
}

// cost is the price of a solution's stage: recomputing (or its state
// spilled, where that is the DP's second variant: spillAt) where the DP
// may choose that and keeping does not fit.
func (d *dp) cost(a assignment) stageCost {
	c := d.keepCost(a.block, a.k)
	if d.rfit != nil && !d.keeps(a.block, a.k, a.depth) {
		if d.alt == altSpill {
			return d.spillCost(a.block, a.k)
		}
		return recomputed(c, d.sp.blocks[a.block])
	}
	return c
}

// recomputeMayHelp says whether letting stages recompute could find a plan
// below T (+Inf: where keeping finds none on every device): only if some
// stage meets T recomputing and then holds more micro-batches in flight
// than it can keeping, counted up to the most the DP ever asks of it. When
// none does, the DP's answers below T are the same either way, and the
// search skips the second solve (the plans where memory does not bind stay
// as they were).
func (d *dp) recomputeMayHelp(T float64) bool {
	if d.tu.eagerRecFit { // the scan over recFit that recHelp answers
		most := d.mbs
		if !d.gpipe {
			most = min(d.mbs, d.D)
		}
		for at, r := range d.recFits() {
			if r.t < T && min(r.maxIn, most) > min(d.fit[at].maxIn, most) {
				return true
			}
		}
		return false
	}
	return d.recHelp < T
}

// recomputeAt solves d's micro-batch again with recomputation allowed,
// where it may help (recomputeMayHelp), and puts that plan first in out when
// it reaches more devices or a shorter bottleneck than keeping did (keep:
// d's least bottleneck) and simulates faster.
func (pl *planner) recomputeAt(d *dp, keep least, out *sized) error {
	T := math.Inf(1)
	if keep.ok && keep.k == d.devs.full {
		T = keep.T
	}
	if !d.recomputeMayHelp(T) {
		return nil
	}
	r := &dp{prices: d.prices}
	r.allowRecompute()
	if keep.ok && keep.k == d.devs.full && d.tu.hintsOn {
		r.hint = keep.T // keeping's plan fits where stages may also recompute
	}
	k2, T2, ok2 := r.minTOnMost(r.D)
	if !ok2 || keep.ok && k2 == keep.k && T2 >= keep.T {
		return nil
	}
	p, err := pl.assemble(r, k2)
	if err != nil || !p.Predicted.Feasible || len(out.plans) > 0 && !better(p, out.plans[0]) {
		return err
	}
	out.plans = append([]*plan.Plan{p}, out.plans...)
	out.k, out.T, out.at, out.rec = k2, T2, r.depth(k2), true
	return nil
}

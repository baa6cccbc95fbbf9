package search

import (
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// planner is one strategy's DP over one search space, with what its plans
// are built from: the loop over micro-batch sizes below runs it.
type planner struct {
	g     *dag.Graph
	o     *Options
	cm    *costModel
	sp    *space
	chain bool   // spp's space: a plan's schedule is the chain's
	who   string // the strategy its plans are offered as
	hints *hints // where the least bottlenecks found so far lie (hints.go)
}

// dp is the planner's DP at micro-batch b.
func (pl *planner) dp(b int64) *dp {
	mbs, gpipe := int(pl.o.Batch/b), pl.o.sched.AllForwardsFirst
	if c := pl.o.Cluster; c != nil {
		var devices []int
		for _, k := range c.Kinds {
			devices = append(devices, k.Devices)
		}
		return &dp{prices: newKindPrices(pl.cm.kinds, devices, pl.sp, b, mbs, gpipe)}
	}
	return &dp{prices: newPrices(pl.cm, pl.sp, pl.o.Devices, b, mbs, gpipe)}
}

// assemble builds the plan of d's current solution on k devices.
func (pl *planner) assemble(d *dp, k int) (*plan.Plan, error) {
	var in []stageIn
	for _, a := range d.extract(d.sp.root, k) {
		t, n := d.devs.part(a.k)
		in = append(in, stageIn{ops: d.sp.blocks[a.block].ops, k: n * d.devs.g[t], kind: t, cost: d.cost(a), blk: d.sp.blocks[a.block]})
	}
	return assemble(pl.g, pl.o, pl.cm, d.b, in, pl.chain)
}

// plans runs the DP at every micro-batch size, in parallel, and offers each
// size's plans in ascending order of size, so the outcome is deterministic.
// Then, at the sizes whose plan could still be beaten by a shallower one
// (frontier), it follows the DP's frontier and offers what it finds.
func (pl *planner) plans(consider func(*plan.Plan, string)) error {
	sizes := pl.o.microBatches()
	first := make([]sized, len(sizes))
	keep := keeper{most: pl.cm.tu.frontierSizes}
	if err := each(len(sizes), func(i int) (err error) {
		first[i], err = pl.planAt(sizes[i])
		keep.offer(first, i)
		return err
	}); err != nil {
		return err
	}
	best := math.Inf(1)
	for _, f := range first {
		for _, p := range f.plans {
			consider(p, pl.who)
			best = math.Min(best, p.Predicted.IterationS)
		}
	}
	// the frontier at the tuning's frontierSizes sizes with the fastest
	// plans, where a shallower plan could still beat the best
	var order []int
	for i, f := range first {
		if f.gain > 0 && f.plans[0].Predicted.IterationS < best*f.gain {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return first[order[a]].plans[0].Predicted.IterationS < first[order[b]].plans[0].Predicted.IterationS
	})
	order = order[:min(len(order), keep.most)]
	more := make([][]*plan.Plan, len(sizes))
	if err := each(len(order), func(j int) (err error) {
		i := order[j]
		more[i], err = pl.frontier(sizes[i], first[i], best)
		return err
	}); err != nil {
		return err
	}
	for _, ps := range more {
		for _, p := range ps {
			consider(p, pl.who)
		}
	}
	return nil
}

// keeper keeps the prices of the sizes the frontier may follow, the
// (most) sizes whose first plans are fastest among those with a gain
// (what plans' order ranks first, but for its filter on the best plan of
// all, known only at the end): the DP at those sizes is not priced again.
// Only the kept sizes' prices stay in memory; a size whose prices were
// dropped is priced again if the frontier follows it after all.
type keeper struct {
	most int        // the sizes the frontier follows (tuning.frontierSizes)
	mu   sync.Mutex // guards kept
	kept []int      // indices into the sizes, fastest first
}

// offer ranks size i of first, which planAt has just filled.
func (k *keeper) offer(first []sized, i int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f := &first[i]
	if f.gain <= 0 || f.pr == nil {
		f.pr = nil
		return
	}
	ahead := func(a, b int) bool { // a before b, as plans orders them
		ta, tb := first[a].plans[0].Predicted.IterationS, first[b].plans[0].Predicted.IterationS
		return ta < tb || ta == tb && a < b
	}
	j := len(k.kept)
	for j > 0 && ahead(i, k.kept[j-1]) {
		j--
	}
	k.kept = slices.Insert(k.kept, j, i)
	if len(k.kept) > k.most {
		first[k.kept[k.most]].pr = nil
		k.kept = k.kept[:k.most]
	}
}

// each runs f(0..n-1) on every core and returns the first error by index.
func each(n int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// least is where the DP found its least bottleneck (minTOnMost): on k
// devices (groups) at T; ok is false when nothing fits.
type least struct {
	k  int
	T  float64
	ok bool
}

// sized is what planAt found at one micro-batch size: the DP's plan first
// (when there is one), and gain > 0, the most a shallower plan at this size
// could shorten the DP's (as a factor), when that is worth looking for.
type sized struct {
	plans []*plan.Plan
	gain  float64
	k, at int     // the DP's devices and depth
	T     float64 // the DP's least bottleneck (a candidate)
	rec   bool    // the DP's plan is the one with recomputation allowed (recomputeAt), or spilling (spillAt: spill)
	spill bool    // the DP's plan is the one with spilling allowed (spillAt); pr then prices it
	pr    *prices // the DP's prices, while the frontier may want them (keeper)
}

// planAt returns, at micro-batch b, the DP's plan (the least bottleneck time
// per micro-batch, then the shallowest pipeline, on as many devices as can
// be used) and the whole model as one data-parallel stage when that fits.
// The DP's objective ignores how many micro-batches an iteration has: with
// few of them, a deeper pipeline's fill and drain can cost more than its
// shorter bottleneck saves, and pure data parallelism wins. The simulator
// judges between them.
func (pl *planner) planAt(b int64) (sized, error) {
	var out sized
	d := pl.dp(b)
	var keep least
	if d.tu.hintsOn {
		d.hint = pl.hints.guess(pl.sp, pl.o.Devices, b)
	}
	keep.k, keep.T, keep.ok = d.minTOnMost(d.devs.full)
	if keep.ok && keep.k == d.devs.full {
		pl.hints.found(pl.sp, pl.o.Devices, b, keep.T)
	}
	if keep.ok {
		p, err := pl.assemble(d, keep.k)
		if err != nil {
			return out, err
		}
		if p.Predicted.Feasible {
			out.plans = append(out.plans, p)
			out.k, out.T, out.at = keep.k, keep.T, d.depth(keep.k)
		}
	}
	if pl.o.mayRecompute() {
		if err := pl.recomputeAt(d, keep, &out); err != nil {
			return out, err
		}
	}
	spilled, err := pl.spillAt(d, keep, &out)
	if err != nil {
		return out, err
	}
	if len(out.plans) > 0 && out.at > 1 {
		out.gain = d.gain(out.at)
	}
	if len(out.plans) == 0 || len(out.plans[0].Stages) > 1 {
		p, err := pl.dataParallel(d)
		if err != nil {
			return out, err
		}
		if p != nil && p.Predicted.Feasible {
			out.plans = append(out.plans, p)
		}
		if p, err = pl.branchParallel(d); err != nil {
			return out, err
		}
		if p != nil {
			out.plans = append(out.plans, p)
		}
	}
	if len(out.plans) == 0 || len(out.plans[0].Stages) == 1 {
		out.gain = 0
	}
	d.noteGroups(out.plans)
	out.pr = d.prices
	if out.spill {
		out.pr = spilled
	}
	return out, nil
}

// dataParallel is the whole model as one stage on every device d may use,
// or nil where that does not fit with one micro-batch in flight.
func (pl *planner) dataParallel(d *dp) (*plan.Plan, error) {
	id, k := pl.sp.root.whole(), d.kmax
	if k < 1 || d.devs.kinds() > 1 { // several kinds: a search on each kind's alone tries it
		return nil, nil
	}
	c := d.keepCost(id, k)
	if c.memory(d.inflight(1)) > pl.cm.limit {
		return nil, nil
	}
	blk := pl.sp.blocks[id]
	return assemble(pl.g, pl.o, pl.cm, d.b, []stageIn{{ops: blk.ops, k: k * d.g, cost: c, blk: blk}}, pl.chain)
}

// frontier samples the DP's frontier at micro-batch b past its least
// bottleneck (see doc.go): up to the tuning's shallowerPlans plans, each
// the shallowest at one of frontierProbes bottlenecks up to what can still
// pay (f.gain), at the least bottleneck of its depth.
func (pl *planner) frontier(b int64, f sized, best float64) ([]*plan.Plan, error) {
	var out []*plan.Plan
	tu := &pl.cm.tu
	if tu.shallowerPlans == 0 {
		return nil, nil
	}
	d := &dp{prices: f.pr} // planAt's, where kept
	if f.pr == nil {
		d = pl.dp(b)
		if f.spill {
			d = &dp{prices: d.spilled()}
		}
	}
	if f.rec {
		d.allowRecompute()
	}
	d.capped, d.budget = true, tu.frontierSolves
	// probe the frontier at bottlenecks growing geometrically from the DP's
	// T0 to T0·gain; where the pipeline can be shallower, offer the
	// shallowest plan at the least T of its depth. Past best/M no plan
	// can beat the best: its slowest stage alone would take longer.
	k, depth, T := f.k, f.at, f.T
	reach := math.Min(f.gain, best/float64(d.mbs)/T)
	if reach <= 1 {
		return nil, nil
	}
	step := math.Pow(reach, 1/float64(tu.frontierProbes))
	i := 0
	if tu.frontierWindow { // the candidates from T0 to the last probe, T0 first: the probes' bisections ask for no others
		last := T
		for range tu.frontierProbes {
			last *= step
		}
		d.ts = d.candidatesIn(T, last)
	} else {
		d.ts = d.candidates()
		i = sort.SearchFloat64s(d.ts, T) // T is a candidate
	}
	for j := 0; j < tu.frontierProbes && depth > 1 && len(out) < tu.shallowerPlans; j++ {
		T *= step
		shallowest, ok := d.depthAt(k, T)
		if !ok {
			break // out of budget
		}
		if shallowest >= depth {
			continue
		}
		_, at, ok := d.minTBelow(k, i+1, shallowest+1, T)
		if !ok {
			break
		}
		i, depth = at, d.depth(k)
		p, err := pl.assemble(d, k)
		if err != nil {
			return nil, err
		}
		if p.Predicted.Feasible {
			out = append(out, p)
		}
	}
	d.noteGroups(out)
	return out, nil
}

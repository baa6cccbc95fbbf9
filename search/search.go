package search

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// Search plans g under o. It returns a NoPlanError when nothing fits and an
// OptionError for options it cannot use. The search is deterministic; the
// wall time it took is reported in the plan, not used.
func Search(g *dag.Graph, o Options) (*plan.Plan, error) {
	start := time.Now()
	o, err := o.withDefaults(g.BatchSize())
	if err != nil {
		return nil, err
	}
	if o.OpTimes != nil {
		if err := o.OpTimes.Validate(); err != nil {
			return nil, &OptionError{"op-times", err.Error()}
		}
		if _, err := resolveOpTimes(o.OpTimes, g); err != nil {
			return nil, err
		}
	}
	best, err := searchOn(g, o)
	var np *NoPlanError
	if errors.As(err, &np) {
		best, o, err = smallerMicroBatch(g, o, err)
	}
	if err != nil {
		return nil, err
	}
	// on half the devices, and half again: past some count more devices
	// only add all-reduce and thin each one's share of the batch, and the
	// DP uses every device it can; while the best plan is slower than n
	// devices' ideal (every op at the device's best efficiency, never idle),
	// which no plan on n beats
	candidates := best.Search.Candidates
	t := g.Total()
	perSample := t.FwdFLOPs + t.BwdFLOPs()
	for sub := o; fewerDevices && sub.Devices >= 4; {
		sub.Devices /= 2
		ideal := float64(sub.Devices) * o.Device.PeakFLOPs * o.Device.MaxEff / perSample
		// measured op times are no FLOP rate: no ideal bounds them
		if o.OpTimes == nil && perSample > 0 && best.Predicted.SamplesPerS >= ideal {
			break
		}
		q, err := searchOn(g, sub)
		if err != nil {
			break // nothing fits on fewer
		}
		candidates += q.Search.Candidates
		seq := betterBaseline(best.Search.Sequential, q.Search.Sequential)
		if better(q, best) {
			q.Devices = o.Devices
			q.Search.Notes = append(q.Search.Notes, fmt.Sprintf("uses %d of the %d devices: more made no plan faster", sub.Devices, o.Devices))
			best = q
		}
		best.Search.Sequential = seq
	}
	best.Search.Seconds = time.Since(start).Seconds()
	best.Search.Candidates = candidates
	if o.OpTimes != nil {
		best.Search.Notes = append(best.Search.Notes, fmt.Sprintf("op times measured on %s", o.OpTimes.Device))
	}
	return best, nil
}

// smallerMicroBatch is Search's answer when nothing fits at the sizes the
// planner tries first (at most MaxMicroBatches micro-batches per iteration):
// the plan at the largest smaller size that fits, with options forcing that
// size, or the first failure when none does.
//
// A plan that fits only by recomputing may be slower than one that keeps
// its activations at a smaller size: while the recompute choice is the
// planner's, smaller sizes are searched on until a plan recomputes nothing,
// and the fastest is kept.
func smallerMicroBatch(g *dag.Graph, o Options, failed error) (*plan.Plan, Options, error) {
	var best *plan.Plan
	bestO, first := o, true
	for _, b := range o.smallerMicroBatches() {
		forced := o
		forced.MicroBatch = b
		p, err := searchOn(g, forced)
		var np *NoPlanError
		if errors.As(err, &np) {
			continue
		}
		if err != nil {
			return nil, o, err
		}
		if best == nil || better(p, best) {
			what := "is the largest that does"
			if !first {
				what = "is faster than the larger sizes that fit only by recomputing"
			}
			p.Search.Notes = append(p.Search.Notes, fmt.Sprintf("no plan fits with at most %d micro-batches per iteration: micro-batch %d (%d per iteration) %s",
				MaxMicroBatches, b, o.Batch/b, what))
			best, bestO = p, forced
		}
		if first = false; o.Recompute != "auto" || !p.Recomputes() {
			break
		}
	}
	if best == nil {
		return nil, o, failed
	}
	return best, bestO, nil
}

// fewerDevices turns Search's tries on fewer devices on (tests turn it off).
var fewerDevices = true

// betterBaseline is the faster of two sequential summaries, by better's
// order (the first on ties); nil counts as none.
func betterBaseline(a, b *plan.Baseline) *plan.Baseline {
	if a == nil || b != nil && ahead(b.IterationS, b.Depth, b.Stages, a.IterationS, a.Depth, a.Stages) {
		return b
	}
	return a
}

// searchOn is Search on exactly o's devices at most.
func searchOn(g *dag.Graph, o Options) (*plan.Plan, error) {
	start := time.Now()
	cm := newCostModel(g, &o)
	// the fastest few of each planner's candidates, whose schedules are tuned
	// at the end (tune): the same ones whichever strategy offers them, so gpp,
	// which also offers spp's, is never worse than spp; only those close
	// enough to the fastest that tuning could make them the fastest
	var families []string
	tops := map[string][]*plan.Plan{}
	candidates := 0
	consider := func(p *plan.Plan, who string) {
		candidates++
		p.Search.Chosen = who
		p.SetSchedule(nil) // a kept plan's lists are built again when needed: they can be large
		if _, ok := tops[who]; !ok {
			families = append(families, who)
		}
		tops[who] = keepFastest(tops[who], p, tuneTop)
	}
	var notes []string
	switch o.Strategy {
	case "gpp":
		tree := partition.Decompose(g, o.MaxSeries)
		if tree.Cuts > 0 {
			notes = append(notes, fmt.Sprintf("the graph is not series-parallel: %d cut(s) made it so", tree.Cuts))
		}
		if err := plans(g, &o, cm, newSpace(cm, tree.Root, cm.boundary), false, "gpp", consider); err != nil {
			return nil, err
		}
		if err := plans(g, &o, cm, chainSpace(g, &o, cm), true, "spp", consider); err != nil {
			return nil, err
		}
	case "spp":
		if err := plans(g, &o, cm, chainSpace(g, &o, cm), true, "spp", consider); err != nil {
			return nil, err
		}
	case "spp-exact":
		if err := exactPlans(g, &o, cm, consider); err != nil {
			return nil, err
		}
		// spp's plans lie in spp-exact's space; the simulator may prefer one
		if err := plans(g, &o, cm, chainSpace(g, &o, cm), true, "spp", consider); err != nil {
			return nil, err
		}
	}
	var best, seq *plan.Plan
	for _, who := range families {
		for _, p := range tops[who] {
			if p.Predicted.IterationS > tuneWithin*tops[who][0].Predicted.IterationS {
				break
			}
			if err := tune(p); err != nil {
				return nil, err
			}
			if best == nil || better(p, best) {
				best = p
			}
			if who == "spp" && (seq == nil || better(p, seq)) {
				seq = p
			}
		}
	}
	if best == nil {
		return nil, noPlan(g, &o, cm)
	}
	if o.Strategy == "gpp" && seq != nil {
		best.Search.Sequential = &plan.Baseline{SamplesPerS: seq.Predicted.SamplesPerS, IterationS: seq.Predicted.IterationS,
			Stages: len(seq.Stages), Depth: seq.Predicted.Depth, MicroBatch: seq.MicroBatch}
	}
	best.FillActions() // tune gave every plan it saw its lists again
	best.Search.Seconds = time.Since(start).Seconds()
	best.Search.Candidates = candidates
	best.Search.Notes = append(notes, best.Search.Notes...)
	return best, nil
}

// Tuning takes each planner's fastest tuneTop plans that are within
// tuneWithin of its fastest (it has shortened plans by up to 7.5%).
const (
	tuneTop    = 8
	tuneWithin = 1.10
)

// keepFastest inserts p into top, fastest first (better's order; the earlier
// offered first on ties), keeping at most n.
func keepFastest(top []*plan.Plan, p *plan.Plan, n int) []*plan.Plan {
	i := len(top)
	for i > 0 && better(p, top[i-1]) {
		i--
	}
	if i >= n {
		return top
	}
	top = append(top[:i], append([]*plan.Plan{p}, top[i:]...)...)
	return top[:min(len(top), n)]
}

// better prefers the faster iteration, then the shallower pipeline, then fewer stages.
func better(a, b *plan.Plan) bool {
	return ahead(a.Predicted.IterationS, a.Predicted.Depth, len(a.Stages), b.Predicted.IterationS, b.Predicted.Depth, len(b.Stages))
}

// ahead is better's order on (iteration, depth, stages).
func ahead(ai float64, ad, as int, bi float64, bd, bs int) bool {
	if ai != bi {
		return ai < bi
	}
	if ad != bd {
		return ad < bd
	}
	return as < bs
}

func chainSpace(g *dag.Graph, o *Options, cm *costModel) *space {
	return newSpace(cm, chainTree(chainUnits(g, o.MaxUnits)), liveCross(g))
}

// plans runs the DP at every micro-batch size, in parallel, and offers each
// size's plans in ascending order of size, so the outcome is deterministic.
// Then, at the sizes whose plan could still be beaten by a shallower one
// (frontier), it follows the DP's frontier and offers what it finds.
func plans(g *dag.Graph, o *Options, cm *costModel, sp *space, chain bool, who string, consider func(*plan.Plan, string)) error {
	sizes := o.microBatches()
	first := make([]sized, len(sizes))
	if err := each(len(sizes), func(i int) (err error) {
		first[i], err = planAt(g, o, cm, sp, chain, sizes[i])
		return err
	}); err != nil {
		return err
	}
	best := math.Inf(1)
	for _, f := range first {
		for _, p := range f.plans {
			consider(p, who)
			best = math.Min(best, p.Predicted.IterationS)
		}
	}
	// the frontier at the frontierSizes sizes with the fastest plans, where
	// a shallower plan could still beat the best
	var order []int
	for i, f := range first {
		if f.gain > 0 && f.plans[0].Predicted.IterationS < best*f.gain {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return first[order[a]].plans[0].Predicted.IterationS < first[order[b]].plans[0].Predicted.IterationS
	})
	order = order[:min(len(order), frontierSizes)]
	more := make([][]*plan.Plan, len(sizes))
	if err := each(len(order), func(j int) (err error) {
		i := order[j]
		more[i], err = frontier(g, o, cm, sp, chain, sizes[i], first[i], best)
		return err
	}); err != nil {
		return err
	}
	for _, ps := range more {
		for _, p := range ps {
			consider(p, who)
		}
	}
	return nil
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

// sized is what planAt found at one micro-batch size: the DP's plan first
// (when there is one), and gain > 0, the most a shallower plan at this size
// could shorten the DP's (as a factor), when that is worth looking for.
type sized struct {
	plans    []*plan.Plan
	gain     float64
	k, i, at int  // the DP's devices, candidate index and depth
	rec      bool // the DP's plan is the one with recomputation allowed (recomputeAt)
}

// planAt returns, at micro-batch b, the DP's plan (the least bottleneck time
// per micro-batch, then the shallowest pipeline, on as many devices as can
// be used) and the whole model as one data-parallel stage when that fits.
// The DP's objective ignores how many micro-batches an iteration has: with
// few of them, a deeper pipeline's fill and drain can cost more than its
// shorter bottleneck saves, and pure data parallelism wins. The simulator
// judges between them.
func planAt(g *dag.Graph, o *Options, cm *costModel, sp *space, chain bool, b int64) (sized, error) {
	var out sized
	d := newDP(sp, o.Devices, b, int(o.Batch/b), o.Schedule == "gpipe")
	k, i, ok := d.minTOnMost(d.D)
	if ok {
		p, err := d.assemble(g, o, cm, chain, k)
		if err != nil {
			return out, err
		}
		if p.Predicted.Feasible {
			out.plans = append(out.plans, p)
			out.k, out.i, out.at = k, i, d.depth(k)
		}
	}
	if o.mayRecompute() {
		if err := recomputeAt(g, o, cm, chain, d, k, i, ok, &out); err != nil {
			return out, err
		}
	}
	if len(out.plans) > 0 && out.at > 1 {
		out.gain = d.gain(out.at)
	}
	id, k := sp.root.whole(), d.kmax
	if c := &d.costs[id][k]; k >= 1 && c.memory(d.inflight(1)) <= cm.limit && (len(out.plans) == 0 || len(out.plans[0].Stages) > 1) {
		p, err := assemble(g, o, cm, b, []stageIn{{ops: sp.blocks[id].ops, k: k * d.g, cost: *c, blk: sp.blocks[id]}}, chain)
		if err != nil {
			return out, err
		}
		if p.Predicted.Feasible {
			out.plans = append(out.plans, p)
		}
	}
	if len(out.plans) == 0 || len(out.plans[0].Stages) == 1 {
		out.gain = 0
	}
	d.noteGroups(out.plans)
	return out, nil
}

// noteGroups says, in each plan's notes, when the DP counted devices in groups.
func (d *dp) noteGroups(plans []*plan.Plan) {
	if d.g == 1 {
		return
	}
	for _, p := range plans {
		p.Search.Notes = append(p.Search.Notes, fmt.Sprintf("devices planned in groups of %d (%d groups): past %d devices every stage takes whole groups", d.g, d.D, maxDPDevices))
	}
}

// frontier samples the DP's frontier at micro-batch b past its least
// bottleneck (see doc.go): up to shallowerPlans plans, each the shallowest
// at one of frontierProbes bottlenecks up to what can still pay (f.gain), at
// the least bottleneck of its depth.
func frontier(g *dag.Graph, o *Options, cm *costModel, sp *space, chain bool, b int64, f sized, best float64) ([]*plan.Plan, error) {
	var out []*plan.Plan
	if shallowerPlans == 0 {
		return nil, nil
	}
	d := newDP(sp, o.Devices, b, int(o.Batch/b), o.Schedule == "gpipe")
	if f.rec {
		d.allowRecompute()
	}
	d.ts = d.candidates()
	d.capped, d.budget = true, frontierSolves
	// probe the frontier at bottlenecks growing geometrically from the DP's
	// T0 to T0·gain; where the pipeline can be shallower, offer the
	// shallowest plan at the least T of its depth. Past best/M no plan
	// can beat the best: its slowest stage alone would take longer.
	k, i, depth, T := f.k, f.i, f.at, d.ts[f.i]
	reach := math.Min(f.gain, best/float64(d.mbs)/T)
	if reach <= 1 {
		return nil, nil
	}
	step := math.Pow(reach, 1/float64(frontierProbes))
	for j := 0; j < frontierProbes && depth > 1 && len(out) < shallowerPlans; j++ {
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
		p, err := d.assemble(g, o, cm, chain, k)
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

// shallowerPlans is how many plans past the least bottleneck frontier
// offers at each micro-batch size, at the frontierSizes most promising, from
// frontierProbes probes in at most frontierSolves solves of the DP each (the
// DP on a 1003-op graph over 64 devices takes tens of milliseconds a solve).
// Variables, so that tests can turn the frontier off.
var (
	shallowerPlans = 3
	frontierSizes  = 2
	frontierSolves = 12
	frontierProbes = 6
)

// minTOnMost solves at the least bottleneck on the most devices (up to n)
// that have a plan, and returns that count and the candidate's index.
func (d *dp) minTOnMost(n int) (k, i int, ok bool) {
	for k := n; k >= 1; k-- {
		if _, i, ok := d.minTBelow(k, 0, inf, math.Inf(1)); ok {
			return k, i, true
		}
	}
	return 0, 0, false
}

// gain bounds what a shallower pipeline could save over one of the given
// depth at the DP's bottleneck: a pipeline of depth δ over M micro-batches
// takes about M + δ − 1 bottleneck periods, so one of depth 1 at most
// (M + δ − 1)/M fewer; half as much again allows for the estimate.
func (d *dp) gain(depth int) float64 {
	return 1 + 1.5*float64(depth-1)/float64(d.mbs)
}

// assemble builds the plan of the DP's current solution on k devices.
func (d *dp) assemble(g *dag.Graph, o *Options, cm *costModel, chain bool, k int) (*plan.Plan, error) {
	var in []stageIn
	for _, a := range d.extract(d.sp.root, k) {
		in = append(in, stageIn{ops: d.sp.blocks[a.block].ops, k: a.k * d.g, cost: d.cost(a), blk: d.sp.blocks[a.block]})
	}
	return assemble(g, o, cm, d.b, in, chain)
}

// noPlan explains which limit failed.
func noPlan(g *dag.Graph, o *Options, cm *costModel) error {
	var total, biggest int64
	name := ""
	for i := 0; i < g.NumOps(); i++ {
		need := cm.static(g.Cost(i).Params) + 2*g.Cost(i).OutBytes
		total += cm.static(g.Cost(i).Params)
		if need > biggest {
			biggest, name = need, g.Op(i).Name
		}
	}
	gb := func(b int64) string { return fmt.Sprintf("%.3g GB", float64(b)/1e9) }
	if biggest > o.MemoryLimit {
		return &NoPlanError{fmt.Sprintf("memory: op %q alone needs %s for its weights, gradients and optimizer state, over the %s a device has",
			name, gb(biggest), gb(o.MemoryLimit))}
	}
	at := "at any micro-batch size"
	if o.MicroBatch > 0 {
		at = fmt.Sprintf("at micro-batch %d", o.MicroBatch)
	} else if o.Batch > plan.MicroBatchLimit {
		at = fmt.Sprintf("at any micro-batch size that makes at most %d micro-batches per iteration (the most a plan may have)", plan.MicroBatchLimit)
	}
	return &NoPlanError{fmt.Sprintf("memory: no %s plan of %q on %d devices fits in %s per device %s (weights, gradients and optimizer state take %s in all, %s per device if split evenly)",
		o.Strategy, g.Name(), o.Devices, gb(o.MemoryLimit), at, gb(total), gb(total/int64(o.Devices)))}
}

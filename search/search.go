package search

import (
	"errors"
	"fmt"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// Search plans g under o. It returns a NoPlanError when nothing fits and an
// OptionError for options it cannot use. The search is deterministic; the
// wall time it took is reported in the plan, not used.
func Search(g *dag.Graph, o Options) (*plan.Plan, error) {
	return searchTuned(g, o, defaultTuning())
}

// searchTuned is Search run as tu says (tests turn its speedups off).
func searchTuned(g *dag.Graph, o Options, tu tuning) (*plan.Plan, error) {
	if o.Schedule == AutoAsync {
		return searchAsync(g, o, tu)
	}
	start := time.Now()
	o, err := o.withDefaults(g.BatchSize())
	if err != nil {
		return nil, err
	}
	if err := checkNoFlush(g, o); err != nil {
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
	sp := &spaces{tu: tu}
	if o.Cluster != nil {
		return sp.searchKinds(g, o, start)
	}
	return sp.search(g, o, start)
}

// search is Search on devices of one kind, o with its defaults.
func (sp *spaces) search(g *dag.Graph, o Options, start time.Time) (*plan.Plan, error) {
	if err := refuse(g, &o); err != nil && sp.tu.refuseFirst {
		return nil, err
	}
	best, err := sp.searchOn(g, o)
	var np *NoPlanError
	if errors.As(err, &np) {
		best, o, err = sp.smallerMicroBatch(g, o, err)
	}
	if err != nil {
		return nil, err
	}
	// on half the devices, and half again: past some count more devices
	// only add all-reduce and thin each one's share of the batch, and the
	// DP uses every device it can; while the best plan is slower than n
	// devices' ideal (every op at the device's best efficiency, never idle),
	// which no plan on n beats
	// (its products at the plan's precision's rate: plan.IdealSamplesPerS)
	candidates := best.Search.Candidates
	perSample := plan.FLOPsPerSample(g)
	halved := false // the best plan is one on fewer devices, and says so
	for sub := o; sp.tu.fewerDevices && sub.Devices >= 4; {
		sub.Devices /= 2
		ideal := plan.IdealSamplesPerS(o.Device, o.Precision, sub.Devices, perSample)
		// measured op times are no FLOP rate: no ideal bounds them
		if o.OpTimes == nil && perSample > 0 && best.Predicted.SamplesPerS >= ideal {
			break
		}
		q, err := sp.searchOn(g, sub)
		if err != nil {
			break // nothing fits on fewer
		}
		candidates += q.Search.Candidates
		seq := betterBaseline(best.Search.Sequential, q.Search.Sequential)
		if better(q, best) {
			q.Devices = o.Devices
			q.Search.Notes = append(q.Search.Notes, fewerNote(sub.Devices, o.Devices))
			best, halved = q, true
		}
		best.Search.Sequential = seq
	}
	if used := usedDevices(best); used < o.Devices && !halved {
		best.Search.Notes = append(best.Search.Notes, fewerNote(used, o.Devices))
	}
	best.Search.Seconds = time.Since(start).Seconds()
	best.Search.Candidates = candidates
	if o.OpTimes != nil {
		best.Search.Notes = append(best.Search.Notes, fmt.Sprintf("op times measured on %s", o.OpTimes.Device))
	}
	return best, nil
}

// searchKinds is Search on a cluster of several device kinds: the DP over
// every device, each stage of one kind, and a search on each kind's
// devices alone (as Search of them would, fewer devices included); the
// fastest plan, which may leave a kind idle (its notes say so).
func (sp *spaces) searchKinds(g *dag.Graph, o Options, start time.Time) (*plan.Plan, error) {
	if err := refuseKinds(g, &o); err != nil && sp.tu.refuseFirst {
		return nil, err
	}
	best, err := sp.searchOn(g, o)
	var np *NoPlanError
	if err != nil && !errors.As(err, &np) {
		return nil, err
	}
	failed := err
	candidates := 0
	var seq *plan.Baseline
	if best != nil {
		candidates, seq = best.Search.Candidates, best.Search.Sequential
	}
	for _, k := range o.Cluster.Kinds {
		one := o.kindAlone(k)
		q, err := sp.search(g, one, start)
		if errors.As(err, &np) {
			continue
		}
		if err != nil {
			return nil, err
		}
		candidates += q.Search.Candidates
		seq = betterBaseline(seq, q.Search.Sequential)
		if best == nil || better(q, best) {
			q.Search.Notes = append(q.Search.Notes, fmt.Sprintf("uses only the cluster's %d %s: no plan over its %d devices of %d kinds was faster",
				k.Devices, k.Name(), o.Devices, len(o.Cluster.Kinds)))
			best = q
		}
	}
	if best == nil {
		return nil, failed
	}
	best.Search.Sequential = seq
	best.Search.Seconds = time.Since(start).Seconds()
	best.Search.Candidates = candidates
	return best, nil
}

// kindAlone is o on kind k's devices alone.
func (o Options) kindAlone(k plan.Kind) Options {
	o.Cluster = nil
	o.Device, o.Devices, o.DevicesPerNode, o.MemoryLimit = k.Device, k.Devices, k.DevicesPerNode, k.MemoryLimit
	return o
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
func (sp *spaces) smallerMicroBatch(g *dag.Graph, o Options, failed error) (*plan.Plan, Options, error) {
	var best *plan.Plan
	bestO, first := o, true
	for _, b := range o.smallerMicroBatches() {
		forced := o
		forced.MicroBatch = b
		p, err := sp.searchOn(g, forced)
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

// betterBaseline is the faster of two sequential summaries, by better's
// order (the first on ties); nil counts as none.
func betterBaseline(a, b *plan.Baseline) *plan.Baseline {
	if a == nil || b != nil && ahead(b.IterationS, b.Depth, b.Stages, a.IterationS, a.Depth, a.Stages) {
		return b
	}
	return a
}

// spaces are a Search's search spaces, built by its first search and shared
// by the others (on fewer devices, at smaller micro-batches): they depend on
// the graph and the options that do not change between them. They carry
// the Search's tuning to every search.
type spaces struct {
	tu         tuning
	tree       *partition.Tree
	gpp, chain *space
	hints      hints // the least bottlenecks its searches found, where the next may look first
}

// graph is gpp's space (and the tree it is built on).
func (sp *spaces) graph(g *dag.Graph, o *Options, cm *costModel) *space {
	if sp.gpp == nil {
		sp.tree = partition.Decompose(g, o.MaxSeries)
		sp.gpp = newSpace(cm, sp.tree.Root, cm.boundary)
	}
	return sp.gpp
}

// sequential is spp's space.
func (sp *spaces) sequential(g *dag.Graph, o *Options, cm *costModel) *space {
	if sp.chain == nil {
		sp.chain = chainSpace(g, o, cm)
	}
	return sp.chain
}

// costModel is o's cost model, with a cost model per kind on a cluster of
// several kinds, each pricing its stages; all run as the Search's tuning says.
func (sp *spaces) costModel(g *dag.Graph, o *Options) *costModel {
	cm := newCostModel(g, o)
	cm.tu = sp.tu
	if o.Cluster != nil {
		for _, k := range o.Cluster.Kinds {
			ko := o.kindAlone(k)
			ko.Devices = o.Devices // a link inside the DP is between nodes, as the run spans them
			kc := newCostModel(g, &ko)
			kc.tu = sp.tu
			cm.kinds = append(cm.kinds, kc)
		}
		cm.kinds[0] = cm
	}
	return cm
}

// searchOn is Search on exactly o's devices at most.
func (sp *spaces) searchOn(g *dag.Graph, o Options) (*plan.Plan, error) {
	start := time.Now()
	cm := sp.costModel(g, &o)
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
	run := func(s *space, chain bool, who string) error {
		return (&planner{g: g, o: &o, cm: cm, sp: s, chain: chain, who: who, hints: &sp.hints}).plans(consider)
	}
	var notes []string
	switch o.Strategy {
	case "gpp":
		gs := sp.graph(g, &o, cm)
		if sp.tree.Cuts > 0 {
			notes = append(notes, fmt.Sprintf("the graph is not series-parallel: %d cut(s) made it so", sp.tree.Cuts))
		}
		if err := run(gs, false, "gpp"); err != nil {
			return nil, err
		}
		if err := run(sp.sequential(g, &o, cm), true, "spp"); err != nil {
			return nil, err
		}
	case "spp":
		if err := run(sp.sequential(g, &o, cm), true, "spp"); err != nil {
			return nil, err
		}
	case "spp-exact":
		if err := exactPlans(g, &o, cm, consider); err != nil {
			return nil, err
		}
		// spp's plans lie in spp-exact's space; the simulator may prefer one
		if err := run(sp.sequential(g, &o, cm), true, "spp"); err != nil {
			return nil, err
		}
	}
	// tune each planner's fastest plan, then the others, each plan on its
	// own (in parallel), and weigh them in order; one whose floor
	// (restFloor) lies above its planner's fastest as tuned is left out:
	// no tuning makes it as fast. No cut by the untuned time: tuning that
	// runs a plan's all-gathers late can gain more than a tenth (dlrm on
	// 32 v100: bench/history.md)
	if err := each(len(families), func(i int) error { return tuneShared(tops[families[i]][0], o.sched, cm) }); err != nil {
		return nil, err
	}
	var tuned, rest []*plan.Plan
	var who []string
	for _, w := range families {
		for j, p := range tops[w] {
			if j > 0 && sp.tu.restFloor && restFloor(p, o.sched, cm)*(1-1e-10) > tops[w][0].Predicted.IterationS {
				continue
			}
			if j > 0 {
				rest = append(rest, p)
			}
			tuned, who = append(tuned, p), append(who, w)
		}
	}
	if err := each(len(rest), func(i int) error { return tuneShared(rest[i], o.sched, cm) }); err != nil {
		return nil, err
	}
	var best, seq *plan.Plan
	for i, p := range tuned {
		if best == nil || better(p, best) {
			best = p
		}
		if who[i] == "spp" && (seq == nil || better(p, seq)) {
			seq = p
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
	if n := cm.stale.n.Load(); n > 0 {
		best.Search.Notes = append(best.Search.Notes, staleNote(n))
	}
	return best, nil
}

// Tuning takes each planner's fastest tuneTop plans, and tunes those
// that tuning could make the fastest.
const tuneTop = 8

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

// noPlan explains which limit failed.
func noPlan(g *dag.Graph, o *Options, cm *costModel) error {
	var total, biggest int64
	name := ""
	for i := 0; i < g.NumOps(); i++ {
		need := cm.static(g.Cost(i).Params) + 2*cm.tensorBytes(g.Out(i))
		total += cm.static(g.Cost(i).Params)
		if need > biggest {
			biggest, name = need, g.Op(i).Name
		}
	}
	if biggest > o.MemoryLimit {
		return &NoPlanError{Reason: fmt.Sprintf("memory: op %q alone needs %s for its weights, gradients and optimizer state, over the %s a device has",
			name, gb(biggest), gb(o.MemoryLimit)), Op: name, Need: biggest, Limit: o.MemoryLimit}
	}
	at := "at any micro-batch size"
	if o.MicroBatch > 0 {
		at = fmt.Sprintf("at micro-batch %d", o.MicroBatch)
	} else if o.Batch > plan.MicroBatchLimit {
		at = fmt.Sprintf("at any micro-batch size that makes at most %d micro-batches per iteration (the most a plan may have)", plan.MicroBatchLimit)
	}
	return &NoPlanError{Reason: fmt.Sprintf("memory: no %s plan of %q on %d devices fits in %s per device %s (weights, gradients and optimizer state take %s in all, %s per device if split evenly)",
		o.Strategy, g.Name(), o.Devices, gb(o.MemoryLimit), at, gb(total), gb(total/int64(o.Devices)))}
}

// fewerNote is the note of a plan that uses used of n devices.
func fewerNote(used, n int) string {
	return fmt.Sprintf("uses %d of the %d devices: more made no plan faster", used, n)
}

// usedDevices is how many devices p's stages take.
func usedDevices(p *plan.Plan) int {
	n := 0
	for _, st := range p.Stages {
		n += len(st.Devices)
	}
	return n
}

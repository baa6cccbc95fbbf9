package search

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/partition"
)

// Search plans g under o. It returns a NoPlanError when nothing fits and an
// OptionError for options it cannot use. The search is deterministic; the
// wall time it took is reported in the plan, not used.
func Search(g *dag.Graph, o Options) (*Plan, error) {
	start := time.Now()
	o, err := o.withDefaults(g.BatchSize())
	if err != nil {
		return nil, err
	}
	cm := newCostModel(g, &o)
	// the fastest few of each planner's candidates, whose schedules are tuned
	// at the end (tune): the same ones whichever strategy offers them, so gpp,
	// which also offers spp's, is never worse than spp; only those close
	// enough to the fastest that tuning could make them the fastest
	var families []string
	tops := map[string][]*Plan{}
	candidates := 0
	consider := func(p *Plan, who string) {
		candidates++
		p.Search.Chosen = who
		p.sched = nil // a kept plan's lists are built again when needed: they can be large
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
	var best *Plan
	for _, who := range families {
		for _, p := range tops[who] {
			if p.Predicted.IterationS > tuneWithin*tops[who][0].Predicted.IterationS {
				break
			}
			if err := p.tune(); err != nil {
				return nil, err
			}
			if best == nil || better(p, best) {
				best = p
			}
		}
	}
	if best == nil {
		return nil, noPlan(g, &o, cm)
	}
	best.finish() // tune gave every plan it saw its lists again
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
func keepFastest(top []*Plan, p *Plan, n int) []*Plan {
	i := len(top)
	for i > 0 && better(p, top[i-1]) {
		i--
	}
	if i >= n {
		return top
	}
	top = append(top[:i], append([]*Plan{p}, top[i:]...)...)
	return top[:min(len(top), n)]
}

// better prefers the faster iteration, then the shallower pipeline, then fewer stages.
func better(a, b *Plan) bool {
	if a.Predicted.IterationS != b.Predicted.IterationS {
		return a.Predicted.IterationS < b.Predicted.IterationS
	}
	if a.Predicted.Depth != b.Predicted.Depth {
		return a.Predicted.Depth < b.Predicted.Depth
	}
	return len(a.Stages) < len(b.Stages)
}

func chainSpace(g *dag.Graph, o *Options, cm *costModel) *space {
	return newSpace(cm, chainTree(chainUnits(g, o.MaxUnits)), liveCross(g))
}

// plans runs the DP at every micro-batch size, in parallel, and offers each
// size's best plan in ascending order of size, so the outcome is deterministic.
func plans(g *dag.Graph, o *Options, cm *costModel, sp *space, chain bool, who string, consider func(*Plan, string)) error {
	sizes := o.microBatches()
	found := make([][2]*Plan, len(sizes))
	errs := make([]error, len(sizes))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, b := range sizes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			found[i], errs[i] = planAt(g, o, cm, sp, chain, b)
		}()
	}
	wg.Wait()
	for i := range sizes {
		if errs[i] != nil {
			return errs[i]
		}
		for _, p := range found[i] {
			if p != nil {
				consider(p, who)
			}
		}
	}
	return nil
}

// planAt returns, at micro-batch b, the DP's plan (the least bottleneck time
// per micro-batch, then the shallowest pipeline, on as many devices as can
// be used) and the whole model as one data-parallel stage when that fits.
// The DP's objective ignores how many micro-batches an iteration has: with
// few of them, a deeper pipeline's fill and drain can cost more than its
// shorter bottleneck saves, and pure data parallelism wins. The simulator
// judges between them.
func planAt(g *dag.Graph, o *Options, cm *costModel, sp *space, chain bool, b int64) ([2]*Plan, error) {
	var out [2]*Plan
	d := newDP(sp, o.Devices, b, int(o.Batch/b), o.Schedule == "gpipe")
	for k := o.Devices; k >= 1; k-- {
		if _, ok := d.minT(k); !ok {
			continue
		}
		var in []stageIn
		for _, a := range d.extract(sp.root, k) {
			in = append(in, stageIn{ops: sp.blocks[a.block].ops, k: a.k, cost: d.costs[a.block][a.k], blk: sp.blocks[a.block]})
		}
		p, err := assemble(g, o, cm, b, in, chain)
		if err != nil {
			return out, err
		}
		if p.Predicted.Feasible {
			out[0] = p
		}
		break
	}
	id, k := sp.root.whole(), d.kmax
	if c := &d.costs[id][k]; c.memory(d.inflight(1)) <= cm.limit && (out[0] == nil || len(out[0].Stages) > 1) {
		p, err := assemble(g, o, cm, b, []stageIn{{ops: sp.blocks[id].ops, k: k, cost: *c, blk: sp.blocks[id]}}, chain)
		if err != nil {
			return out, err
		}
		if p.Predicted.Feasible {
			out[1] = p
		}
	}
	return out, nil
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
	return &NoPlanError{fmt.Sprintf("memory: no %s plan of %q on %d devices fits in %s per device at any micro-batch size (weights, gradients and optimizer state take %s in all, %s per device if split evenly)",
		o.Strategy, g.Name(), o.Devices, gb(o.MemoryLimit), gb(total), gb(total/int64(o.Devices)))}
}

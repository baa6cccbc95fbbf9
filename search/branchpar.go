package search

import (
	"sort"

	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// Branch-parallel plans: every branch of the graph's widest parallel part
// one data-parallel stage on devices of its own, in proportion to its
// work, and the units before and after the branches a stage each on a few
// devices. The DP minimises the slowest stage's time per micro-batch, which
// is what an iteration of many micro-batches costs; with few (one, where
// the batch fits a micro-batch) an iteration costs the stages one after
// another along the longest path, and the DP's deep pipelines of short
// stages lose to these shallow ones (the paper's MMT at its own batch,
// four branches each all-reducing a quarter of the model over its own
// devices: bench/history.md has the figures). Offered beside
// the DP's plans at each micro-batch size; the simulator judges.

// branchRest are the tail sizes tried, in device groups: the units after
// the branches (or before them) on this many.
var branchRest = []int{1, 2, 4}

// branchParallel is the fastest branch-parallel plan at d's micro-batch,
// nil where the graph has no parallel part at its root's level, where d's
// devices are of several kinds or too few, or where none fits.
func (pl *planner) branchParallel(d *dp) (*plan.Plan, error) {
	root := pl.sp.root
	if pl.chain || d.devs.kinds() > 1 || root.kind != partition.Series {
		return nil, nil
	}
	q := widest(root)
	if q < 0 {
		return nil, nil
	}
	kids := root.kids[q].kids
	var pre, post []int // blocks
	if q > 0 {
		pre = append(pre, root.blk[0][q-1])
	}
	if last := len(root.units) - 1; q < last {
		post = append(post, root.blk[q+1][last-q-1])
	}
	work := make([]float64, len(kids))
	for i, kid := range kids {
		c := d.keepCost(kid.whole(), 1)
		work[i] = c.f + c.bi + c.bw
	}
	var best *plan.Plan
	for _, r := range branchRest {
		rest := r * (len(pre) + len(post))
		groups := d.devs.counts[0] - rest
		if groups < len(kids) || rest == 0 && r > 1 {
			continue
		}
		in, ok := pl.branchStages(d, pre, post, kids, share(work, groups, d.kmax), r)
		if !ok {
			continue
		}
		p, err := assemble(pl.g, pl.o, pl.cm, d.b, in, false)
		if err != nil {
			return nil, err
		}
		if p.Predicted.Feasible && (best == nil || p.Predicted.IterationS < best.Predicted.IterationS) {
			best = p
		}
	}
	return best, nil
}

// widest is the index of the unit of series node n that is a parallel
// node with the most work (ops), -1 where none is.
func widest(n *snode) int {
	q, most := -1, 0
	for i, kid := range n.kids {
		if kid.kind == partition.Parallel && len(kid.kids) > 1 && len(kid.ops) > most {
			q, most = i, len(kid.ops)
		}
	}
	return q
}

// branchStages are the stages of a branch-parallel plan: pre's blocks on r
// groups, each kid on its share, post's on r; ok false where a stage has no
// devices or does not fit with the micro-batches it holds in flight (one
// more for each stage after it on its path).
func (pl *planner) branchStages(d *dp, pre, post []int, kids []*snode, shares []int, r int) ([]stageIn, bool) {
	var in []stageIn
	add := func(id, k, after int) bool {
		if k < 1 || k > d.kmax {
			return false
		}
		c := d.keepCost(id, k)
		if c.memory(d.inflight(after+1)) > pl.cm.limit {
			return false
		}
		blk := pl.sp.blocks[id]
		in = append(in, stageIn{ops: blk.ops, k: k * d.g, cost: c, blk: blk})
		return true
	}
	for _, id := range pre {
		if !add(id, r, 1+len(post)) {
			return nil, false
		}
	}
	for i, kid := range kids {
		if !add(kid.whole(), shares[i], len(post)) {
			return nil, false
		}
	}
	for _, id := range post {
		if !add(id, r, 0) {
			return nil, false
		}
	}
	return in, true
}

// share splits groups among parts, each one at least, the rest in
// proportion to work, by largest remainder (ties to the earlier part), none
// past most, what a full part cannot take going round the others; the
// shares add up to groups, or to all the parts can take.
func share(work []float64, groups, most int) []int {
	out := make([]int, len(work))
	var sum float64
	for i, w := range work {
		out[i] = 1
		sum += w
	}
	left := groups - len(work)
	if left <= 0 || sum <= 0 {
		return out
	}
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, 0, len(work))
	spare := left
	for i, w := range work {
		exact := w / sum * float64(left)
		n := min(most-1, int(exact))
		out[i] += n
		spare -= n
		rems = append(rems, rem{i, exact - float64(n)})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for gave := true; spare > 0 && gave; { // passes until every part is full
		gave = false
		for j := 0; spare > 0 && j < len(rems); j++ {
			if i := rems[j].i; out[i] < most {
				out[i]++
				spare--
				gave = true
			}
		}
	}
	return out
}

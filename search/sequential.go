package search

import (
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/partition"
)

// chainSpace is spp's search space: a chain of units, each boundary priced
// as a sequential pipeline pays it (liveCross).
func chainSpace(g *dag.Graph, o *Options, cm *costModel) *space {
	return newSpace(cm, chainTree(chainUnits(g, o.MaxUnits)), liveCross(g, cm.tensorBytes))
}

// chainUnits cuts the graph's topological order into at most maxUnits runs of
// similar cost: a contiguous run of a topological order is convex, so any
// interval of units is a valid stage of a sequential pipeline.
func chainUnits(g *dag.Graph, maxUnits int) [][]int {
	order := g.Order()
	units := make([][]int, len(order))
	w := make([]float64, len(order))
	for k, op := range order {
		units[k] = []int{op}
		c := g.Cost(op)
		w[k] = c.FwdFLOPs + c.BwdFLOPs() + 1
	}
	for len(units) > maxUnits {
		best := 0
		for i := 1; i+1 < len(units); i++ {
			if w[i]+w[i+1] < w[best]+w[best+1] {
				best = i
			}
		}
		units[best] = append(units[best], units[best+1]...)
		units = append(units[:best+1], units[best+2:]...)
		w[best] += w[best+1]
		w = append(w[:best+1], w[best+2:]...)
	}
	return units
}

// chainTree is a series node over the units, for the shared DP.
func chainTree(units [][]int) *partition.Node {
	root := &partition.Node{Kind: partition.Series}
	for _, u := range units {
		root.Ops = append(root.Ops, u...)
		root.Children = append(root.Children, &partition.Node{Kind: partition.Leaf, Ops: u})
	}
	if len(units) == 1 {
		return root.Children[0]
	}
	return root
}

// liveCross prices the boundary of a contiguous run of the topological order
// as a sequential pipeline pays it: every tensor live across the cut before
// the run enters it, and every tensor live across the cut after it leaves,
// including tensors the stage only relays to later stages.
func liveCross(g *dag.Graph, bytes func(*dag.Tensor) int64) func([]int) (int64, int64) {
	pos := make([]int, g.NumOps())
	for k, op := range g.Order() {
		pos[op] = k
	}
	// live[k]: bytes of outputs of ops before position k read at or after k
	n := g.NumOps()
	delta := make([]int64, n+1)
	for _, u := range g.Order() {
		last := pos[u]
		for _, v := range g.Consumers(u) {
			last = max(last, pos[v])
		}
		if last > pos[u] {
			delta[pos[u]+1] += bytes(g.Out(u))
			delta[last+1] -= bytes(g.Out(u))
		}
	}
	live := make([]int64, n+1)
	for k := 1; k <= n; k++ {
		live[k] = live[k-1] + delta[k]
	}
	return func(ops []int) (int64, int64) {
		lo, hi := n, 0
		for _, op := range ops {
			lo, hi = min(lo, pos[op]), max(hi, pos[op])
		}
		return live[lo], live[hi+1]
	}
}

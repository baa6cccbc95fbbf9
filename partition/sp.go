package partition

import (
	"sort"

	"github.com/graphpipe/graphpipe/dag"
)

// Kind is the kind of an SP tree node.
type Kind int

const (
	Leaf     Kind = iota // a block of ops that is always one stage or part of one
	Series               // children run one after another
	Parallel             // children share no edge
)

func (k Kind) String() string { return [...]string{"leaf", "series", "parallel"}[k] }

// Node is a node of the SP tree. Ops lists every op under it in the graph's
// topological order.
type Node struct {
	Kind     Kind
	Ops      []int
	Children []*Node
}

// Tree is the SP decomposition of a graph.
type Tree struct {
	Root *Node
	// Cuts is how many non-series-parallel pieces were cut at a topological
	// prefix (rule 3 of the package doc).
	Cuts int
}

// Decompose builds the SP tree of g. Series nodes with more than maxSeries
// children have runs of adjacent leaves merged into blocks of similar cost
// until at most maxSeries remain (0: no limit).
func Decompose(g *dag.Graph, maxSeries int) *Tree {
	d := &decomposer{g: g, pos: make([]int, g.NumOps())}
	for k, i := range g.Order() {
		d.pos[i] = k
	}
	t := &Tree{Root: d.node(g.Order())}
	t.Cuts = d.cuts
	if maxSeries > 0 {
		coarsen(t.Root, g, maxSeries)
	}
	return t
}

type decomposer struct {
	g    *dag.Graph
	pos  []int // op → position in g.Order()
	cuts int
}

// node decomposes the ops in xs (in topological order).
func (d *decomposer) node(xs []int) *Node {
	if len(xs) == 1 {
		return &Node{Kind: Leaf, Ops: xs}
	}
	local := map[int]int{}
	for k, op := range xs {
		local[op] = k
	}
	if comps := d.components(xs, local); len(comps) > 1 {
		n := &Node{Kind: Parallel, Ops: xs}
		for _, c := range comps {
			n.Children = append(n.Children, d.node(c))
		}
		return n
	}
	spine := d.spine(xs, local)
	var children []*Node
	var run []int
	flush := func() {
		if len(run) > 0 {
			children = append(children, d.node(run))
			run = nil
		}
	}
	for k, op := range xs {
		if spine[k] {
			flush()
			children = append(children, &Node{Kind: Leaf, Ops: []int{op}})
		} else {
			run = append(run, op)
		}
	}
	if len(children) == 0 { // no spine: not series-parallel here
		d.cuts++
		p := d.bestCut(xs, local)
		children = []*Node{d.node(xs[:p]), d.node(xs[p:])}
	} else {
		flush()
	}
	return flatten(&Node{Kind: Series, Ops: xs, Children: children})
}

// flatten splices series children of a series node into it.
func flatten(n *Node) *Node {
	var out []*Node
	for _, c := range n.Children {
		if c.Kind == Series {
			out = append(out, c.Children...)
		} else {
			out = append(out, c)
		}
	}
	n.Children = out
	return n
}

// edges calls f for every edge u→v with both ends in xs (local indices).
func (d *decomposer) edges(xs []int, local map[int]int, f func(u, v int)) {
	for k, op := range xs {
		for _, c := range d.g.Consumers(op) {
			if j, ok := local[c]; ok {
				f(k, j)
			}
		}
	}
}

// components splits xs into weakly connected pieces, each in topological
// order, ordered by their first op.
func (d *decomposer) components(xs []int, local map[int]int) [][]int {
	parent := make([]int, len(xs))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	d.edges(xs, local, func(u, v int) { parent[find(u)] = find(v) })
	index := map[int]int{}
	var comps [][]int
	for k, op := range xs {
		r := find(k)
		c, ok := index[r]
		if !ok {
			c = len(comps)
			index[r] = c
			comps = append(comps, nil)
		}
		comps[c] = append(comps[c], op)
	}
	return comps
}

// spine marks the ops of xs comparable with every other op of xs.
func (d *decomposer) spine(xs []int, local map[int]int) []bool {
	n := len(xs)
	succ := make([][]int, n)
	d.edges(xs, local, func(u, v int) { succ[u] = append(succ[u], v) })
	anc := make([]bitset, n)
	desc := make([]bitset, n)
	for k := range xs {
		anc[k] = newBitset(n)
	}
	for u := range xs { // xs is topological: u's ancestors are final here
		for _, v := range succ[u] {
			anc[v].or(anc[u])
			anc[v].set(u)
		}
	}
	for u := n - 1; u >= 0; u-- {
		desc[u] = newBitset(n)
		for _, v := range succ[u] {
			desc[u].or(desc[v])
			desc[u].set(v)
		}
	}
	out := make([]bool, n)
	for k := range xs {
		out[k] = anc[k].count()+desc[k].count()+1 == n
	}
	return out
}

// bestCut picks the prefix length p (0 < p < len(xs)) of the topological order
// that the fewest edges cross, ties going to the most even split.
func (d *decomposer) bestCut(xs []int, local map[int]int) int {
	n := len(xs)
	// crossing[p] = edges u→v with u < p ≤ v
	delta := make([]int, n+1)
	d.edges(xs, local, func(u, v int) { delta[u+1]++; delta[v+1]-- })
	best, bestCross, cross := 1, -1, 0
	for p := 1; p < n; p++ {
		cross += delta[p]
		even := abs(2*p - n)
		if bestCross < 0 || cross < bestCross || cross == bestCross && even < abs(2*best-n) {
			best, bestCross = p, cross
		}
	}
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// coarsen merges adjacent leaves of long series nodes, everywhere in the tree.
func coarsen(n *Node, g *dag.Graph, maxSeries int) {
	for _, c := range n.Children {
		coarsen(c, g, maxSeries)
	}
	if n.Kind != Series || len(n.Children) <= maxSeries {
		return
	}
	w := make([]float64, len(n.Children))
	for i, c := range n.Children {
		for _, op := range c.Ops {
			k := g.Cost(op)
			w[i] += k.FwdFLOPs + k.BwdFLOPs() + 1
		}
	}
	for len(n.Children) > maxSeries {
		best := -1
		for i := 0; i+1 < len(n.Children); i++ {
			if n.Children[i].Kind == Leaf && n.Children[i+1].Kind == Leaf && (best < 0 || w[i]+w[i+1] < w[best]+w[best+1]) {
				best = i
			}
		}
		if best < 0 {
			return // nothing left to merge: runs are separated by parallel nodes
		}
		a, b := n.Children[best], n.Children[best+1]
		n.Children[best] = &Node{Kind: Leaf, Ops: append(append([]int{}, a.Ops...), b.Ops...)}
		n.Children = append(n.Children[:best+1], n.Children[best+2:]...)
		w[best] += w[best+1]
		w = append(w[:best+1], w[best+2:]...)
	}
}

// Leaves lists the tree's leaves left to right.
func (n *Node) Leaves() []*Node {
	if n.Kind == Leaf {
		return []*Node{n}
	}
	var out []*Node
	for _, c := range n.Children {
		out = append(out, c.Leaves()...)
	}
	return out
}

// sortOps sorts op indices into the graph's topological order.
func sortOps(g *dag.Graph, ops []int) {
	pos := make(map[int]int, len(ops))
	for k, i := range g.Order() {
		pos[i] = k
	}
	sort.Slice(ops, func(a, b int) bool { return pos[ops[a]] < pos[ops[b]] })
}

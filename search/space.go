package search

import (
	"sort"

	"github.com/graphpipe/graphpipe/partition"
)

// snode is a node of the search space: an SP tree node whose children
// ("units") may be grouped into candidate stages by contiguous intervals.
type snode struct {
	id    int
	kind  partition.Kind
	ops   []int
	kids  []*snode // none for a leaf
	units [][]int  // per unit, its ops: the kids' ops, or a leaf's own ops as one unit
	blk   [][]int  // blk[i][p-i]: the block of units i..p
	sums  map[int64][][3]float64
}

// space is every candidate stage of a planner and the tree that combines them.
type space struct {
	cm     *costModel
	root   *snode
	nodes  []*snode
	blocks []*block
	owner  []blockRef // per block: where its units lie
}

type blockRef struct {
	n    *snode
	i, p int
}

// newSpace builds the search space over an SP tree. Parallel children are
// ordered by descending cost so that similar branches sit side by side.
func newSpace(cm *costModel, root *partition.Node, cross func([]int) (int64, int64)) *space {
	sp := &space{cm: cm}
	sp.root = sp.convert(root)
	for _, n := range sp.nodes {
		sp.makeBlocks(n, cross)
	}
	return sp
}

func (sp *space) convert(pn *partition.Node) *snode {
	n := &snode{id: len(sp.nodes), kind: pn.Kind, ops: pn.Ops, sums: map[int64][][3]float64{}}
	sp.nodes = append(sp.nodes, n)
	for _, c := range pn.Children {
		n.kids = append(n.kids, sp.convert(c))
	}
	if n.kind == partition.Parallel {
		w := map[*snode]float64{}
		for _, k := range n.kids {
			for _, op := range k.ops {
				c := cm(sp).g.Cost(op)
				w[k] += c.FwdFLOPs + c.BwdFLOPs()
			}
		}
		sort.SliceStable(n.kids, func(a, b int) bool { return w[n.kids[a]] > w[n.kids[b]] })
	}
	if len(n.kids) == 0 {
		n.units = [][]int{n.ops}
	}
	for _, k := range n.kids {
		n.units = append(n.units, k.ops)
	}
	return n
}

func cm(sp *space) *costModel { return sp.cm }

// makeBlocks creates a block for every interval of n's units. A one-unit
// interval of a non-leaf kid is that kid's whole block.
func (sp *space) makeBlocks(n *snode, cross func([]int) (int64, int64)) {
	u := len(n.units)
	n.blk = make([][]int, u)
	for i := 0; i < u; i++ {
		n.blk[i] = make([]int, u-i)
		var ops []int
		for p := i; p < u; p++ {
			ops = append(ops, n.units[p]...)
			b := sp.cm.newBlock(append([]int(nil), ops...), cross)
			n.blk[i][p-i] = len(sp.blocks)
			sp.blocks = append(sp.blocks, b)
			sp.owner = append(sp.owner, blockRef{n, i, p})
		}
	}
}

// whole is the block of all of n's ops.
func (n *snode) whole() int { return n.blk[0][len(n.units)-1] }

// unitSums returns prefix sums of (f, bi, bw) over n's units at micro-batch m.
func (sp *space) unitSums(n *snode, m int64) [][3]float64 {
	if s, ok := n.sums[m]; ok {
		return s
	}
	t := sp.cm.times(m)
	s := make([][3]float64, len(n.units)+1)
	for i, unit := range n.units {
		s[i+1] = s[i]
		for _, op := range unit {
			s[i+1][0] += t[op].f
			s[i+1][1] += t[op].bi
			s[i+1][2] += t[op].bw
		}
	}
	n.sums[m] = s
	return s
}

// price computes a block's stage cost on k devices at micro-batch b.
func (sp *space) price(id, k int, b int64, mbs int) stageCost {
	blk, ref := sp.blocks[id], sp.owner[id]
	m := ceilDiv(b, int64(k))
	s := sp.unitSums(ref.n, m)
	c := stageCost{m: m, f: s[ref.p+1][0] - s[ref.i][0], bi: s[ref.p+1][1] - s[ref.i][1], bw: s[ref.p+1][2] - s[ref.i][2]}
	c.flush = sp.cm.flush(blk.params, k)
	c.period = c.f + c.bi + c.bw + c.flush/float64(mbs)
	bytes := float64(max(blk.inB, blk.outB)) * float64(m)
	c.link = 2 * sp.cm.dev.transfer(bytes, sp.cm.interDP())
	c.static = sp.cm.static(blk.params)
	c.stashPerMB = blk.stash * m
	c.work = blk.work * m
	return c
}

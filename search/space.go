package search

import (
	"sort"
	"sync"

	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
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
	most  []int    // most[i]: the most stages units i.. make (each holds one of their leaves, never split); 0 past the last
	sums  map[sumKey][][3]float64
}

// space is every candidate stage of a planner and the tree that combines
// them. It depends on the graph and on how its ops are priced (cm's device
// and op times: the prefix sums of op times it caches), not on the devices
// or the memory: a Search's searches on fewer devices and at smaller
// micro-batches share it, each pricing its stages with a cost model of its
// own (price).
type space struct {
	cm     *costModel // prices the ops (unitSums)
	root   *snode
	nodes  []*snode
	blocks []*block
	owner  []blockRef // per block: where its units lie
	tails  []*tailSpec
	tailAt map[[3]int]*tailSpec // (series node, i, p) → tail
	heads  []*tailSpec
	headAt map[[2]int]*tailSpec // (series node, i) → unit i as a head
	hosts  [][]int              // per node, hostBlocks
	mu     sync.Mutex           // guards every node's sums, and allSums
	// allSums is nodeSums' answer per device and micro-batch: priceAll
	// asks for it at every device count of every search
	allSums map[sumKey][][][3]float64
}

type blockRef struct {
	n    *snode
	i, p int
	host int       // for a union block: the host block, and tail is set
	tail *tailSpec // the units a host absorbs; nil for an interval block
}

// tailSpec is a run of units of a series node that a stage of a parallel kid
// may absorb: after the kid, into a branch's sink stage (a tail: join
// absorption), or before it, into a branch's source stage (a head: fork
// absorption); see doc.go.
type tailSpec struct {
	id      int
	n       *snode // the series node
	i, p    int    // its units i..p
	ops     []int
	kid     *snode      // a tail's: the parallel kid whose sink stages absorb it
	unions  map[int]int // host block → union block
	unionOf []int32     // unions as a slice over every block (0 where it has none, as the map reads)
}

// union is the union block of host block h and the run.
func (t *tailSpec) union(h int) int { return int(t.unionOf[h]) }

// newSpace builds the search space over an SP tree. Parallel children are
// ordered by descending cost so that similar branches sit side by side.
func newSpace(cm *costModel, root *partition.Node, cross func([]int) (int64, int64)) *space {
	sp := &space{cm: cm, tailAt: map[[3]int]*tailSpec{}, headAt: map[[2]int]*tailSpec{}}
	sp.root = sp.convert(root)
	for j := len(sp.nodes) - 1; j >= 0; j-- { // a node's kids come after it
		n := sp.nodes[j]
		n.most = make([]int, len(n.units)+1)
		for i := len(n.units) - 1; i >= 0; i-- {
			n.most[i] = n.most[i+1] + 1
			if len(n.kids) > 0 {
				n.most[i] = n.most[i+1] + n.kids[i].most[0]
			}
		}
	}
	for _, n := range sp.nodes {
		sp.makeBlocks(n, cross)
	}
	for _, n := range sp.nodes {
		sp.makeTails(n, cross)
		sp.makeHeads(n, cross)
	}
	sp.hosts = make([][]int, len(sp.nodes))
	for _, n := range sp.nodes {
		sp.hosts[n.id] = sp.hostBlocks(n)
	}
	for _, runs := range [][]*tailSpec{sp.tails, sp.heads} {
		for _, t := range runs {
			t.unionOf = make([]int32, len(sp.blocks))
			for h, u := range t.unions {
				t.unionOf[h] = int32(u)
			}
		}
	}
	return sp
}

// makeHeads creates, for every parallel kid q of series node n, the union
// blocks of each possible source stage of the kid with the unit before it
// (the head). One unit only: a longer stem is better a stage of its own, and
// every run of units would multiply the blocks, and the search time with
// them (BENCHMARKS.md, "Planner history").
func (sp *space) makeHeads(n *snode, cross func([]int) (int64, int64)) {
	if n.kind != partition.Series {
		return
	}
	for q, kid := range n.kids {
		if kid.kind != partition.Parallel || q == 0 {
			continue
		}
		h := &tailSpec{id: len(sp.heads), n: n, i: q - 1, p: q - 1, ops: n.units[q-1], unions: map[int]int{}}
		for _, s := range sp.sourceBlocks(kid) {
			u := sp.cm.newBlock(append(append([]int(nil), h.ops...), sp.blocks[s].ops...), cross)
			h.unions[s] = len(sp.blocks)
			sp.blocks = append(sp.blocks, u)
			sp.owner = append(sp.owner, blockRef{host: s, tail: h})
		}
		sp.heads = append(sp.heads, h)
		sp.headAt[[2]int{n.id, q - 1}] = h
	}
}

// sourceBlocks lists the blocks that can be the source stage of a plan of n.
func (sp *space) sourceBlocks(n *snode) []int {
	switch n.kind {
	case partition.Leaf:
		return []int{n.whole()}
	case partition.Series:
		var out []int
		for p := range n.units {
			out = append(out, n.blk[0][p])
		}
		if n.kids[0].kind != partition.Leaf {
			out = append(out, sp.sourceBlocks(n.kids[0])...)
		}
		return out
	}
	return sp.groupBlocks(n, sp.sourceBlocks)
}

// makeTails creates, for every parallel kid of series node n and every run of
// units after it, the union blocks of each possible host sink stage with that run.
func (sp *space) makeTails(n *snode, cross func([]int) (int64, int64)) {
	if n.kind != partition.Series {
		return
	}
	for i, kid := range n.kids {
		if kid.kind != partition.Parallel {
			continue
		}
		hosts := sp.hostBlocks(kid)
		var ops []int
		for p := i + 1; p < len(n.units); p++ {
			ops = append(ops, n.units[p]...)
			t := &tailSpec{id: len(sp.tails), n: n, i: i + 1, p: p, ops: append([]int(nil), ops...), kid: kid, unions: map[int]int{}}
			for _, h := range hosts {
				u := sp.cm.newBlock(append(append([]int(nil), sp.blocks[h].ops...), t.ops...), cross)
				t.unions[h] = len(sp.blocks)
				sp.blocks = append(sp.blocks, u)
				sp.owner = append(sp.owner, blockRef{host: h, tail: t})
			}
			sp.tails = append(sp.tails, t)
			sp.tailAt[[3]int{n.id, i + 1, p}] = t
		}
	}
}

// hostBlocks lists the blocks that can be the sink stage of a plan of n.
func (sp *space) hostBlocks(n *snode) []int {
	switch n.kind {
	case partition.Leaf:
		return []int{n.whole()}
	case partition.Series:
		last := len(n.units) - 1
		var out []int
		for q := 0; q <= last; q++ {
			out = append(out, n.blk[q][last-q])
		}
		if n.kids[last].kind != partition.Leaf {
			out = append(out, sp.hostBlocks(n.kids[last])...)
		}
		return out
	}
	return sp.groupBlocks(n, sp.hostBlocks)
}

// groupBlocks lists, for parallel node n, every run of its kids as one
// block, and what each kid offers.
func (sp *space) groupBlocks(n *snode, kid func(*snode) []int) []int {
	var out []int
	for i := range n.units {
		for p := i; p < len(n.units); p++ {
			out = append(out, n.blk[i][p-i])
		}
	}
	for _, k := range n.kids {
		out = append(out, kid(k)...)
	}
	return out
}

func (sp *space) convert(pn *partition.Node) *snode {
	n := &snode{id: len(sp.nodes), kind: pn.Kind, ops: pn.Ops, sums: map[sumKey][][3]float64{}}
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
			sp.owner = append(sp.owner, blockRef{n: n, i: i, p: p})
		}
	}
}

// chain says whether n is a series node of leaves: spp's chain, or a
// branch of single ops.
func (n *snode) chain() bool {
	if n.kind != partition.Series {
		return false
	}
	for _, k := range n.kids {
		if k.kind != partition.Leaf {
			return false
		}
	}
	return true
}

// whole is the block of all of n's ops.
func (n *snode) whole() int { return n.blk[0][len(n.units)-1] }

// sumKey names a node's prefix sums: the device that times its ops, how
// much its host's sharing slows them, and the micro-batch.
type sumKey struct {
	dev  plan.Device
	slow float64 // the cost model's shared-host slowdown
	m    int64
}

// unitSums returns prefix sums of (f, bi, bw) over n's units at micro-batch m.
func (sp *space) unitSums(n *snode, m int64) [][3]float64 { return sp.unitSumsFor(sp.cm, n, m) }

// unitSumsFor is unitSums with cm's op times (its device's).
func (sp *space) unitSumsFor(cm *costModel, n *snode, m int64) [][3]float64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	key := sumKey{cm.dev, cm.slow, m}
	if s, ok := n.sums[key]; ok {
		return s
	}
	t := cm.times(m)
	s := make([][3]float64, len(n.units)+1)
	for i, unit := range n.units {
		s[i+1] = s[i]
		for _, op := range unit {
			s[i+1][0] += t[op].f
			s[i+1][1] += t[op].bi
			s[i+1][2] += t[op].bw
		}
	}
	n.sums[key] = s
	return s
}

// price computes a block's stage cost under cm on k devices at
// micro-batch b, its state at its primary placement.
func (sp *space) price(cm *costModel, id, k int, b int64, mbs int) stageCost {
	return sp.priceAt(cm, id, k, b, mbs, sp.timesFor(cm, id, ceilDiv(b, int64(k))))
}

// priceAt is price given the block's times t at its per-device micro-batch.
func (sp *space) priceAt(cm *costModel, id, k int, b int64, mbs int, t [3]float64) stageCost {
	blk := sp.blocks[id]
	m := ceilDiv(b, int64(k))
	return cm.finish(stageCost{m: m, f: t[0], bi: t[1], bw: t[2]}, blk, k, mbs, cm.primaryFor(blk, k, m))
}

// spillPrice is price with the block's state spilled to host memory (the
// DP's second variant under auto: spill), and recomputing too where the
// planner may let it and that holds more micro-batches in flight, up to
// most, than keeping does.
func (sp *space) spillPrice(cm *costModel, id, k int, b int64, mbs, most int) stageCost {
	blk := sp.blocks[id]
	m := ceilDiv(b, int64(k))
	t := sp.timesFor(cm, id, m)
	base, stash := cm.held(blk, m)
	c := cm.finish(stageCost{m: m, f: t[0], bi: t[1], bw: t[2]}, blk, k, mbs, cm.spill(blk, k, base, stash))
	if !cm.mayRec || c.recompute {
		return c
	}
	keep := maxInFlight(satAdd(c.static, c.work), c.stashPerMB, cm.limit)
	if keep >= most {
		return c
	}
	r := recomputed(c, blk)
	if min(maxInFlight(satAdd(r.static, r.work), r.stashPerMB, cm.limit), most) > keep {
		return r
	}
	return c
}

// nodeSums is every node's prefix sums of its units' (f, bi, bw) at
// micro-batch m (unitSums), by node id.
func (sp *space) nodeSums(cm *costModel, m int64) [][][3]float64 {
	key := sumKey{cm.dev, cm.slow, m}
	sp.mu.Lock()
	out, ok := sp.allSums[key]
	sp.mu.Unlock()
	if ok {
		return out
	}
	out = make([][][3]float64, len(sp.nodes))
	for _, n := range sp.nodes {
		out[n.id] = sp.unitSumsFor(cm, n, m)
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.allSums == nil {
		sp.allSums = map[sumKey][][][3]float64{}
	}
	sp.allSums[key] = out
	return out
}

// timesIn is times from the nodes' prefix sums at the micro-batch (nodeSums).
func (sp *space) timesIn(id int, sums [][][3]float64) [3]float64 {
	ref := sp.owner[id]
	if ref.tail != nil {
		h := sp.timesIn(ref.host, sums)
		s := sums[ref.tail.n.id]
		for j := range h {
			h[j] += s[ref.tail.p+1][j] - s[ref.tail.i][j]
		}
		return h
	}
	s := sums[ref.n.id]
	var out [3]float64
	for j := range out {
		out[j] = s[ref.p+1][j] - s[ref.i][j]
	}
	return out
}

// times sums a block's (f, bi, bw) at micro-batch m from prefix sums.
func (sp *space) times(id int, m int64) [3]float64 { return sp.timesFor(sp.cm, id, m) }

// timesFor is times with cm's op times (its device's).
func (sp *space) timesFor(cm *costModel, id int, m int64) [3]float64 {
	ref := sp.owner[id]
	if ref.tail != nil {
		h := sp.timesFor(cm, ref.host, m)
		s := sp.unitSumsFor(cm, ref.tail.n, m)
		for j := range h {
			h[j] += s[ref.tail.p+1][j] - s[ref.tail.i][j]
		}
		return h
	}
	s := sp.unitSumsFor(cm, ref.n, m)
	var out [3]float64
	for j := range out {
		out[j] = s[ref.p+1][j] - s[ref.i][j]
	}
	return out
}

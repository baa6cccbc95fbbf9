package search

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// plan is a brute-force candidate: stages with their devices and depth.
type bfStage struct {
	ops   []int
	k     int
	depth int
	fork  bool // hosts a head: its depth is set once the plan around it is known (fixFork)
}

// value is a plan's binding time, or +Inf if a stage is out of memory or
// exceeds its data-parallel limit.
func value(cm *costModel, stages []bfStage, b int64, mbs int, gpipe bool, cross func([]int) (int64, int64)) float64 {
	worst := 0.0
	for _, s := range stages {
		if int64(s.k) > b {
			return math.Inf(1)
		}
		c := cm.priceOps(s.ops, cm.newBlock(s.ops, cross), s.k, b, mbs)
		inflight := min(mbs, s.depth)
		if gpipe {
			inflight = mbs
		}
		if c.memory(inflight) > cm.limit || c.memory(1) > cm.limit {
			return math.Inf(1)
		}
		worst = math.Max(worst, math.Max(c.period, c.link))
	}
	return worst
}

// treePlans enumerates every plan of the DP's space under node n on exactly k
// devices, with depths relative to the node's exit.
func treePlans(n *snode, k int) [][]bfStage {
	var out [][]bfStage
	out = append(out, []bfStage{{n.ops, k, 1, false}})
	if n.kind == partition.Leaf {
		return out
	}
	return append(out, seqPlans(n, 0, k)...)
}

func entry(p []bfStage) int {
	e := 0
	for _, s := range p {
		e = max(e, s.depth)
	}
	return e
}

func seqPlans(n *snode, i, k int) [][]bfStage {
	last := len(n.kids) - 1
	var out [][]bfStage
	if n.kind == partition.Series && n.kids[i].kind == partition.Parallel {
		// join absorption: units i+1..p in the sink stage of one branch
		var tail []int
		for p := i + 1; p <= last; p++ {
			tail = append(tail, n.kids[p].ops...)
			for k1 := 1; k1 <= k; k1++ {
				if (p == last) != (k1 == k) {
					continue
				}
				rests := [][]bfStage{nil}
				if p < last {
					rests = seqPlans(n, p+1, k-k1)
				}
				for _, f := range groupHostPlans(n.kids[i], 0, k1, tail, true) {
					for _, r := range rests {
						out = append(out, append(shift(f, entry(r)), r...))
					}
				}
			}
		}
	}
	if n.kind == partition.Series {
		out = append(out, forkSeqPlans(n, i, k)...)
	}
	for p := i; p <= last; p++ {
		for k1 := 1; k1 <= k; k1++ {
			if (p == last) != (k1 == k) {
				continue
			}
			firsts := firstPlans(n, i, p, k1)
			rests := [][]bfStage{nil}
			if p < last {
				rests = seqPlans(n, p+1, k-k1)
			}
			for _, f := range firsts {
				for _, r := range rests {
					var plan []bfStage
					shift := 0
					if n.kind == partition.Series {
						shift = entry(r)
					}
					for _, s := range f {
						plan = append(plan, bfStage{s.ops, s.k, s.depth + shift, s.fork})
					}
					out = append(out, append(plan, r...))
				}
			}
		}
	}
	return out
}

// pairs joins every plan of firsts with every plan of rests.
func pairs(firsts, rests [][]bfStage) [][]bfStage {
	var out [][]bfStage
	for _, f := range firsts {
		for _, r := range rests {
			out = append(out, append(append([]bfStage(nil), f...), r...))
		}
	}
	return out
}

func shift(p []bfStage, by int) []bfStage {
	out := make([]bfStage, len(p))
	for i, s := range p {
		out[i] = bfStage{s.ops, s.k, s.depth + by, s.fork}
	}
	return out
}

func withTail(ops, tail []int) []int { return append(append([]int(nil), ops...), tail...) }

// groupHostPlans: parallel kids i.. side by side, exactly one part (if need)
// with the tail in its sink stage at depth 1, the others feeding it.
func groupHostPlans(n *snode, i, k int, tail []int, need bool) [][]bfStage {
	last := len(n.kids) - 1
	var out [][]bfStage
	for p := i; p <= last; p++ {
		for k1 := 1; k1 <= k; k1++ {
			if (p == last) != (k1 == k) {
				continue
			}
			type opt struct {
				plans [][]bfStage
				host  bool
			}
			var opts []opt
			if p == i {
				var plain [][]bfStage
				for _, q := range treePlans(n.kids[i], k1) {
					plain = append(plain, shift(q, 1))
				}
				opts = append(opts, opt{plain, false})
				if need {
					opts = append(opts, opt{hostPlans(n.kids[i], k1, tail), true})
				}
			} else {
				var ops []int
				for _, c := range n.kids[i : p+1] {
					ops = append(ops, c.ops...)
				}
				opts = append(opts, opt{[][]bfStage{{{ops, k1, 2, false}}}, false})
				if need {
					opts = append(opts, opt{[][]bfStage{{{withTail(ops, tail), k1, 1, false}}}, true})
				}
			}
			for _, o := range opts {
				still := need && !o.host
				var rests [][]bfStage
				switch {
				case p < last:
					rests = groupHostPlans(n, p+1, k-k1, tail, still)
				case !still:
					rests = [][]bfStage{nil}
				}
				out = append(out, pairs(o.plans, rests)...)
			}
		}
	}
	return out
}

// hostPlans: n planned with the tail in its sink stage (depth 1).
func hostPlans(n *snode, k int, tail []int) [][]bfStage {
	switch n.kind {
	case partition.Leaf:
		return [][]bfStage{{{withTail(n.ops, tail), k, 1, false}}}
	case partition.Parallel:
		return groupHostPlans(n, 0, k, tail, true)
	}
	return suffixHostPlans(n, 0, k, tail)
}

func suffixHostPlans(n *snode, i, k int, tail []int) [][]bfStage {
	last := len(n.kids) - 1
	var rest []int
	for _, c := range n.kids[i:] {
		rest = append(rest, c.ops...)
	}
	out := [][]bfStage{{{withTail(rest, tail), k, 1, false}}}
	if i == last && n.kids[i].kind != partition.Leaf {
		out = append(out, hostPlans(n.kids[i], k, tail)...)
	}
	for p := i; p < last; p++ {
		for k1 := 1; k1 < k; k1++ {
			firsts := firstPlans(n, i, p, k1)
			for _, r := range suffixHostPlans(n, p+1, k-k1, tail) {
				for _, f := range firsts {
					out = append(out, append(shift(f, entry(r)), r...))
				}
			}
		}
	}
	return out
}

// chainPlans enumerates every cut of the topological order into stages.
func chainPlans(order []int, k int) [][]bfStage {
	if k == 0 {
		return nil
	}
	var out [][]bfStage
	for p := 1; p <= len(order); p++ {
		for k1 := 1; k1 <= k; k1++ {
			if (p == len(order)) != (k1 == k) {
				continue
			}
			first := append([]int(nil), order[:p]...)
			if p == len(order) {
				out = append(out, []bfStage{{first, k1, 1, false}})
				continue
			}
			for _, r := range chainPlans(order[p:], k-k1) {
				out = append(out, append([]bfStage{{first, k1, entry(r) + 1, false}}, r...))
			}
		}
	}
	return out
}

func best(cm *costModel, plans [][]bfStage, b int64, mbs int, cross func([]int) (int64, int64)) float64 {
	v := math.Inf(1)
	for _, p := range plans {
		v = math.Min(v, value(cm, p, b, mbs, false, cross))
	}
	return v
}

func close(a, b float64) bool {
	if math.IsInf(a, 1) || math.IsInf(b, 1) {
		return a == b
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

type oracleCase struct {
	g      *dag.Graph
	o      Options
	b      int64
	mbs    int
	seed   int64
	ops, k int
}

func oracleCases(t *testing.T) []oracleCase {
	var cases []oracleCase
	for seed := int64(0); seed < 150; seed++ {
		n := 2 + int(seed%7) // 2..8 ops
		g, err := models.RandomDAG(seed, n, 64)
		if err != nil {
			t.Fatal(err)
		}
		k := 1 + int(seed%4)
		o, _ := Options{Device: plan.Profiles["v100"], Devices: k, DevicesPerNode: 2, Batch: 16}.withDefaults(16)
		// squeeze memory on some cases so that the memory rule binds
		var static int64
		for i := 0; i < g.NumOps(); i++ {
			static += g.Cost(i).Params * 16
		}
		switch seed % 3 {
		case 1:
			o.MemoryLimit = static/int64(k) + 1<<20
		case 2:
			o.MemoryLimit = static/2 + 1<<18
		}
		cases = append(cases, oracleCase{g: g, o: o, b: 4, mbs: 4, seed: seed, ops: n, k: k})
	}
	return cases
}

// TestGPPEqualsBruteForce: the DP's optimum equals an enumeration of every
// plan in the same search space.
func TestGPPEqualsBruteForce(t *testing.T) {
	feasible := 0
	for _, tc := range oracleCases(t) {
		cm := newCostModel(tc.g, &tc.o)
		tree := partition.Decompose(tc.g, 0)
		sp := newSpace(cm, tree.Root, cm.boundary)
		d := newDP(sp, tc.k, tc.b, tc.mbs, false)
		got, ok := d.minT(tc.k)
		want := best(cm, treePlans(sp.root, tc.k), tc.b, tc.mbs, cm.boundary)
		if !ok {
			got = math.Inf(1)
		}
		if !close(got, want) {
			t.Fatalf("seed %d (%d ops, %d devices): DP %v, brute force %v", tc.seed, tc.ops, tc.k, got, want)
		}
		if ok {
			feasible++
			checkExtract(t, tc, cm, sp, d, got)
		}
	}
	if feasible < 50 {
		t.Errorf("only %d feasible cases: the oracle barely ran", feasible)
	}
}

// checkExtract: the stages the DP rebuilds cover every op once, form a
// valid stage graph, use the devices, and meet the DP's T at the depths the
// DP counted, which are at least the real ones.
func checkExtract(t *testing.T, tc oracleCase, cm *costModel, sp *space, d *dp, T float64) {
	t.Helper()
	var plan []bfStage
	var stages [][]int
	devices, seen := 0, map[int]bool{}
	for _, a := range d.extract(sp.root, tc.k) {
		ops := sp.blocks[a.block].ops
		plan = append(plan, bfStage{ops, a.k, a.depth, false})
		stages = append(stages, ops)
		devices += a.k
		for _, op := range ops {
			if seen[op] {
				t.Fatalf("seed %d: op %d in two stages", tc.seed, op)
			}
			seen[op] = true
		}
	}
	if len(seen) != tc.g.NumOps() || devices != tc.k {
		t.Fatalf("seed %d: the rebuilt plan covers %d of %d ops on %d of %d devices", tc.seed, len(seen), tc.g.NumOps(), devices, tc.k)
	}
	sg, err := partition.NewStageGraph(tc.g, stages)
	if err != nil {
		t.Fatalf("seed %d: the rebuilt plan: %v", tc.seed, err)
	}
	for s, depth := range sg.Depth() {
		if depth > plan[s].depth {
			t.Fatalf("seed %d: stage %v is %d deep, the DP counted %d", tc.seed, stages[s], depth, plan[s].depth)
		}
	}
	if v := value(cm, plan, tc.b, tc.mbs, false, cm.boundary); !close(v, T) {
		t.Fatalf("seed %d: the rebuilt plan binds at %v, the DP at %v", tc.seed, v, T)
	}
}

// TestSPPEqualsBruteForce: spp's optimum equals every cut of the topological order.
func TestSPPEqualsBruteForce(t *testing.T) {
	for _, tc := range oracleCases(t) {
		cm := newCostModel(tc.g, &tc.o)
		cross := liveCross(tc.g, (*dag.Tensor).Bytes)
		sp := newSpace(cm, chainTree(chainUnits(tc.g, 1000)), cross)
		d := newDP(sp, tc.k, tc.b, tc.mbs, false)
		got, ok := d.minT(tc.k)
		if !ok {
			got = math.Inf(1)
		}
		want := best(cm, chainPlans(tc.g.Order(), tc.k), tc.b, tc.mbs, cross)
		if !close(got, want) {
			t.Fatalf("seed %d (%d ops, %d devices): spp %v, brute force %v", tc.seed, tc.ops, tc.k, got, want)
		}
	}
}

// TestGapToAllConvex compares gpp with the best plan over every partition into
// convex stages (real depths, any device split). That space is larger, so it
// can only be better; the test reports by how much, for the graph DP alone and
// for gpp as Search runs it (the better of the DP and spp's sequential DP).
func TestGapToAllConvex(t *testing.T) {
	var worst, sum, worstBoth, sumBoth float64
	n := 0
	for _, tc := range oracleCases(t) {
		if tc.ops > 7 {
			continue
		}
		cm := newCostModel(tc.g, &tc.o)
		tree := partition.Decompose(tc.g, 0)
		d := newDP(newSpace(cm, tree.Root, cm.boundary), tc.k, tc.b, tc.mbs, false)
		gpp, ok := d.minT(tc.k)
		all := bestConvex(t, cm, tc)
		if !ok {
			if !math.IsInf(all, 1) {
				t.Logf("seed %d: gpp found nothing, a convex plan reaches %.4g", tc.seed, all)
			}
			continue
		}
		if all > gpp*(1+1e-9) {
			t.Fatalf("seed %d: the larger space is worse (%v) than gpp (%v)", tc.seed, all, gpp)
		}
		gap := gpp/all - 1
		worst = math.Max(worst, gap)
		sum += gap
		cross := liveCross(tc.g, (*dag.Tensor).Bytes)
		seq := newDP(newSpace(cm, chainTree(chainUnits(tc.g, 1000)), cross), tc.k, tc.b, tc.mbs, false)
		both := gpp
		if spp, ok := seq.minT(tc.k); ok {
			both = math.Min(both, spp)
		}
		if all > both*(1+1e-9) {
			t.Fatalf("seed %d: the larger space is worse (%v) than gpp or spp (%v)", tc.seed, all, both)
		}
		worstBoth = math.Max(worstBoth, both/all-1)
		sumBoth += both/all - 1
		n++
	}
	t.Logf("gpp's DP vs all convex stage graphs over %d cases: mean gap %.2f%%, worst %.2f%%", n, 100*sum/float64(n), 100*worst)
	t.Logf("gpp as searched (the better of its DP and spp's) vs all convex: mean gap %.2f%%, worst %.2f%%", 100*sumBoth/float64(n), 100*worstBoth)
}

// bestConvex enumerates set partitions into valid stage graphs and device splits.
func bestConvex(t *testing.T, cm *costModel, tc oracleCase) float64 {
	ops := tc.g.Order()
	bestV := math.Inf(1)
	assign := make([]int, len(ops))
	var rec func(i, blocks int)
	rec = func(i, blocks int) {
		if i == len(ops) {
			if blocks > tc.k {
				return
			}
			stages := make([][]int, blocks)
			for j, op := range ops {
				stages[assign[j]] = append(stages[assign[j]], op)
			}
			sg, err := partition.NewStageGraph(tc.g, stages)
			if err != nil {
				return
			}
			depth := sg.Depth()
			for _, ks := range compositions(tc.k, blocks) {
				var plan []bfStage
				for s := range stages {
					plan = append(plan, bfStage{stages[s], ks[s], depth[s], false})
				}
				bestV = math.Min(bestV, value(cm, plan, tc.b, tc.mbs, false, cm.boundary))
			}
			return
		}
		for b := 0; b <= blocks; b++ {
			assign[i] = b
			nb := blocks
			if b == blocks {
				nb++
			}
			rec(i+1, nb)
		}
	}
	rec(0, 0)
	return bestV
}

func compositions(total, parts int) [][]int {
	if parts == 1 {
		return [][]int{{total}}
	}
	var out [][]int
	for first := 1; first <= total-(parts-1); first++ {
		for _, r := range compositions(total-first, parts-1) {
			out = append(out, append([]int{first}, r...))
		}
	}
	return out
}

// firstPlans lists the ways to run units i..p of series node n as the first
// stage(s) on k1 devices: kid i solved on its own, or the units merged.
func firstPlans(n *snode, i, p, k1 int) [][]bfStage {
	if p == i && n.kids[i].kind != partition.Leaf {
		return treePlans(n.kids[i], k1)
	}
	var ops []int
	for _, c := range n.kids[i : p+1] {
		ops = append(ops, c.ops...)
	}
	return [][]bfStage{{{ops, k1, 1, false}}}
}

func opsOf(kids []*snode) []int {
	var ops []int
	for _, c := range kids {
		ops = append(ops, c.ops...)
	}
	return ops
}

// forkSeqPlans: unit i of series node n in a source stage of parallel kid
// q = i+1 (fork absorption), units q+1..p (if any) in one of its sinks, the
// units after p planned on the devices left.
func forkSeqPlans(n *snode, i, k int) [][]bfStage {
	last := len(n.kids) - 1
	var out [][]bfStage
	if q := i + 1; q <= last && n.kids[q].kind == partition.Parallel { // unit i is the head
		head := n.kids[i].ops
		for p := q; p <= last; p++ {
			var tail []int
			if p > q {
				tail = opsOf(n.kids[q+1 : p+1])
			}
			for k1 := 1; k1 <= k; k1++ {
				if (p == last) != (k1 == k) {
					continue
				}
				rests := [][]bfStage{nil}
				if p < last {
					rests = seqPlans(n, p+1, k-k1)
				}
				for _, f := range forkGroupPlans(n.kids[q], 0, k1, head, tail, true, tail != nil) {
					for _, r := range rests {
						out = append(out, fixFork(append(shift(f, entry(r)), r...), entry(r)))
					}
				}
			}
		}
	}
	return out
}

// fixFork sets the depth of the head's stage: one more than every other
// stage of the plan, and than after+1 (the DP's floor).
func fixFork(p []bfStage, after int) []bfStage {
	d := after + 1
	for _, s := range p {
		if !s.fork {
			d = max(d, s.depth)
		}
	}
	out := make([]bfStage, len(p))
	for i, s := range p {
		out[i] = s
		if s.fork {
			out[i] = bfStage{s.ops, s.k, d + 1, false}
		}
	}
	return out
}

// forkGroupPlans: parallel kids i.. side by side, one part (if needF) with
// the head in its source stage; with a tail, one other part (if needJ) with
// the tail in its sink stage at depth 1, which the others feed.
func forkGroupPlans(n *snode, i, k int, head, tail []int, needF, needJ bool) [][]bfStage {
	last := len(n.kids) - 1
	base := 0
	if tail != nil {
		base = 1
	}
	var out [][]bfStage
	for p := i; p <= last; p++ {
		for k1 := 1; k1 <= k; k1++ {
			if (p == last) != (k1 == k) {
				continue
			}
			type opt struct {
				plans [][]bfStage
				f, j  bool // what it placed
			}
			ops := opsOf(n.kids[i : p+1])
			var opts []opt
			if p == i {
				var plain [][]bfStage
				for _, q := range treePlans(n.kids[i], k1) {
					plain = append(plain, shift(q, base))
				}
				opts = append(opts, opt{plain, false, false})
				if tail != nil && needJ {
					opts = append(opts, opt{hostPlans(n.kids[i], k1, tail), false, true})
				}
				if needF {
					var fp [][]bfStage
					for _, q := range forkSolvePlans(n.kids[i], k1, head) {
						fp = append(fp, shift(q, base))
					}
					opts = append(opts, opt{fp, true, false})
				}
			} else {
				opts = append(opts, opt{[][]bfStage{{{ops, k1, base + 1, false}}}, false, false})
				if tail != nil && needJ {
					opts = append(opts, opt{[][]bfStage{{{withTail(ops, tail), k1, 1, false}}}, false, true})
				}
				if needF {
					opts = append(opts, opt{[][]bfStage{{{withTail(head, ops), k1, 0, true}}}, true, false})
				}
			}
			for _, o := range opts {
				f, j := needF && !o.f, needJ && !o.j
				var rests [][]bfStage
				switch {
				case p < last:
					rests = forkGroupPlans(n, p+1, k-k1, head, tail, f, j)
				case !f && !j:
					rests = [][]bfStage{nil}
				}
				out = append(out, pairs(o.plans, rests)...)
			}
		}
	}
	return out
}

// forkSolvePlans: n with the head in its source stage, depths relative to
// its exit (the head's stage marked, its depth set later).
func forkSolvePlans(n *snode, k int, head []int) [][]bfStage {
	switch n.kind {
	case partition.Leaf:
		return [][]bfStage{{{withTail(head, n.ops), k, 0, true}}}
	case partition.Parallel:
		return forkGroupPlans(n, 0, k, head, nil, true, false)
	}
	last := len(n.kids) - 1
	out := [][]bfStage{{{withTail(head, n.ops), k, 0, true}}}
	for p := 0; p < last; p++ {
		for k1 := 1; k1 < k; k1++ {
			firsts := [][]bfStage{{{withTail(head, opsOf(n.kids[:p+1])), k1, 0, true}}}
			if p == 0 && n.kids[0].kind != partition.Leaf {
				firsts = append(firsts, forkSolvePlans(n.kids[0], k1, head)...)
			}
			for _, r := range seqPlans(n, p+1, k-k1) {
				for _, f := range firsts {
					out = append(out, append(shift(f, entry(r)), r...))
				}
			}
		}
	}
	if n.kids[0].kind == partition.Parallel {
		for p := 1; p <= last; p++ {
			tail := opsOf(n.kids[1 : p+1])
			for k1 := 1; k1 <= k; k1++ {
				if (p == last) != (k1 == k) {
					continue
				}
				rests := [][]bfStage{nil}
				if p < last {
					rests = seqPlans(n, p+1, k-k1)
				}
				for _, f := range forkGroupPlans(n.kids[0], 0, k1, head, tail, true, true) {
					for _, r := range rests {
						out = append(out, append(shift(f, entry(r)), r...))
					}
				}
			}
		}
	}
	return out
}

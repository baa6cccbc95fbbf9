package search

import (
	"math"
	"sort"

	"github.com/graphpipe/graphpipe/partition"
)

const inf = math.MaxInt16

// dp answers, for a target time T per micro-batch, the fewest micro-batches
// in flight at the entry of each subproblem (its depth in stages, plus the
// depth after it), or inf when nothing fits. See doc.go for the recurrences.
type dp struct {
	sp      *space
	D       int   // devices, in groups of g: every k below counts groups
	g       int   // devices per group (dpGroup)
	b       int64 // micro-batch
	mbs     int   // micro-batches per iteration
	gpipe   bool
	T       float64
	costs   [][]stageCost // [block][k], k ≤ min(D, b)
	fit     []fitEntry    // [block·(kmax+1)+k]: what fits needs, packed
	kmax    int
	solveM  []table   // [node], index k·(D+1)+δ
	suffixM []table   // [node], index at(n, i, k, δ)
	groupM  []table   // [node], as suffixM
	hostG   [][]table // [tail][node]: groupHost, index as suffixM, ×2 for need
	hostS   [][]table // [tail][node]: suffixHost, index as suffixM
	tables  []*table  // every table allocated, refilled at each reset
	ts      []float64 // candidates(), once computed
	capped  bool      // minTBelow may make only budget more solves
	budget  int
	// tailFloor is, per tail, the least per-micro-batch time of any stage that
	// absorbs it: a tail whose floor exceeds T cannot be absorbed, nor can a
	// longer one.
	tailFloor []float64
	headFloor []float64              // the same for heads (fork absorption)
	forkM     map[forkKey]forkChoice // fork absorption's answers at T (fork.go)

	// rcosts and rfit are costs and fit for the stages recomputing their
	// forward during backward, when the DP may choose that (recompute.go);
	// nil otherwise
	rcosts [][]stageCost
	rfit   []fitEntry
}

// table memoises one recurrence at one node: values (-1: unknown) and the
// choice that reached each.
type table struct {
	v  []int16
	ch []choice
}

func (d *dp) newTable(n int) table {
	t := table{v: make([]int16, n), ch: make([]choice, n)}
	for i := range t.v {
		t.v[i] = -1
	}
	d.tables = append(d.tables, &t)
	return t
}

// fitEntry is a stage's binding time and memory terms, for the hot check.
type fitEntry struct {
	t     float64 // max(period, link)
	maxIn int     // the most micro-batches in flight that fit in memory (maxInFlight)
}

type choice struct {
	p, k1  int16
	absorb bool // suffix: kid i ran with units i+1..p absorbed into a branch's sink
	host   bool // groupHost: the first part hosts the tail
	// suffix's fork absorption: unit i in a source stage of parallel kid
	// i+1 at depth c+1, units i+2..p (if any) in one of its sinks
	fork bool
	c    int16
}

// maxDPDevices is the most device counts the DP tells apart: its tables grow
// with the square of them and its splits with the cube. Past it, devices go
// in groups (dpGroup), each stage on a whole number of groups. MMT on v100s
// (16 samples per device) without groups: 64 devices 3.4 s of search, 128
// 11.4 s in 0.69 GiB, 512 191 s in 7.6 GiB, 2048 killed for memory at 23.2 GiB;
// a 300-op random DAG on 128 devices 125 s. With groups past 64: 3.4-3.5 s
// and 0.31-0.34 GiB for MMT from 512 to 4096 devices; on 128 devices the
// same plans for MMT, CANDLE-Uno and the Transformer, DLRM's 0.1% slower
// (74858 against 74930 samples/s), in 2.1-4.2 s instead of 7.0-11.4 s.
var maxDPDevices = 64

// dpGroup is the devices per group for the DP: 1 up to maxDPDevices, else
// the least group size that makes at most maxDPDevices groups, or a little
// more where that divides the devices evenly (at most twice as large).
func dpGroup(devices int) int {
	if devices <= maxDPDevices {
		return 1
	}
	lo := (devices + maxDPDevices - 1) / maxDPDevices
	for g := lo; g <= 2*lo; g++ {
		if devices%g == 0 {
			return g
		}
	}
	return lo
}

func newDP(sp *space, devices int, b int64, mbs int, gpipe bool) *dp {
	g := dpGroup(devices)
	d := &dp{sp: sp, D: devices / g, g: g, b: b, mbs: mbs, gpipe: gpipe}
	d.kmax = int(min(int64(d.D), b/int64(g))) // a micro-batch split over no more devices than samples
	d.costs = make([][]stageCost, len(sp.blocks))
	for id := range sp.blocks {
		d.costs[id] = make([]stageCost, d.kmax+1)
		for k := 1; k <= d.kmax; k++ {
			d.costs[id][k] = sp.price(id, k*g, b, mbs)
		}
	}
	d.fit = d.fitEntries(d.costs)
	d.tailFloor, d.headFloor = d.floors(sp.tails), d.floors(sp.heads)
	return d
}

// fitEntries packs what fits needs of every block on every device count.
func (d *dp) fitEntries(costs [][]stageCost) []fitEntry {
	fit := make([]fitEntry, len(costs)*(d.kmax+1))
	for id := range costs {
		for k := 1; k <= d.kmax; k++ {
			c := &costs[id][k]
			fit[id*(d.kmax+1)+k] = fitEntry{math.Max(c.period, c.link), maxInFlight(satAdd(c.static, c.work), c.stashPerMB, d.sp.cm.limit)}
		}
	}
	return fit
}

// floors is, per run of units, the least per-micro-batch time of any stage
// that absorbs it.
func (d *dp) floors(runs []*tailSpec) []float64 {
	out := make([]float64, len(runs))
	for _, t := range runs {
		out[t.id] = math.Inf(1)
		for _, u := range t.unions {
			for k := 1; k <= d.kmax; k++ {
				if c := &d.costs[u][k]; c.memory(1) <= d.sp.cm.limit {
					out[t.id] = math.Min(out[t.id], math.Max(c.period, c.link))
				}
			}
		}
	}
	return out
}

// candidates are the distinct per-micro-batch times of every block on every
// device count that fits in memory with one micro-batch in flight, ascending:
// the binding T of any plan is one of them.
func (d *dp) candidates() []float64 {
	var ts []float64
	for _, costs := range [][][]stageCost{d.costs, d.rcosts} {
		for id := range costs {
			for k := 1; k <= d.kmax; k++ {
				c := &costs[id][k]
				if c.memory(1) <= d.sp.cm.limit {
					ts = append(ts, math.Max(c.period, c.link))
				}
			}
		}
	}
	sort.Float64s(ts)
	out := ts[:0]
	for i, t := range ts {
		if i == 0 || t != ts[i-1] {
			out = append(out, t)
		}
	}
	return out
}

// reset sets the target time and forgets every memoised value.
func (d *dp) reset(T float64) {
	d.T = T
	d.forkM = map[forkKey]forkChoice{}
	if d.solveM == nil {
		n, w := len(d.sp.nodes), d.D+1
		d.solveM, d.suffixM, d.groupM = make([]table, n), make([]table, n), make([]table, n)
		for _, nd := range d.sp.nodes {
			d.solveM[nd.id] = d.newTable(w * w)
			if len(nd.kids) > 0 {
				d.suffixM[nd.id] = d.newTable(len(nd.kids) * w * w)
				d.groupM[nd.id] = d.newTable(len(nd.kids) * w * w)
			}
		}
		d.hostG, d.hostS = make([][]table, len(d.sp.tails)), make([][]table, len(d.sp.tails))
		for t := range d.sp.tails {
			d.hostG[t], d.hostS[t] = make([]table, n), make([]table, n)
		}
		return
	}
	for _, t := range d.tables {
		for i := range t.v {
			t.v[i] = -1
		}
	}
}

// at is the index of (unit i, k devices, δ after) in a node's suffix, group
// and host tables: unit innermost, because a split's loops walk the units
// after it at one device count.
func (d *dp) at(n *snode, i, k, δ int) int { return (δ*(d.D+1)+k)*len(n.kids) + i }

// hostTable returns the lazily allocated absorption table of (tail, node).
func (d *dp) hostTable(tabs [][]table, t *tailSpec, n *snode, size int) table {
	if tabs[t.id][n.id].v == nil {
		tabs[t.id][n.id] = d.newTable(size)
	}
	return tabs[t.id][n.id]
}

func (d *dp) inflight(depth int) int {
	if d.gpipe {
		return d.mbs
	}
	return min(d.mbs, depth)
}

// fits says whether block id on k devices, depth stages from the end, runs
// within T and fits in memory, keeping its activations or, where the DP may
// choose it, recomputing them.
func (d *dp) fits(id, k, depth int) bool {
	if k < 1 || k > d.kmax {
		return false
	}
	at, in := id*(d.kmax+1)+k, d.inflight(depth)
	if e := &d.fit[at]; e.t <= d.T && in <= e.maxIn {
		return true
	}
	if d.rfit == nil {
		return false
	}
	e := &d.rfit[at]
	return e.t <= d.T && in <= e.maxIn
}

// solve is the fewest in flight at the entry of n on exactly k devices with δ
// stages after it.
func (d *dp) solve(n *snode, k, δ int) int {
	if k < 1 || δ >= d.D {
		return inf
	}
	idx := k*(d.D+1) + δ
	tab := d.solveM[n.id]
	if v := tab.v[idx]; v >= 0 {
		return int(v)
	}
	best, ch := inf, choice{p: -1, k1: int16(k)}
	switch {
	case d.fits(n.whole(), k, δ+1):
		best = δ + 1
	case n.kind == partition.Series:
		best = d.suffix(n, 0, k, δ)
		ch.p = -2
	case n.kind == partition.Parallel:
		best = d.group(n, 0, k, δ)
		ch.p = -3
	}
	tab.v[idx], tab.ch[idx] = int16(best), ch
	return best
}

// suffix covers units i.. of series node n: a first stage of units i..p (or
// kid i solved on its own) on k1 devices, then the rest on k-k1. The last
// interval takes every device left.
func (d *dp) suffix(n *snode, i, k, δ int) int {
	idx := d.at(n, i, k, δ)
	tab := d.suffixM[n.id]
	if v := tab.v[idx]; v >= 0 {
		return int(v)
	}
	last := len(n.units) - 1
	best, ch := inf, choice{}
	// try prices units i..p on k1 devices; stop reports that longer intervals
	// cannot meet T either.
	try := func(p, k1 int) (stop bool) {
		kid := p == i && n.kids[i].kind != partition.Leaf
		if !kid && !d.fitsTime(n.blk[i][p-i], k1) {
			return true // checked before the rest is solved: most intervals stop here
		}
		after := d.rest(n, p, k-k1, δ)
		if after >= inf {
			return false
		}
		r := inf
		switch {
		case kid:
			r = d.solve(n.kids[i], k1, after)
		case d.fits(n.blk[i][p-i], k1, after+1):
			r = after + 1
		}
		if r < best {
			best, ch = r, choice{p: int16(p), k1: int16(k1)}
		}
		return false
	}
	try(last, k)
	// a first interval short of the last unit has a stage after it, so it
	// holds at least δ+2: once best is δ+2 no split can improve it
	for k1 := 1; k1 < k && k1 <= d.kmax && best > δ+2; k1++ {
		for p := i; p < last && best > δ+2; p++ {
			if try(p, k1) {
				break
			}
		}
	}
	if n.kids[i].kind == partition.Parallel {
		// join absorption: kid i's branches with units i+1..p in one branch's sink
		for p := i + 1; p <= last && best > δ+1; p++ {
			t := d.sp.tailAt[[3]int{n.id, i + 1, p}]
			if d.tailFloor[t.id] > d.T {
				break
			}
			lo, hi := kRange(p == last, k)
			for k1 := lo; k1 <= hi && best > δ+1; k1++ {
				after := d.rest(n, p, k-k1, δ)
				if after >= inf {
					continue
				}
				if r := d.groupHost(n.kids[i], 0, k1, after, t, true); r < best {
					best, ch = r, choice{p: int16(p), k1: int16(k1), absorb: true}
				}
			}
		}
	}
	if best > δ+2 {
		if r, fch := d.forkSuffix(n, i, k, δ, best); r < best {
			best, ch = r, fch
		}
	}
	tab.v[idx], tab.ch[idx] = int16(best), ch
	return best
}

// kRange is the devices a part may take of k: all of them when it is the
// last part, else 1..k-1 (the rest needs at least one).
func kRange(last bool, k int) (lo, hi int) {
	if last {
		return k, k
	}
	return 1, k - 1
}

// rest is the depth of series node n's units after p on k devices: δ when p
// is the last unit, else the best suffix from p+1.
func (d *dp) rest(n *snode, p, k, δ int) int {
	if p == len(n.units)-1 {
		return δ
	}
	return d.suffix(n, p+1, k, δ)
}

// fitsTime says whether a block meets T and its memory floor, ignoring depth.
func (d *dp) fitsTime(id, k int) bool {
	if k < 1 || k > d.kmax {
		return false
	}
	e := &d.fit[id*(d.kmax+1)+k]
	return e.t <= d.T && e.maxIn >= 1
}

// group covers kids i.. of parallel node n side by side: kids i..p merged into
// one stage (or kid i solved on its own) on k1 devices, the rest on k-k1.
func (d *dp) group(n *snode, i, k, δ int) int {
	idx := d.at(n, i, k, δ)
	tab := d.groupM[n.id]
	if v := tab.v[idx]; v >= 0 {
		return int(v)
	}
	last := len(n.units) - 1
	best, ch := inf, choice{}
	try := func(p, k1 int) (stop bool) {
		first := inf
		switch {
		case p == i:
			first = d.solve(n.kids[i], k1, δ)
		case d.fits(n.blk[i][p-i], k1, δ+1):
			first = δ + 1
		case !d.fitsTime(n.blk[i][p-i], k1):
			return true
		}
		if first >= best {
			return false
		}
		rest := 0
		if p < last {
			rest = d.group(n, p+1, k-k1, δ)
		}
		if r := max(first, rest); r < best {
			best, ch = r, choice{p: int16(p), k1: int16(k1)}
		}
		return false
	}
	try(last, k)
	for k1 := 1; k1 < k && k1 <= d.kmax && best > δ+1; k1++ {
		for p := i; p < last && best > δ+1; p++ {
			if try(p, k1) {
				break
			}
		}
	}
	tab.v[idx], tab.ch[idx] = int16(best), ch
	return best
}

// assignment is one stage of a solution: a block, its devices and its depth
// as the DP counted it.
type assignment struct {
	block, k, depth int
}

// extract rebuilds the stages of the solution at the root after a solve.
func (d *dp) extract(root *snode, k int) []assignment {
	var out []assignment
	d.extractSolve(root, k, 0, &out)
	return out
}

func (d *dp) extractSolve(n *snode, k, δ int, out *[]assignment) {
	idx := k*(d.D+1) + δ
	switch d.solveM[n.id].ch[idx].p {
	case -1:
		*out = append(*out, assignment{n.whole(), k, δ + 1})
	case -2:
		d.extractSuffix(n, 0, k, δ, out)
	case -3:
		d.extractGroup(n, 0, k, δ, out)
	}
}

func (d *dp) extractSuffix(n *snode, i, k, δ int, out *[]assignment) {
	ch := d.suffixM[n.id].ch[d.at(n, i, k, δ)]
	p, k1 := int(ch.p), int(ch.k1)
	last := len(n.units) - 1
	after := δ
	if p < last {
		after = d.suffix(n, p+1, k-k1, δ)
	}
	switch {
	case ch.fork:
		q, c := i+1, int(ch.c)
		var t *tailSpec
		if p > q {
			t = d.sp.tailAt[[3]int{n.id, q + 1, p}]
		}
		d.extractForkGroup(n.kids[q], 0, k1, after, c, d.sp.headAt[[2]int{n.id, i}], t, true, t != nil, out)
	case ch.absorb:
		d.extractGroupHost(n.kids[i], 0, k1, after, d.sp.tailAt[[3]int{n.id, i + 1, p}], true, out)
	case p == i && n.kids[i].kind != partition.Leaf:
		d.extractSolve(n.kids[i], k1, after, out)
	default:
		*out = append(*out, assignment{n.blk[i][p-i], k1, after + 1})
	}
	if p < last {
		d.extractSuffix(n, p+1, k-k1, δ, out)
	}
}

func (d *dp) extractGroup(n *snode, i, k, δ int, out *[]assignment) {
	ch := d.groupM[n.id].ch[d.at(n, i, k, δ)]
	p, k1 := int(ch.p), int(ch.k1)
	if p == i {
		d.extractSolve(n.kids[i], k1, δ, out)
	} else {
		*out = append(*out, assignment{n.blk[i][p-i], k1, δ + 1})
	}
	if p < len(n.units)-1 {
		d.extractGroup(n, p+1, k-k1, δ, out)
	}
}

// minT finds the smallest candidate T at which the root fits on k devices,
// by binary search over the candidates. ok is false if none fits.
func (d *dp) minT(k int) (float64, bool) {
	T, _, ok := d.minTBelow(k, 0, inf, math.Inf(1))
	return T, ok
}

// minTBelow finds the smallest candidate T, from the from-th on and at most
// maxT, at which the root fits on k devices with fewer than depth
// micro-batches in flight at its entry (the DP's value never grows with T, so
// a binary search finds it), and leaves the DP solved there. It returns T
// and the candidate's index. With capped set, it stops when its budget of
// solves is spent, with the feasible candidate it has (a shallower plan,
// perhaps not at the least T of its depth) or none.
func (d *dp) minTBelow(k, from, depth int, maxT float64) (float64, int, bool) {
	if d.ts == nil {
		d.ts = d.candidates()
	}
	ts := d.ts
	top := sort.SearchFloat64s(ts, maxT) // first above maxT, or equal
	if top < len(ts) && ts[top] == maxT {
		top++
	}
	if from >= top {
		return 0, 0, false
	}
	feasible := func(i int) bool {
		d.budget--
		d.reset(ts[i])
		return d.solve(d.sp.root, k, 0) < depth
	}
	spent := func() bool { return d.capped && d.budget <= 0 }
	// check the top, then bisect
	if spent() || !feasible(top-1) {
		return 0, 0, false
	}
	lo, hi := from, top-1
	for lo < hi && !spent() { // out of budget: hi is a frontier point, if not the least T of its depth
		mid := (lo + hi) / 2
		if feasible(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	d.reset(ts[hi])
	d.solve(d.sp.root, k, 0)
	return ts[hi], hi, true
}

// depthAt solves at the largest candidate T at most T on k devices and
// returns the root's depth there (inf when nothing fits); ok is false when
// the budget is spent.
func (d *dp) depthAt(k int, T float64) (int, bool) {
	if d.capped && d.budget <= 0 {
		return 0, false
	}
	if d.ts == nil {
		d.ts = d.candidates()
	}
	i := sort.SearchFloat64s(d.ts, T)
	if i == len(d.ts) || d.ts[i] > T {
		i--
	}
	if i < 0 {
		return inf, true
	}
	d.budget--
	d.reset(d.ts[i])
	return d.solve(d.sp.root, k, 0), true
}

// depth is the root's value after a solve on k devices: the micro-batches in
// flight at its entry, 1 + the longest stage path.
func (d *dp) depth(k int) int { return d.solve(d.sp.root, k, 0) }

// groupHost covers kids i.. of parallel node n where, if need, one part's sink
// stage absorbs tail t. The tail's stage sits δ+1 from the end; every other
// branch feeds it, so its exit is δ+1.
func (d *dp) groupHost(n *snode, i, k, δ int, t *tailSpec, need bool) int {
	if k < 1 || δ+1 >= d.D {
		return inf
	}
	tab, idx := d.hostGroupIdx(n, i, k, δ, t, need)
	if v := tab.v[idx]; v >= 0 {
		return int(v)
	}
	last := len(n.units) - 1
	best, ch := inf, choice{}
	consider := func(p, k1 int, first int, host bool) {
		if first >= best {
			return
		}
		still := need && !host
		rest := 0
		switch {
		case p < last:
			rest = d.groupHost(n, p+1, k-k1, δ, t, still)
		case still:
			rest = inf
		}
		if r := max(first, rest); r < best {
			best, ch = r, choice{p: int16(p), k1: int16(k1), host: host}
		}
	}
	// a part short of the last kid leaves a part after it, and one of the two
	// feeds the host from δ+2: only the whole group as the host's stage holds
	// δ+1, so past δ+2 only p = last can improve, and past δ+1 nothing
	for p := i; p <= last; p++ {
		if best <= δ+1 || p < last && best <= δ+2 {
			continue
		}
		blk, union := -1, -1 // units i..p as one stage, alone and with the tail
		if p > i {
			blk = n.blk[i][p-i]
			if need {
				union = t.unions[blk]
			}
		}
		lo, hi := kRange(p == last, k) // the last part takes every device left
		for k1 := lo; k1 <= hi && !(p < last && best <= δ+2); k1++ {
			if p == i {
				consider(p, k1, d.solve(n.kids[i], k1, δ+1), false)
				if need {
					consider(p, k1, d.hostSolve(n.kids[i], k1, δ, t), true)
				}
				continue
			}
			if d.fits(blk, k1, δ+2) {
				consider(p, k1, δ+2, false)
			}
			if need && d.fits(union, k1, δ+1) {
				consider(p, k1, δ+1, true)
			}
		}
	}
	tab.v[idx], tab.ch[idx] = int16(best), ch
	return best
}

func (d *dp) hostGroupIdx(n *snode, i, k, δ int, t *tailSpec, need bool) (table, int) {
	w := d.D + 1
	idx := d.at(n, i, k, δ) * 2
	if need {
		idx++
	}
	return d.hostTable(d.hostG, t, n, len(n.kids)*w*w*2), idx
}

func (d *dp) hostSuffixIdx(n *snode, i, k, δ int, t *tailSpec) (table, int) {
	w := d.D + 1
	return d.hostTable(d.hostS, t, n, len(n.kids)*w*w), d.at(n, i, k, δ)
}

// hostSolve is n planned with tail t in its sink stage, δ after the tail.
func (d *dp) hostSolve(n *snode, k, δ int, t *tailSpec) int {
	switch n.kind {
	case partition.Leaf:
		if d.fits(t.unions[n.whole()], k, δ+1) {
			return δ + 1
		}
		return inf
	case partition.Series:
		return d.suffixHost(n, 0, k, δ, t)
	}
	return d.groupHost(n, 0, k, δ, t, true)
}

// suffixHost is suffix with tail t absorbed into the last interval's stage.
func (d *dp) suffixHost(n *snode, i, k, δ int, t *tailSpec) int {
	if k < 1 {
		return inf
	}
	if δ >= d.D {
		return inf
	}
	tab, idx := d.hostSuffixIdx(n, i, k, δ, t)
	if v := tab.v[idx]; v >= 0 {
		return int(v)
	}
	last := len(n.units) - 1
	best, ch := inf, choice{}
	if d.fits(t.unions[n.blk[i][last-i]], k, δ+1) {
		best, ch = δ+1, choice{p: int16(last), k1: int16(k)}
	} else if i == last && n.kids[i].kind != partition.Leaf {
		if r := d.hostSolve(n.kids[i], k, δ, t); r < best {
			best, ch = r, choice{p: int16(last), k1: int16(k), host: true}
		}
	}
	for k1 := 1; k1 < k && k1 <= d.kmax && best > δ+2; k1++ { // δ+2 at best, as in suffix
		for p := i; p < last && best > δ+2; p++ {
			kid := p == i && n.kids[i].kind != partition.Leaf
			if !kid && !d.fitsTime(n.blk[i][p-i], k1) {
				break // before the rest is solved, as in suffix
			}
			after := d.suffixHost(n, p+1, k-k1, δ, t)
			if after >= inf {
				continue
			}
			r := inf
			if kid {
				r = d.solve(n.kids[i], k1, after)
			} else if d.fits(n.blk[i][p-i], k1, after+1) {
				r = after + 1
			}
			if r < best {
				best, ch = r, choice{p: int16(p), k1: int16(k1)}
			}
		}
	}
	tab.v[idx], tab.ch[idx] = int16(best), ch
	return best
}

func (d *dp) extractGroupHost(n *snode, i, k, δ int, t *tailSpec, need bool, out *[]assignment) {
	tab, idx := d.hostGroupIdx(n, i, k, δ, t, need)
	ch := tab.ch[idx]
	p, k1 := int(ch.p), int(ch.k1)
	switch {
	case p == i && ch.host:
		d.extractHost(n.kids[i], k1, δ, t, out)
	case p == i:
		d.extractSolve(n.kids[i], k1, δ+1, out)
	case ch.host:
		*out = append(*out, assignment{t.unions[n.blk[i][p-i]], k1, δ + 1})
	default:
		*out = append(*out, assignment{n.blk[i][p-i], k1, δ + 2})
	}
	if p < len(n.units)-1 {
		d.extractGroupHost(n, p+1, k-k1, δ, t, need && !ch.host, out)
	}
}

func (d *dp) extractHost(n *snode, k, δ int, t *tailSpec, out *[]assignment) {
	switch n.kind {
	case partition.Leaf:
		*out = append(*out, assignment{t.unions[n.whole()], k, δ + 1})
	case partition.Series:
		d.extractSuffixHost(n, 0, k, δ, t, out)
	default:
		d.extractGroupHost(n, 0, k, δ, t, true, out)
	}
}

func (d *dp) extractSuffixHost(n *snode, i, k, δ int, t *tailSpec, out *[]assignment) {
	tab, idx := d.hostSuffixIdx(n, i, k, δ, t)
	ch := tab.ch[idx]
	p, k1 := int(ch.p), int(ch.k1)
	last := len(n.units) - 1
	if p == last {
		if ch.host {
			d.extractHost(n.kids[i], k, δ, t, out)
		} else {
			*out = append(*out, assignment{t.unions[n.blk[i][last-i]], k, δ + 1})
		}
		return
	}
	after := d.suffixHost(n, p+1, k-k1, δ, t)
	if p == i && n.kids[i].kind != partition.Leaf {
		d.extractSolve(n.kids[i], k1, after, out)
	} else {
		*out = append(*out, assignment{n.blk[i][p-i], k1, after + 1})
	}
	d.extractSuffixHost(n, p+1, k-k1, δ, t, out)
}

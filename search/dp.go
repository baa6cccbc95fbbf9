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
	D       int   // devices
	b       int64 // micro-batch
	mbs     int   // micro-batches per iteration
	gpipe   bool
	T       float64
	costs   [][]stageCost // [block][k], k ≤ min(D, b)
	kmax    int
	solveM  [][]int16 // [node][k·(D+1)+δ]
	suffixM [][]int16 // [node][(i·(D+1)+k)·(D+1)+δ]
	groupM  [][]int16
	choice  map[memoKey]choice
}

type memoKey struct {
	tab, node, idx int
}

type choice struct{ p, k1 int16 }

func newDP(sp *space, devices int, b int64, mbs int, gpipe bool) *dp {
	d := &dp{sp: sp, D: devices, b: b, mbs: mbs, gpipe: gpipe, kmax: int(min(int64(devices), b))}
	d.costs = make([][]stageCost, len(sp.blocks))
	for id := range sp.blocks {
		d.costs[id] = make([]stageCost, d.kmax+1)
		for k := 1; k <= d.kmax; k++ {
			d.costs[id][k] = sp.price(id, k, b, mbs)
		}
	}
	return d
}

// candidates are the distinct per-micro-batch times of every block on every
// device count that fits in memory with one micro-batch in flight, ascending:
// the binding T of any plan is one of them.
func (d *dp) candidates() []float64 {
	var ts []float64
	for id := range d.costs {
		for k := 1; k <= d.kmax; k++ {
			c := &d.costs[id][k]
			if c.memory(1) <= d.sp.cm.limit {
				ts = append(ts, math.Max(c.period, c.link))
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

func (d *dp) reset(T float64) {
	d.T = T
	n := len(d.sp.nodes)
	w := d.D + 1
	d.solveM = make([][]int16, n)
	d.suffixM = make([][]int16, n)
	d.groupM = make([][]int16, n)
	for _, nd := range d.sp.nodes {
		d.solveM[nd.id] = fill(w * w)
		if len(nd.kids) > 0 {
			d.suffixM[nd.id] = fill(len(nd.kids) * w * w)
			d.groupM[nd.id] = fill(len(nd.kids) * w * w)
		}
	}
	d.choice = map[memoKey]choice{}
}

func fill(n int) []int16 {
	s := make([]int16, n)
	for i := range s {
		s[i] = -1
	}
	return s
}

func (d *dp) inflight(depth int) int {
	if d.gpipe {
		return d.mbs
	}
	return min(d.mbs, depth)
}

// fits says whether block id on k devices, depth stages from the end, runs
// within T and fits in memory.
func (d *dp) fits(id, k, depth int) bool {
	if k < 1 || k > d.kmax {
		return false
	}
	c := &d.costs[id][k]
	return c.period <= d.T && c.link <= d.T && c.memory(d.inflight(depth)) <= d.sp.cm.limit
}

// solve is the fewest in flight at the entry of n on exactly k devices with δ
// stages after it.
func (d *dp) solve(n *snode, k, δ int) int {
	if k < 1 || δ >= d.D {
		return inf
	}
	idx := k*(d.D+1) + δ
	if v := d.solveM[n.id][idx]; v >= 0 {
		return int(v)
	}
	best, ch := inf, choice{-1, int16(k)}
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
	d.solveM[n.id][idx] = int16(best)
	d.choice[memoKey{0, n.id, idx}] = ch
	return best
}

// suffix covers units i.. of series node n: a first stage of units i..p (or
// kid i solved on its own) on k1 devices, then the rest on k-k1. The last
// interval takes every device left.
func (d *dp) suffix(n *snode, i, k, δ int) int {
	idx := (i*(d.D+1)+k)*(d.D+1) + δ
	if v := d.suffixM[n.id][idx]; v >= 0 {
		return int(v)
	}
	last := len(n.units) - 1
	best, ch := inf, choice{}
	// try prices units i..p on k1 devices; stop reports that longer intervals
	// cannot meet T either.
	try := func(p, k1 int) (stop bool) {
		after := δ
		if p < last {
			if after = d.suffix(n, p+1, k-k1, δ); after >= inf {
				return false
			}
		}
		r := inf
		switch {
		case p == i && n.kids[i].kind != partition.Leaf:
			r = d.solve(n.kids[i], k1, after)
		case d.fits(n.blk[i][p-i], k1, after+1):
			r = after + 1
		case !d.fitsTime(n.blk[i][p-i], k1):
			return true
		}
		if r < best {
			best, ch = r, choice{int16(p), int16(k1)}
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
	d.suffixM[n.id][idx] = int16(best)
	d.choice[memoKey{1, n.id, idx}] = ch
	return best
}

// fitsTime says whether a block meets T and its memory floor, ignoring depth.
func (d *dp) fitsTime(id, k int) bool {
	if k < 1 || k > d.kmax {
		return false
	}
	c := &d.costs[id][k]
	return c.period <= d.T && c.link <= d.T && c.memory(1) <= d.sp.cm.limit
}

// group covers kids i.. of parallel node n side by side: kids i..p merged into
// one stage (or kid i solved on its own) on k1 devices, the rest on k-k1.
func (d *dp) group(n *snode, i, k, δ int) int {
	idx := (i*(d.D+1)+k)*(d.D+1) + δ
	if v := d.groupM[n.id][idx]; v >= 0 {
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
			best, ch = r, choice{int16(p), int16(k1)}
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
	d.groupM[n.id][idx] = int16(best)
	d.choice[memoKey{2, n.id, idx}] = ch
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
	switch d.choice[memoKey{0, n.id, idx}].p {
	case -1:
		*out = append(*out, assignment{n.whole(), k, δ + 1})
	case -2:
		d.extractSuffix(n, 0, k, δ, out)
	case -3:
		d.extractGroup(n, 0, k, δ, out)
	}
}

func (d *dp) extractSuffix(n *snode, i, k, δ int, out *[]assignment) {
	ch := d.choice[memoKey{1, n.id, (i*(d.D+1)+k)*(d.D+1) + δ}]
	p, k1 := int(ch.p), int(ch.k1)
	last := len(n.units) - 1
	after := δ
	if p < last {
		after = d.suffix(n, p+1, k-k1, δ)
	}
	if p == i && n.kids[i].kind != partition.Leaf {
		d.extractSolve(n.kids[i], k1, after, out)
	} else {
		*out = append(*out, assignment{n.blk[i][p-i], k1, after + 1})
	}
	if p < last {
		d.extractSuffix(n, p+1, k-k1, δ, out)
	}
}

func (d *dp) extractGroup(n *snode, i, k, δ int, out *[]assignment) {
	ch := d.choice[memoKey{2, n.id, (i*(d.D+1)+k)*(d.D+1) + δ}]
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
	ts := d.candidates()
	if len(ts) == 0 {
		return 0, false
	}
	feasible := func(i int) bool {
		d.reset(ts[i])
		return d.solve(d.sp.root, k, 0) < inf
	}
	if !feasible(len(ts) - 1) {
		return 0, false
	}
	lo, hi := 0, len(ts)-1 // hi is feasible
	for lo < hi {
		mid := (lo + hi) / 2
		if feasible(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	d.reset(ts[hi])
	d.solve(d.sp.root, k, 0)
	return ts[hi], true
}

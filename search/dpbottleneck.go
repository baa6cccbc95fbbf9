package search

import (
	"math"
	"sort"
)

// The search over the bottleneck: the DP answers for one target time T per
// micro-batch; these find the least T at which the root fits (a binary
// search over the candidate times, since the DP's value never grows with T)
// and sample the frontier past it.

// candidates are the distinct per-micro-batch times of every block on every
// device count that fits in memory with one micro-batch in flight, ascending:
// the binding T of any plan is one of them. With recomputation allowed, the
// recomputing stages' times are candidates too. Those below the slowest op's
// least time (opFloor), at which no plan fits, are left out: no search asks
// for them. The DPs that share prices share them.
func (d *dp) candidates() []float64 {
	p := d.prices
	if p.keepTs == nil {
		p.keepTs = distinctTimes(p.fit, p.opFloor())
	}
	if d.rfit == nil {
		return p.keepTs
	}
	if p.recTs == nil {
		p.recTs = mergeTimes(p.keepTs, distinctTimes(d.rfit, p.opFloor()))
	}
	return p.recTs
}

// opFloor is a time below which no plan fits: the slowest op's forward and
// backward at the per-device micro-batch that makes them fastest (every
// stage's time per micro-batch is at least the sum of its ops', and the
// slowest op lies in some stage), less a margin for rounding (a block's
// times are differences of prefix sums).
func (d *prices) opFloor() float64 {
	least := make([]float64, d.sp.cm.g.NumOps())
	for i := range least {
		least[i] = math.Inf(1)
	}
	for t, cm := range d.kinds {
		for k := 1; k <= d.devs.kmax[t]; k++ {
			for i, ot := range cm.times(ceilDiv(d.b, int64(k*d.devs.g[t]))) {
				least[i] = min(least[i], ot.f+ot.bi+ot.bw)
			}
		}
	}
	slowest := 0.0
	for _, t := range least {
		slowest = max(slowest, t)
	}
	return slowest * (1 - 1e-6)
}

// distinctTimes are the distinct times, not below floor, of the entries
// that fit one micro-batch in flight, ascending.
func distinctTimes(fit []fitEntry, floor float64) []float64 {
	var ts []float64
	for _, e := range fit {
		if e.maxIn >= 1 && e.t >= floor { // fits with one micro-batch in flight (k = 0 never does)
			ts = append(ts, e.t)
		}
	}
	sortTimes(ts)
	out := ts[:0]
	for i, t := range ts {
		if i == 0 || t != ts[i-1] {
			out = append(out, t)
		}
	}
	return out
}

// mergeTimes is the distinct times of two ascending lists of distinct times.
func mergeTimes(a, b []float64) []float64 {
	out := make([]float64, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		var t float64
		switch {
		case len(b) == 0 || len(a) > 0 && a[0] < b[0]:
			t, a = a[0], a[1:]
		case len(a) == 0 || b[0] < a[0]:
			t, b = b[0], b[1:]
		default: // equal
			t, a, b = a[0], a[1:], b[1:]
		}
		out = append(out, t)
	}
	return out
}

// sortTimes sorts times (non-negative, not NaN) in ascending order: by their
// bits, which order such floats as they order the numbers, a byte at a time
// (a radix sort: the candidates number up to a million, and each DP sorts
// them).
func sortTimes(ts []float64) {
	if len(ts) < 256 {
		sort.Float64s(ts)
		return
	}
	keys := make([]uint64, len(ts))
	for i, t := range ts {
		keys[i] = math.Float64bits(t)
	}
	tmp := make([]uint64, len(keys))
	for shift := 0; shift < 64; shift += 8 {
		var count [257]int
		for _, k := range keys {
			count[(k>>shift)&0xff+1]++
		}
		if count[(keys[0]>>shift)&0xff+1] == len(keys) {
			continue // every key has this byte
		}
		for b := 1; b < 257; b++ {
			count[b] += count[b-1]
		}
		for _, k := range keys {
			b := (k >> shift) & 0xff
			tmp[count[b]] = k
			count[b]++
		}
		keys, tmp = tmp, keys
	}
	for i, k := range keys {
		ts[i] = math.Float64frombits(k)
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
	// the bisection's solves ask for the root's value only, each bounded by
	// the ones before it (dpmemo.go); the last solve, whose choices are
	// extracted, pins nothing
	feasible := func(i int) bool {
		d.budget--
		d.reset(ts[i])
		ok := d.solve(d.sp.root, k, 0) < depth
		d.keepBounds(ok)
		return ok
	}
	spent := func() bool { return d.capped && d.budget <= 0 }
	d.beginBounds()
	defer d.endBounds()
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
	d.choicesBounds()
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

// minTOnMost solves at the least bottleneck on the most devices (up to n)
// that have a plan, and returns that count and the candidate's index.
func (d *dp) minTOnMost(n int) (k, i int, ok bool) {
	least := 1
	if d.devs.kinds() > 1 {
		least = n // several kinds: every device (a search on one kind's alone tries fewer)
	}
	for k := n; k >= least; k-- {
		if _, i, ok := d.minTBelow(k, 0, inf, math.Inf(1)); ok {
			return k, i, true
		}
	}
	return 0, 0, false
}

// gain bounds what a shallower pipeline could save over one of the given
// depth at the DP's bottleneck: a pipeline of depth δ over M micro-batches
// takes about M + δ − 1 bottleneck periods, so one of depth 1 at most
// (M + δ − 1)/M fewer; half as much again allows for the estimate.
func (d *dp) gain(depth int) float64 {
	return 1 + 1.5*float64(depth-1)/float64(d.mbs)
}

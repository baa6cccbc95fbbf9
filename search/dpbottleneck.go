package search

import (
	"math"
	"slices"
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

// candidateKeys are the candidates' bits, unsorted, each time once per
// entry that has it: what leastT bisects without sorting them.
func (d *dp) candidateKeys() []uint64 {
	p := d.prices
	if p.keepKeys == nil {
		p.keepKeys = timeKeys(nil, p.fit, p.opFloor())
	}
	if d.rfit == nil {
		return p.keepKeys
	}
	if p.recKeys == nil {
		p.recKeys = timeKeys(slices.Clip(p.keepKeys), d.rfit, p.opFloor())
	}
	return p.recKeys
}

// candidatesIn are the candidates from lo to hi, both included, ascending.
func (d *dp) candidatesIn(lo, hi float64) []float64 {
	from, to := math.Float64bits(lo), math.Float64bits(hi)
	var keys []uint64
	for _, k := range d.candidateKeys() {
		if k >= from && k <= to {
			keys = append(keys, k)
		}
	}
	keys = sortBits(keys)
	out := make([]float64, 0, len(keys))
	for i, k := range keys {
		if i == 0 || k != keys[i-1] {
			out = append(out, math.Float64frombits(k))
		}
	}
	return out
}

// timeKeys appends to keys the bits of the times, not below floor, of the
// entries that fit one micro-batch in flight.
func timeKeys(keys []uint64, fit []fitEntry, floor float64) []uint64 {
	n := 0
	for i := range fit {
		if e := &fit[i]; e.maxIn >= 1 && e.t >= floor { // fits with one micro-batch in flight (k = 0 never does)
			n++
		}
	}
	keys = slices.Grow(keys, n)
	for i := range fit {
		if e := &fit[i]; e.maxIn >= 1 && e.t >= floor {
			keys = append(keys, math.Float64bits(e.t))
		}
	}
	return keys
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
// that fit one micro-batch in flight, ascending: their bits sorted
// (sortBits), each run of equal ones kept once.
func distinctTimes(fit []fitEntry, floor float64) []float64 {
	keys := sortBits(timeKeys(nil, fit, floor))
	distinct := 0
	for i, k := range keys {
		if i == 0 || k != keys[i-1] {
			distinct++
		}
	}
	out := make([]float64, 0, distinct)
	for i, k := range keys {
		if i == 0 || k != keys[i-1] {
			out = append(out, math.Float64frombits(k))
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
// bits (sortBits), which order such floats as they order the numbers.
func sortTimes(ts []float64) {
	keys := make([]uint64, len(ts))
	for i, t := range ts {
		keys[i] = math.Float64bits(t)
	}
	for i, k := range sortBits(keys) {
		ts[i] = math.Float64frombits(k)
	}
}

// radixBits is the digit of sortBits: 11 bits, six passes at most over
// the keys (the exponents of one search's times share their top digits,
// which are skipped), with counts that stay in cache.
const (
	radixBits   = 11
	radixPasses = (64 + radixBits - 1) / radixBits
)

// sortBits sorts keys in ascending order, a radix sort (the candidates
// number up to a million, and each DP's are sorted): every digit's counts
// in one pass, then a pass per digit where the keys differ. It returns the
// sorted keys, in keys or in a slice of its own.
func sortBits(keys []uint64) []uint64 {
	if len(keys) < 256 {
		slices.Sort(keys)
		return keys
	}
	const mask = 1<<radixBits - 1
	count := make([][1 << radixBits]int, radixPasses)
	for _, k := range keys {
		for p := range count {
			count[p][(k>>(p*radixBits))&mask]++
		}
	}
	var tmp []uint64
	for p := range count {
		shift, c := p*radixBits, &count[p]
		if c[(keys[0]>>shift)&mask] == len(keys) {
			continue // every key has this digit
		}
		at := 0
		for d, m := range c {
			c[d], at = at, at+m
		}
		if tmp == nil {
			tmp = make([]uint64, len(keys))
		}
		for _, k := range keys {
			d := (k >> shift) & mask
			tmp[c[d]] = k
			c[d]++
		}
		keys, tmp = tmp, keys
	}
	return keys
}

// minT finds the smallest candidate T at which the root fits on k devices,
// by binary search over the candidates. ok is false if none fits.
func (d *dp) minT(k int) (float64, bool) {
	if d.tu.valueBisection {
		return d.leastT(k)
	}
	T, _, ok := d.minTBelow(k, 0, inf, math.Inf(1))
	return T, ok
}

// leastT finds the least candidate T at which the root fits on k devices,
// and leaves the DP solved there: minTBelow(k, 0, inf, +Inf)'s answer,
// without sorting the candidates, which on a large space costs more than
// the solves. It bisects their values, keeping those below a probe where
// the root fits and those above it where it does not; each probe is the
// median of a sample of those left. The first is the largest at most the
// DP's hint where it has one (hints.go), and the bisection goes on above
// it where the root does not fit there; else the median of them all, and
// where nothing fits there the largest next: whether anything fits at all.
// The solves carry their bounds as minTBelow's do (dpmemo.go).
func (d *dp) leastT(k int) (float64, bool) {
	keys := slices.Clone(d.candidateKeys())
	if len(keys) == 0 {
		return 0, false
	}
	feasible := func(key uint64) bool {
		d.budget--
		d.reset(math.Float64frombits(key))
		ok := d.solve(d.sp.root, k, 0) < inf
		d.keepBounds(ok)
		return ok
	}
	d.beginBounds(d.tu.boundedBisection)
	defer d.endBounds()
	var sample []uint64
	var hi uint64 // the least probe so far where the root fits
	found := false
	p, hinted := uint64(0), false
	if h := d.hint; h > 0 {
		d.hint = 0
		p, hinted = keyAtMost(keys, math.Float64bits(h)) // where the root fits as at the hint
	}
	if !hinted {
		p = probeKey(keys, &sample)
	}
	switch {
	case feasible(p):
		hi, found, keys = p, true, keysBelow(keys, p)
	case hinted: // the least T lies above the hint, most likely close: bisect on, the top solved last if at all
		keys = keysAbove(keys, p)
	default: // the median: whether anything fits at all, before the rest
		top := slices.Max(keys)
		if top == p || !feasible(top) {
			return 0, false
		}
		hi, found, keys = top, true, keysAbove(keysBelow(keys, top), p)
	}
	for len(keys) > 0 {
		if p = probeKey(keys, &sample); feasible(p) {
			hi, found, keys = p, true, keysBelow(keys, p)
		} else {
			keys = keysAbove(keys, p)
		}
	}
	if !found { // every probe failed, the largest candidate last
		return 0, false
	}
	d.choicesBounds()
	T := math.Float64frombits(hi)
	d.reset(T)
	d.solve(d.sp.root, k, 0)
	return T, true
}

// keyAtMost is the largest key at most h.
func keyAtMost(keys []uint64, h uint64) (uint64, bool) {
	q, ok := uint64(0), false
	for _, k := range keys {
		if k <= h && (!ok || k > q) {
			q, ok = k, true
		}
	}
	return q, ok
}

// probeKey is the median of a sample of keys (every len/255-th), one of them.
func probeKey(keys []uint64, sample *[]uint64) uint64 {
	step := max(1, len(keys)/255)
	s := (*sample)[:0]
	for i := step / 2; i < len(keys); i += step {
		s = append(s, keys[i])
	}
	slices.Sort(s)
	*sample = s
	return s[len(s)/2]
}

// keysBelow keeps the keys below p, in place.
func keysBelow(keys []uint64, p uint64) []uint64 {
	out := keys[:0]
	for _, k := range keys {
		if k < p {
			out = append(out, k)
		}
	}
	return out
}

// keysAbove keeps the keys above p, in place.
func keysAbove(keys []uint64, p uint64) []uint64 {
	out := keys[:0]
	for _, k := range keys {
		if k > p {
			out = append(out, k)
		}
	}
	return out
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
		if !d.tu.reuseProbe || !d.solved || d.T != ts[i] { // a frontier's probe (depthAt) may have solved it: its values stand
			d.reset(ts[i])
		}
		ok := d.solve(d.sp.root, k, 0) < depth
		d.keepBounds(ok)
		return ok
	}
	spent := func() bool { return d.capped && d.budget <= 0 }
	d.beginBounds(d.tu.boundedBisection)
	defer d.endBounds()
	lo, hi := from, top-1
	switch {
	case d.capped || !d.tu.midFirst || lo == hi: // check the top, then bisect
		if spent() || !feasible(hi) {
			return 0, 0, false
		}
	case feasible((lo + hi) / 2): // the middle first (midFirst)
		hi = (lo + hi) / 2
	default: // then the top, whether any fits
		if lo = (lo+hi)/2 + 1; !feasible(hi) {
			return 0, 0, false
		}
	}
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
// that have a plan, and returns that count and the bottleneck.
func (d *dp) minTOnMost(n int) (k int, T float64, ok bool) {
	least := 1
	if d.devs.kinds() > 1 {
		least = n // several kinds: every device (a search on one kind's alone tries fewer)
	}
	for k := n; k >= least; k-- {
		if T, ok := d.minT(k); ok {
			return k, T, true
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

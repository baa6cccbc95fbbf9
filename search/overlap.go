package search

import (
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/graphpipe/graphpipe/plan"
)

// The all-reduce overlapped with a stage's last weight pass, as the runtime
// runs it (plan's buckets.go, runtime's overlap.go): the gradients, in the
// order the pass finishes them, cut into buckets; a bucket starts its ring
// once the pass has finished its ops, each bucket's ring in the background,
// all of them at once; a bucket's ring is the stage's ring restricted to
// it, its part of each of the layout's k chunks passed round. What outlasts
// the pass is the flush's all-reduce (with, on a sharded stage, the
// all-gather after the update, which no pass overlaps).
//
// The price, per bucket b of x_b bytes, ready r_b into the pass:
//
//   - it loads the ring's busiest link with ρ_b = phases·(lat + (x_b −
//     p_min)/bw), p_min its smallest part of a chunk (a link carries every
//     chunk of a half but one), phases 2 (reduce-scatter and all-gather) or
//     1 (a sharded stage's reduce-scatter);
//   - each of its parts crosses H = phases·(k−1) links one after another, a
//     hop of h_b = lat + p_max/bw at most, p_max its largest part;
//
// and the last bucket is done by max over b of r_b + Σ_{b'≥b} ρ_b' +
// (H−1)·max_{b'≥b} h_b': the buckets from b on pass the busiest link one
// after another, and the slowest of them crosses the other links after
// (a flow shop's critical path). The parts of a bucket come from the
// layout, so the price knows a bucket that falls in one chunk, whose ring
// is a chain round the replicas, from one spread over all of them.
//
// The DP prices a block before its ops' order is fixed: overlapAR assumes
// the pass finishes its bytes evenly and every bucket in one chunk, with
// the bucket size that balances the buckets' latencies against the last
// one's chain; the plan is priced exactly (planFlush), and keeps the
// buckets only where they shorten its stage's flush.

// bucketSizes are the bucket sizes planFlush tries: 64 KiB to 64 MiB.
var bucketSizes = []int64{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}

// overlapAR is the all-reduce part of the flush the DP prices for a block
// of params on k devices at placement pl, its last weight pass window
// seconds long, where overlapping it with the pass makes it shorter than
// ar (the ring after the pass, allReduce's; a sharded stage's two halves).
func (cm *costModel) overlapAR(pl placement, params int64, r ring, ar, window float64) float64 {
	k := r.k
	if !cm.overlap || k < 2 || params <= 0 || window <= 0 || pl == placeHost || pl == placeStreamed {
		return ar
	}
	lat, bw := r.lat, r.bw
	x := 4 * float64(params)
	phases, after := 2.0, 0.0
	if pl == placeSharded {
		phases, after = 1, r.half(x)
	}
	hops := phases * float64(k-1)
	s := math.Sqrt(phases * x * lat * bw / max(hops-1, 1))
	s = min(max(s, float64(bucketSizes[0])), x)
	nb := math.Ceil(x / s)
	total := phases * (nb*lat + x/bw)
	exposed := max(total/nb, total-window*(1-1/nb)) + (hops-1)*(lat+s/bw)
	return min(ar, exposed+after)
}

// dpFlush is the flush the DP prices (placedFlush), its all-reduce ar
// overlapped with a last weight pass of window seconds where that is
// shorter (overlapAR).
func (cm *costModel) dpFlush(pl placement, params int64, k int, r ring, ar, window, slow float64) float64 {
	return cm.placedFlush(pl, params, k, cm.overlapAR(pl, params, r, ar, window), slow)
}

// window is a stage cost's last weight pass: its backward, or its weight
// gradients where the schedule splits them off.
func (c *stageCost) window(split bool) float64 {
	if split {
		return c.bw
	}
	return c.bi + c.bw
}

// planFlush is stage s's flush in plan p, slowed by slow, with the bucket
// size that makes it shortest (0: the all-reduce after the pass).
func (cm *costModel) planFlush(p *plan.Plan, s int, slow float64) (float64, int64) {
	st := &p.Stages[s]
	pl, k, r := placementOf(st), len(st.Devices), cm.planRing(p, s)
	ar := r.allReduce(4 * float64(st.Params))
	plain := cm.placedFlush(pl, st.Params, k, ar, slow)
	if !cm.overlap || k < 2 || st.Params <= 0 || pl == placeHost || pl == placeStreamed {
		return plain, 0
	}
	pass := cm.passReady(st)
	if pass == nil {
		return plain, 0
	}
	best, bucket := plain, int64(0)
	for _, size := range bucketSizes {
		if tooMany(st.Params, size) {
			continue
		}
		f := cm.placedFlush(pl, st.Params, k, cm.bucketsAR(pass, cm.bucketParts(pass, size, r.k), pl, r), slow)
		if f < best {
			best, bucket = f, size
		}
		if size >= 4*st.Params { // one bucket holds the stage: larger ones are the same
			break
		}
	}
	return best, bucket
}

// tooMany says whether buckets of size bytes cut params into more than a
// plan may hold (plan.MaxBuckets).
func tooMany(params, size int64) bool { return (4*params+size-1)/size > plan.MaxBuckets }

// lastPass is a stage's last weight pass: its ops in the order it
// finishes them (plan.GradOrder), the seconds into the pass at which it has
// finished each (done[j]: the first j+1), and its length; key names the
// ops and the order, for the buckets' cache.
type lastPass struct {
	order []int
	done  []float64
	len   float64
	key   string
}

// passReady times the stage's last weight pass op by op: the backward
// (recomputing the forward first where the stage recomputes) or, where the
// schedule splits it, the weight gradients; the op times at its
// micro-batch, scaled to the pass time the plan gives it.
func (cm *costModel) passReady(st *plan.PlanStage) *lastPass {
	ops := make([]int, 0, len(st.Ops))
	for _, name := range st.Ops {
		i, ok := cm.g.OpIndex(name)
		if !ok {
			return nil
		}
		ops = append(ops, i)
	}
	split := cm.split
	p := &lastPass{order: plan.GradOrder(cm.g, ops, split), len: st.BackwardS + st.WeightS, key: fmt.Sprint(split, p0(ops))}
	if split {
		p.len = st.WeightS
	}
	t := cm.times(st.MicroBatch)
	var at float64
	if st.Recompute && !split { // the backward reruns the forward first
		for _, i := range ops {
			at += t[i].f
		}
	}
	p.done = make([]float64, len(p.order))
	for j, i := range p.order {
		if !split {
			at += t[i].bi
		}
		at += t[i].bw
		p.done[j] = at
	}
	if at <= 0 || p.len <= 0 {
		return nil
	}
	for j := range p.done {
		p.done[j] *= p.len / at
	}
	return p
}

// p0 is ops as a cache key.
func p0(ops []int) string {
	b := make([]byte, 0, 4*len(ops))
	for _, i := range ops {
		b = append(b, byte(i), byte(i>>8), byte(i>>16), byte(i>>24))
	}
	return string(b)
}

// bucketPart is what the price needs of a bucket: its elements, its
// smallest and largest part of a chunk (chunkParts), the position in the
// pass's order of the last op it waits for (ready) and of every op it
// holds parameters of (ops).
type bucketPart struct {
	elems, least, most int64
	ready              int
	ops                []int
}

// bucketCache keeps each stage's bucketParts by its ops, bucket size and
// replicas: the same stage is priced again in every plan that holds it.
type bucketCache struct {
	mu    sync.Mutex // guards parts
	parts map[string][]bucketPart
}

// bucketParts are the buckets of size bytes of a stage whose last pass is
// pass, on k replicas.
func (cm *costModel) bucketParts(pass *lastPass, size int64, k int) []bucketPart {
	return cm.orderParts(pass.key, pass.order, size, k)
}

// orderParts are the buckets of size bytes (plan.GradBuckets) of the
// parameters of ops in order, on k replicas, cached under key (which
// names the ops and the order).
func (cm *costModel) orderParts(key string, order []int, size int64, k int) []bucketPart {
	key = fmt.Sprint(key, size, k)
	c := &cm.buckets
	c.mu.Lock()
	got, ok := c.parts[key]
	c.mu.Unlock()
	if ok {
		return got
	}
	bs := plan.GradBuckets(cm.g, order, size)
	var total int64
	for _, b := range bs {
		total += b.Elems
	}
	pos := make(map[int]int, len(order))
	for j, i := range order {
		pos[i] = j
	}
	out := make([]bucketPart, len(bs))
	for b, bk := range bs {
		out[b].elems = bk.Elems
		out[b].least, out[b].most = chunkParts(bk.Spans, total, k)
		for _, op := range bk.Ops {
			out[b].ready = max(out[b].ready, pos[op])
			out[b].ops = append(out[b].ops, pos[op])
		}
	}
	c.mu.Lock()
	if c.parts == nil {
		c.parts = map[string][]bucketPart{}
	}
	c.parts[key] = out
	c.mu.Unlock()
	return out
}

// bucketsAR is the all-reduce part of the flush of a stage whose last pass
// is pass, on k devices at placement pl, in buckets bs: what of the
// buckets' rings outlasts the pass (see above), and a sharded stage's
// all-gather.
func (cm *costModel) bucketsAR(pass *lastPass, bs []bucketPart, pl placement, r ring) float64 {
	k, lat, bw := r.k, r.lat, r.bw
	var total int64
	for _, b := range bs {
		total += b.elems
	}
	phases, after := 2.0, 0.0
	if pl == placeSharded {
		phases, after = 1, r.half(4*float64(total))
	}
	hops := phases * float64(k-1)
	done, load, hop := 0.0, 0.0, 0.0
	for b := len(bs) - 1; b >= 0; b-- {
		load += phases * (lat + 4*float64(bs[b].elems-bs[b].least)/bw)
		hop = max(hop, lat+4*float64(bs[b].most)/bw)
		done = max(done, pass.done[bs[b].ready]+load+(hops-1)*hop)
	}
	return max(0, done-pass.len) + after
}

// chunkParts is the smallest and the largest part of spans (of a layout of
// total elements) in each of the ring's k chunks (the ring's cut: chunk c
// is [c·total/k, (c+1)·total/k)).
func chunkParts(spans [][2]int64, total int64, k int) (least, most int64) {
	least = math.MaxInt64
	for c := int64(0); c < int64(k); c++ {
		lo, hi := c*total/int64(k), (c+1)*total/int64(k)
		var n int64
		for _, s := range spans {
			if a, b := max(lo, s[0]), min(hi, s[1]); a < b {
				n += b - a
			}
		}
		least, most = min(least, n), max(most, n)
	}
	return least, most
}

// A sharded stage's all-gather of its updated parameters may run late
// (plan.PlanStage.GatherS; stage.Executor.GatherLate): after its optimizer
// step, the stage's next iteration beginning with it, while the stages
// upstream make its first inputs (a stage on a branch shorter than the
// longest has slack at the start too). The DP prices it in the flush, as
// the all-gather that ends it; the plan moves it stage by stage and keeps
// each move the simulator finds makes the iteration shorter (lateGathers).

// gatherS is the all-gather of stage s of p, sharded on several replicas:
// the second half of its ring, as placedFlush and bucketsAR price it; 0
// for any other stage.
func (cm *costModel) gatherS(p *plan.Plan, s int) float64 {
	st := &p.Stages[s]
	k := len(st.Devices)
	if !cm.overlap || placementOf(st) != placeSharded || k < 2 || st.Params <= 0 {
		return 0
	}
	return cm.planRing(p, s).half(4 * float64(st.Params))
}

// A late all-gather may also run in buckets (plan.PlanStage.
// GatherBucketBytes; plan.GatherBuckets): the parameters in the order the
// forward reads them, every bucket's ring started at once after the
// update, each op of the next iteration's first forward run once the
// buckets that hold its parameters are in. Priced as the reduce-scatter's
// buckets are (see above), every bucket ready at once: bucket b is in by
// G_b = Σ_{b'≤b} ρ_b' + (H−1)·max_{b'≤b} h_b' (H = k−1, the all-gather's
// half), and the first forward, its ops of f_j seconds in order, ends at
// t_J where t_j = max(t_{j−1}, G of op j's last bucket) + f_j: it waits
// t_J − Σ f_j more than it computes, the stage's GatherS. The bucket size
// that makes that least is kept (gatherWait), where it is less than the
// whole all-gather.

// gatherWait is what of stage s of p's late all-gather its next first
// forward waits for, with the bucket size that makes it least (0: the
// whole all-gather, gatherS, before the forward); 0, 0 for a stage that
// does not all-gather.
func (cm *costModel) gatherWait(p *plan.Plan, s int) (float64, int64) {
	whole := cm.gatherS(p, s)
	st := &p.Stages[s]
	if whole <= 0 {
		return whole, 0
	}
	order, f := cm.forwardTimes(st)
	if order == nil {
		return whole, 0
	}
	r := cm.planRing(p, s)
	best, bytes := whole, int64(0)
	for _, size := range bucketSizes {
		if tooMany(st.Params, size) {
			continue
		}
		if w := forwardWait(cm.orderParts("gather"+p0(order), order, size, r.k), f, r); w < best {
			best, bytes = w, size
		}
		if size >= 4*st.Params {
			break
		}
	}
	return best, bytes
}

// forwardWait is how much longer than Σ f a forward of ops timed f (in
// the forward's order) takes while the buckets bs come in over ring r
// (see above).
func forwardWait(bs []bucketPart, f []float64, r ring) float64 {
	need := make([]float64, len(f)) // when op j's last bucket is in
	load, hop := 0.0, 0.0
	for _, b := range bs {
		load += r.lat + 4*float64(b.elems-b.least)/r.bw
		hop = max(hop, r.lat+4*float64(b.most)/r.bw)
		in := load + float64(r.k-2)*hop
		for _, j := range b.ops {
			need[j] = max(need[j], in)
		}
	}
	t, sum := 0.0, 0.0
	for j, fj := range f {
		t = max(t, need[j]) + fj
		sum += fj
	}
	return max(0, t-sum)
}

// forwardTimes is stage st's ops in the order its forward runs them
// (plan.GatherOrder) and each one's forward time at its micro-batch,
// scaled to the forward time the plan gives it; nil where an op is not the
// graph's or the forward takes no time.
func (cm *costModel) forwardTimes(st *plan.PlanStage) ([]int, []float64) {
	ops := make([]int, 0, len(st.Ops))
	for _, name := range st.Ops {
		i, ok := cm.g.OpIndex(name)
		if !ok {
			return nil, nil
		}
		ops = append(ops, i)
	}
	order := plan.GatherOrder(cm.g, ops)
	t := cm.times(st.MicroBatch)
	f := make([]float64, len(order))
	var sum float64
	for j, i := range order {
		f[j] = t[i].f
		sum += f[j]
	}
	if sum <= 0 || st.ForwardS <= 0 {
		return nil, nil
	}
	for j := range f {
		f[j] *= st.ForwardS / sum
	}
	return order, f
}

// lateGathers moves the all-gathers of p's sharded stages to the start of
// the next iteration where the simulator, running p's lists as they are,
// predicts a shorter iteration: all of them at once (stages on parallel
// branches may end the iteration together: moving one alone shortens
// nothing), then each stage's, the longest all-gather first, moved or
// put back, each change kept where it shortens the iteration; p is
// predicted after. Its schedule's lists stay: tuning builds them again
// for the new beginnings (tuneShared), and moves again after.
func lateGathers(p *plan.Plan, cm *costModel) error {
	type move struct {
		s             int
		g, wait, full float64 // the all-gather, what the forward waits for of it late, the flush with it
		bytes         int64   // its buckets late (gatherWait)
	}
	var moves []move
	for s := range p.Stages {
		st := &p.Stages[s]
		kc := cm.kind(p.KindOf(s))
		if g := kc.gatherS(p, s); g > 0 {
			full := st.FlushS
			if st.GathersLate() {
				full += g
			}
			wait, bytes := kc.gatherWait(p, s)
			moves = append(moves, move{s, g, wait, full, bytes})
		}
	}
	if len(moves) == 0 {
		return nil
	}
	sort.SliceStable(moves, func(a, b int) bool { return moves[a].g > moves[b].g })
	set := func(m move, late bool) {
		st := &p.Stages[m.s]
		st.GatherS, st.GatherBucketBytes, st.FlushS = 0, 0, m.full
		if late {
			st.GatherS, st.GatherBucketBytes, st.FlushS = m.wait, m.bytes, max(0, m.full-m.g)
		}
	}
	best := p.Predicted.IterationS
	was := make([]bool, len(moves))
	for i, m := range moves {
		was[i] = p.Stages[m.s].GathersLate()
		set(m, true)
	}
	if err := p.Predict(); err == nil && p.Predicted.IterationS < best {
		best = p.Predicted.IterationS
	} else {
		for i, m := range moves {
			set(m, was[i])
		}
	}
	for _, m := range moves {
		late := p.Stages[m.s].GathersLate()
		set(m, !late)
		if err := p.Predict(); err == nil && p.Predicted.IterationS < best {
			best = p.Predicted.IterationS
			continue
		}
		set(m, late)
	}
	return p.Predict()
}

// gathersLate says whether some stage of p all-gathers late.
func gathersLate(p *plan.Plan) bool {
	for _, st := range p.Stages {
		if st.GathersLate() {
			return true
		}
	}
	return false
}

// withGathersInFlush is a copy of p (its stages and edges its own) whose
// all-gathers end the flush again.
func withGathersInFlush(p *plan.Plan, cm *costModel) *plan.Plan {
	q := *p
	q.Stages = append([]plan.PlanStage(nil), p.Stages...)
	q.Edges = append([]plan.PlanEdge(nil), p.Edges...)
	for s := range q.Stages {
		if st := &q.Stages[s]; st.GathersLate() {
			st.FlushS, st.GatherS, st.GatherBucketBytes = st.FlushS+cm.kind(q.KindOf(s)).gatherS(&q, s), 0, 0
		}
	}
	return &q
}

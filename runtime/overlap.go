package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// A stage whose plan gives it buckets (plan.PlanStage.BucketBytes, on
// several replicas) all-reduces its gradients while its last weight pass
// of an iteration runs (the Backward of its action list's last B, or of its
// last W where the schedule splits the backward): the worker arms that pass
// (stage.Executor.OverlapNext) with the buckets plan.GradBuckets cuts, and
// as the pass finishes each bucket's ops the executor hands the bucket to
// stepComm.StartBucket, which runs the bucket's ring in a goroutine of its
// own while the pass goes on. A bucket's ring is the stage's ring
// (allreduce.go) restricted to the bucket: chunk c of the bucket is its
// part of the layout's chunk c, so each element is summed over the
// replicas in the order the one ring after the pass sums it, and a chunk
// the bucket does not reach sends nothing. Its messages are keyed by
// bucket and step (bucketEdge). Of a sharded stage only the
// reduce-scatter runs so; its all-gather follows the update as before.
// EndStep's AllReduce (ReduceScatter) then waits for the buckets, and the
// timeline gets a span per bucket (microbatch.AllReduce).

// bucketEdge is the edge key of the buckets' rings.
const bucketEdge = ringEdge + 4

// overlapPlan is a worker's buckets and the action whose pass they
// overlap, fixed from NewWorker on.
type overlapPlan struct {
	buckets []stage.Bucket
	final   microbatch.Action
	half    bool // a sharded stage's: the reduce-scatter alone
}

// overlapRun is iteration n's buckets in flight.
type overlapRun struct {
	n      int64
	wg     sync.WaitGroup
	mu     sync.Mutex // guards err and events
	err    error
	events []Event
}

// openOverlap makes the worker's overlapPlan where its stage's plan asks
// for buckets and it has replicas to all-reduce with, and its late
// all-gather's buckets where the plan cuts it (openGatherBuckets); ops are
// its ops.
func (w *Worker) openOverlap(ops []int) {
	w.openGatherBuckets(ops)
	st, k := w.role.plan.Stages[w.Stage], w.role.lay.count[w.Stage]
	if st.BucketBytes <= 0 || k < 2 {
		return
	}
	final, ok := finalWeightPass(w.role.sched, w.role.split)
	if !ok {
		return
	}
	g := w.role.g
	bs := plan.GradBuckets(g, plan.GradOrder(g, ops, w.role.split), st.BucketBytes)
	p := &overlapPlan{final: final, half: w.role.sharded(w.Stage)}
	for _, b := range bs {
		p.buckets = append(p.buckets, stage.Bucket{Ops: b.Ops, Spans: b.Spans})
	}
	w.ovp = p
}

// finalWeightPass is the last action of list that adds weight gradients: a
// B, or a W where the schedule splits the backward.
func finalWeightPass(list []microbatch.Action, split bool) (microbatch.Action, bool) {
	want := microbatch.Backward
	if split {
		want = microbatch.Weight
	}
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Kind == want {
			return list[i], true
		}
	}
	return microbatch.Action{}, false
}

// armOverlap arms the executor's pass when a is the iteration's last weight
// pass.
func (w *Worker) armOverlap(ctx context.Context, it *iteration, a microbatch.Action) error {
	if w.ovp == nil || a != w.ovp.final {
		return nil
	}
	w.ovl = &overlapRun{n: it.n}
	return w.ex.OverlapNext(ctx, stepComm{w, it.n}, w.ovp.buckets)
}

// StartBucket runs bucket b's ring in a goroutine of its own, once its
// gradients are on the host (stage.BucketComm).
func (c stepComm) StartBucket(ctx context.Context, b int, grads []*stage.Value[float32], ready func() error) {
	w, o := c.w, c.w.ovl
	start := time.Now() // the span begins as the pass hands the bucket over
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		err := error(nil)
		if ready != nil {
			err = ready()
		}
		if err == nil {
			err = w.bucketRing(ctx, c.n, b, grads)
		}
		o.done(Event{Kind: byte(microbatch.AllReduce), MB: b, Start: w.timeline.at(start), End: w.timeline.now()}, err)
	}()
}

func (o *overlapRun) done(e Event, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
	if err != nil && o.err == nil {
		o.err = err
	}
}

// waitBuckets waits for iteration n's buckets, if it overlapped any, and
// puts their spans on the timeline; ok says whether it had.
func (w *Worker) waitBuckets(n int64) (ok bool, err error) {
	o := w.ovl
	if o == nil || o.n != n {
		return false, nil
	}
	o.wg.Wait()
	w.ovl = nil
	w.timeline.events = append(w.timeline.events, o.events...)
	if o.err != nil {
		return true, fmt.Errorf("all-reduce overlapped with the backward: %w", o.err)
	}
	return true, nil
}

// bucketRing is bucket b's ring over grads (the stage's gradients in
// parameter-name order) in iteration n.
func (w *Worker) bucketRing(ctx context.Context, n int64, b int, grads []*stage.Value[float32]) error {
	k := w.role.lay.count[w.Stage]
	rp := w.ringPlanOf()
	steps := 2 * rp.half()
	if w.ovp.half {
		steps = rp.half()
	}
	key := func(s int) wire.Key { return msgKey(n, int32(b*2*(k-1)+s), bucketEdge, 'g') }
	return rp.run(ctx, w.links.ep, key, newSpanRing(grads, k, w.ovp.buckets[b].Spans), true, 0, steps)
}

// spanRing is spans of values laid end to end, cut by the chunks of the
// whole: chunk c is the spans' part of the layout's chunk c (gradRing's).
type spanRing struct {
	vals   []*stage.Value[float32]
	starts []int      // each value's start in the layout
	chunks [][][2]int // per chunk, its spans
	sizes  []int
}

func newSpanRing(vals []*stage.Value[float32], k int, spans [][2]int64) spanRing {
	g := spanRing{vals: vals, starts: make([]int, len(vals)), chunks: make([][][2]int, k), sizes: make([]int, k)}
	whole := newGradRing(vals, k)
	total := 0
	for i, v := range vals {
		g.starts[i], total = total, total+len(v.Data)
	}
	for c := 0; c < k; c++ {
		lo, hi := whole.span(c)
		for _, s := range spans {
			if a, b := max(lo, int(s[0])), min(hi, int(s[1])); a < b {
				g.chunks[c] = append(g.chunks[c], [2]int{a, b})
				g.sizes[c] += b - a
			}
		}
	}
	return g
}

func (g spanRing) chunk(c int) int {
	k := len(g.chunks)
	return ((c % k) + k) % k
}

func (g spanRing) size(c int) int { return g.sizes[g.chunk(c)] }

// each calls f on the pieces of chunk c, one per value a span touches,
// with the offset of each piece in the chunk.
func (g spanRing) each(c int, f func(piece []float32, at int)) {
	at := 0
	for _, s := range g.chunks[g.chunk(c)] {
		for i, v := range g.vals {
			base := g.starts[i]
			a, b := max(s[0], base), min(s[1], base+len(v.Data))
			if a < b {
				f(v.Data[a-base:b-base], at)
				at += b - a
			}
		}
	}
}

func (g spanRing) read(c int) []float32                  { return readChunk(g, c) }
func (g spanRing) write(c int, data []float32, add bool) { writeChunk(g, c, data, add) }

// A sharded stage whose plan cuts its late all-gather into buckets
// (plan.PlanStage.GatherBucketBytes) hands the executor the buckets
// plan.GatherBuckets cuts (stage.Executor.GatherBuckets): after its
// update every bucket's ring starts at once, each the all-gather half of
// the stage's ring restricted to the bucket (spanRing), keyed by bucket
// and step (gatherEdge), and the next iteration's first forward runs each
// op once its buckets are in.

// gatherEdge is the edge key of a late all-gather's buckets' rings.
const gatherEdge = ringEdge + 5

// openGatherBuckets gives the executor the stage's all-gather buckets
// where its plan asks for them; ops are its ops.
func (w *Worker) openGatherBuckets(ops []int) {
	st, k := w.role.plan.Stages[w.Stage], w.role.lay.count[w.Stage]
	if st.GatherBucketBytes <= 0 || k < 2 || !w.role.sharded(w.Stage) || w.twoBW != nil {
		return
	}
	for _, b := range plan.GatherBuckets(w.role.g, ops, st.GatherBucketBytes) {
		w.gatherBks = append(w.gatherBks, stage.Bucket{Ops: b.Ops, Spans: b.Spans})
	}
	w.ex.GatherBuckets(w.gatherBks)
}

// GatherBucket runs the all-gather half of bucket b's ring over params
// (stage.GatherBucketComm) in the iteration whose update it gathers.
func (c stepComm) GatherBucket(ctx context.Context, b int, params []*stage.Value[float32]) error {
	w := c.w
	k := w.role.lay.count[w.Stage]
	rp := w.ringPlanOf()
	key := func(s int) wire.Key { return msgKey(c.n, int32(b*2*(k-1)+s), gatherEdge, 'g') }
	return rp.run(ctx, w.links.ep, key, newSpanRing(params, k, w.gatherBks[b].Spans), true, rp.half(), 2*rp.half())
}

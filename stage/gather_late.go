package stage

import (
	"context"
	"fmt"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// A sharded stage's all-gather of its updated parameters may run late
// (GatherLate): ApplyStep starts it and returns, its ring running in the
// background while the driver reports the step and the next step begins
// (the stages upstream of this one make its first inputs meanwhile); the
// next call that reads or writes the parameters (a forward pass, an
// evaluation, the state read, loaded or closed) waits for it first. Every
// replica of the stage starts its part in its ApplyStep, so the ring runs
// whatever the driver does next. The parameters are the same bit for bit:
// only when the ring runs moves. On a device the shard's pieces come down
// before ApplyStep returns and the others' go up in the wait.

// GatherLate makes ApplyStep start a sharded stage's all-gather and leave
// it running (see above); off, ApplyStep runs it whole, as by default.
func (e *Executor) GatherLate(on bool) { e.late = on }

// SettleGather waits for the all-gather ApplyStep left running, if any:
// what a worker does before it leaves its last iteration, so that its
// replicas' rings end while every one of them is there to hear them.
func (e *Executor) SettleGather() error { return e.settleGather() }

// GatherBuckets cuts a late all-gather into buckets (plan.GatherBuckets:
// the ops whose parameters each holds and its spans of the ring's layout,
// the parameters in name order laid end to end), so that it overlaps the
// next step's first forward: ApplyStep starts every bucket's ring at once
// (GatherBucketComm), and a training Forward runs each op once the
// buckets that hold its parameters are in, instead of waiting for the
// whole gather first (on a device each bucket's pieces go up as the
// forward comes to it). Each element is copied from the replica that
// updated it, as by the one ring: the same numbers bit for bit. With its
// state offloaded to the host, or a StepComm that has no GatherBucket,
// the gather stays whole. nil: whole.
func (e *Executor) GatherBuckets(bs []Bucket) { e.gatherBks = bs }

// GatherBucketComm is what a StepComm offers a stage whose late all-gather
// runs in buckets (GatherBuckets).
type GatherBucketComm interface {
	// GatherBucket runs the all-gather of bucket b's spans of params (the
	// stage's parameters in parameter-name order, laid end to end) and
	// returns when this replica holds all of them.
	GatherBucket(ctx context.Context, b int, params []*Value[float32]) error
}

// lateGather is an all-gather ApplyStep left running: wait ends it. A
// bucketed one also says when each bucket is in (done, closed with errs
// set) and which buckets each op's forward waits for (need).
type lateGather struct {
	step int
	wait func() error
	done []chan struct{}
	errs []error
	need map[int][]int
	// arrive, where set, is what the executor does with bucket b once its
	// ring is done, before any op reads it (on a device: its pieces up),
	// once a bucket (arrived)
	arrive  func(b int) error
	arrived []bool
}

// land runs g's arrive for bucket b, once.
func (g *lateGather) land(b int) error {
	if g.arrive == nil || g.arrived[b] {
		return nil
	}
	g.arrived[b] = true
	return g.arrive(b)
}

// gathersByOp says whether a Forward at pos waits for the running gather
// op by op: a training forward of a bucketed gather that reads the newest
// weights.
func (e *Executor) gathersByOp(pos Position) bool {
	g := e.gathering
	return g != nil && g.need != nil && !pos.Eval && e.reading == nil
}

// gatherFor waits for the buckets op i's parameters are in, where the
// running gather is bucketed; a bucket that failed ends the whole gather
// and says why.
func (e *Executor) gatherFor(i int) error {
	g := e.gathering
	if g == nil || g.need == nil {
		return nil
	}
	for _, b := range g.need[i] {
		<-g.done[b]
		if g.errs[b] != nil {
			return e.settleGather()
		}
		if err := g.land(b); err != nil {
			g.errs[b] = err
			return e.settleGather()
		}
	}
	return nil
}

// startBuckets starts every bucket's ring of a late all-gather over the
// host's parameters (params, in name order), each in a goroutine of its
// own.
func startBuckets(ctx context.Context, gc GatherBucketComm, params []*Value[float32], bs []Bucket, step int) *lateGather {
	g := &lateGather{step: step, done: make([]chan struct{}, len(bs)), errs: make([]error, len(bs)), need: map[int][]int{}, arrived: make([]bool, len(bs))}
	for b, bk := range bs {
		g.done[b] = make(chan struct{})
		for _, op := range bk.Ops {
			g.need[op] = append(g.need[op], b)
		}
		go func() {
			defer close(g.done[b])
			g.errs[b] = gc.GatherBucket(ctx, b, params)
		}()
	}
	g.wait = func() error {
		var first error
		for b := range bs {
			<-g.done[b]
			err := g.errs[b]
			if err == nil {
				err = g.land(b)
			}
			if first == nil && err != nil {
				first = fmt.Errorf("bucket %d: %w", b, err)
			}
		}
		return first
	}
	return g
}

// settleGather waits for the all-gather ApplyStep left running, if any;
// an error it ended with is returned once, here or by the next call that
// settles.
func (e *Executor) settleGather() error {
	if g := e.gathering; g != nil {
		e.gathering = nil
		if err := g.wait(); err != nil {
			e.lateErr = &StepError{g.step, "all-gather", err}
		}
	}
	err := e.lateErr
	e.lateErr = nil
	return err
}

// startGather starts step's all-gather, left running where the stage
// gathers late.
func (e *Executor) startGather(ctx context.Context, c StepComm, step int) error {
	if !e.late {
		return e.be.gather(ctx, c)
	}
	if gc, ok := c.(GatherBucketComm); ok && len(e.gatherBks) > 0 && e.shard != nil && e.shard.s.Count > 1 {
		g, err := e.be.gatherBuckets(ctx, gc, e.gatherBks, step)
		if err != nil || g != nil {
			e.gathering = g
			return err
		}
	}
	wait, err := e.be.gatherLate(ctx, c)
	if err != nil || wait == nil {
		return err
	}
	e.gathering = &lateGather{step: step, wait: wait}
	return nil
}

// gatherBuckets starts the host's all-gather in buckets (startBuckets):
// the ring writes each bucket into the parameters the forward reads.
func (h *hostStep) gatherBuckets(ctx context.Context, gc GatherBucketComm, bs []Bucket, step int) (*lateGather, error) {
	return startBuckets(ctx, gc, inOrder(h.e.ParamNames(), h.e.Params), bs, step), nil
}

// gatherBuckets brings the shard's pieces down to the staging and starts
// the all-gather in buckets over the staging (startBuckets); as the
// executor comes to a bucket it puts the other replicas' pieces of it up
// (devTrain.upSpans), marking the bf16 copies of its parameters stale.
func (b *cudaBackend) gatherBuckets(ctx context.Context, gc GatherBucketComm, bs []Bucket, step int) (*lateGather, error) {
	if b.e.shard == nil || b.e.shard.s.Count < 2 || b.host != nil {
		return nil, nil // offloaded: the host's state, gathered whole (gatherLate)
	}
	var params []*Value[float32]
	if err := b.run(func(s *kernel.Scope, t *devTrain) { params = t.downShard(s) }); err != nil || params == nil {
		return nil, err
	}
	g := startBuckets(ctx, gc, params, bs, step)
	g.arrive = func(k int) error { return b.run(func(s *kernel.Scope, t *devTrain) { t.upSpans(s, bs[k].Spans) }) }
	return g, nil
}

// gatherLate runs the host's all-gather in a goroutine: nothing reads or
// writes the parameters until the executor settles it.
func (h *hostStep) gatherLate(ctx context.Context, c StepComm) (func() error, error) {
	params, s := inOrder(h.e.ParamNames(), h.e.Params), h.e.shard.s
	return background(func() error { return allGather(ctx, c, params, s) }), nil
}

// gatherLate brings the shard's pieces down to the staging, runs the ring
// over the staging in a goroutine (the device free), and in the wait puts
// the other replicas' pieces up.
func (b *cudaBackend) gatherLate(ctx context.Context, c StepComm) (func() error, error) {
	if b.e.shard == nil || b.e.shard.s.Count < 2 {
		return nil, nil
	}
	if b.host != nil {
		return nil, fmt.Errorf("stage: a late all-gather with the optimizer offloaded")
	}
	var params []*Value[float32]
	if err := b.run(func(s *kernel.Scope, t *devTrain) { params = t.downShard(s) }); err != nil || params == nil {
		return nil, err
	}
	ring := background(func() error { return allGather(ctx, c, params, b.e.shard.s) })
	return func() error {
		if err := ring(); err != nil {
			return err
		}
		return b.run(func(s *kernel.Scope, t *devTrain) { t.upGathered(s) })
	}, nil
}

// background runs f in a goroutine; the function returned waits for it.
func background(f func() error) func() error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return func() error { return <-done }
}

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
// whole gather first. Each element is copied from the replica that
// updated it, as by the one ring: the same numbers bit for bit. On a
// device, or with a StepComm that has no GatherBucket, the gather stays
// whole. nil: whole.
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
	}
	return nil
}

// startBuckets starts every bucket's ring of a late all-gather over the
// host's parameters (params, in name order), each in a goroutine of its
// own.
func startBuckets(ctx context.Context, gc GatherBucketComm, params []*Value[float32], bs []Bucket, step int) *lateGather {
	g := &lateGather{step: step, done: make([]chan struct{}, len(bs)), errs: make([]error, len(bs)), need: map[int][]int{}}
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
			if first == nil && g.errs[b] != nil {
				first = fmt.Errorf("bucket %d: %w", b, g.errs[b])
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
	if _, ok := e.be.(*cpuBackend); ok && len(e.gatherBks) > 0 && e.shard != nil && e.shard.s.Count > 1 {
		if gc, ok := c.(GatherBucketComm); ok {
			e.gathering = startBuckets(ctx, gc, inOrder(e.ParamNames(), e.Params), e.gatherBks, step)
			return nil
		}
	}
	wait, err := e.be.gatherLate(ctx, c)
	if err != nil || wait == nil {
		return err
	}
	e.gathering = &lateGather{step: step, wait: wait}
	return nil
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

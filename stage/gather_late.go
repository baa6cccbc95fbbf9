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

// lateGather is an all-gather ApplyStep left running: wait ends it.
type lateGather struct {
	step int
	wait func() error
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
	wait, err := e.be.gatherLate(ctx, c)
	if err != nil || wait == nil {
		return err
	}
	e.gathering = &lateGather{step, wait}
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

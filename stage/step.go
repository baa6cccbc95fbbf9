package stage

import (
	"context"
	"fmt"
	"math"
)

// A step, as the executor runs it. Whoever drives the stage (the runtime's
// worker, whose action list interleaves transfers with the passes; the
// Trainer, in one process) runs the micro-batches' Forward, Backward and
// Weights; the first training Forward of a step keeps the buffers and
// starts the step's loss. Then:
//
//  1. EndStep makes the gradients final and judges them, in this order: the
//     gradients all-reduced over the stage's replicas (StepComm.AllReduce),
//     checked for values that are not finite (with the step's loss), and,
//     with clipping, the global norm pooled over every stage
//     (StepComm.PoolNorms) and the gradients scaled by clip_grad_norm_'s
//     coefficient. The gradients are read once for the check and the norms
//     (readGrads; on a device, with the step's losses, in one copy). It
//     returns the StepReport.
//  2. The caller decides whether to update: at once, or after sending the
//     report and hearing a verdict (the runtime's OnNonFinite skip), or on
//     the report alone (graphpipe train).
//  3. ApplyStep(skip) steps the optimizer at the schedule's rate or, with
//     skip, undoes the step (the buffers restored, the optimizer
//     untouched), and clears the gradients either way.
//
// Every piece runs on the backend (Backend), which owns where the state is.

// StepComm is what a step needs of the other workers of a pipeline run. The
// runtime's workers implement it over the wire; nil is one process.
type StepComm interface {
	// AllReduce sums grads over the stage's replicas, in place, every
	// replica ending with the same numbers. grads are the stage's
	// gradients in parameter-name order (Executor.ParamNames), to be laid
	// end to end.
	AllReduce(ctx context.Context, grads []*Value[float32]) error
	// PoolNorms is the global gradient norm over the whole model: this
	// stage's squared norms by parameter name (SquaredNorms) pooled with
	// every other stage's and summed by GlobalNorm.
	PoolNorms(ctx context.Context, squares map[string]float64) (float64, error)
}

// Replicated is what a StepComm may say besides: how many replicas its
// stage has. With fewer than 2, AllReduce would leave the gradients as they
// are, and a backend that keeps them on a device does not bring them to
// the host for it. A StepComm that does not say is handed them.
type Replicated interface {
	Replicas() int
}

// solo is one process's StepComm: no replicas, no other stages.
type solo struct{}

func (solo) Replicas() int { return 1 }

func (solo) AllReduce(context.Context, []*Value[float32]) error { return nil }

func (solo) PoolNorms(_ context.Context, squares map[string]float64) (float64, error) {
	return GlobalNorm(squares), nil
}

// StepReport is a stage's account of a step, as EndStep ends it.
type StepReport struct {
	Step int
	// Loss is the stage's share of the step's mean loss: over its
	// micro-batches in Forward's order, the loss Forward computed times the
	// weight Backward was seeded with (b/B). 0 unless it holds the loss.
	Loss float64
	// GradNorm is the global gradient norm before clipping, what
	// clip_grad_norm_ returns (0 without clipping).
	GradNorm float64
	// NonFinite says where the stage found a value that is not finite,
	// read before clipping: its loss, a gradient, a parameter or a buffer,
	// as `op "name": what`; "" if none.
	NonFinite string
}

// StepError is a piece of a step that failed.
type StepError struct {
	Step  int
	Piece string // "all-reduce", "gradients", "gradient norm", "optimizer step", "all-gather"
	Err   error
}

func (e *StepError) Error() string { return e.Piece + ": " + e.Err.Error() }

func (e *StepError) Unwrap() error { return e.Err }

// stepCheck is EndStep's finite check, kept until ApplyStep: GradsFinite
// and FirstNonFinite answer from it meanwhile, as it was before clipping.
type stepCheck struct {
	step     int
	finite   bool // every gradient
	scanned  bool // op and what come from a scan (FirstNonFinite)
	op, what string
	// comm and ctx are EndStep's, for ApplyStep's all-gather of a sharded
	// stage's parameters (ShardComm)
	comm StepComm
	ctx  context.Context
}

// lossPart is the weight one micro-batch's backward seeded its loss with;
// the loss itself the backend keeps (keepLoss).
type lossPart struct{ weight float32 }

// SetOptimizer makes o's optimizer (the catalogue's, after o.Check) on the
// backend; o's schedule and clipping drive EndStep and ApplyStep.
func (e *Executor) SetOptimizer(o TrainOptions) error {
	if err := e.be.setOptimizer(o); err != nil {
		return err
	}
	e.train = &o
	return nil
}

// EndStep ends step's computation (see the list above): the gradients
// all-reduced through comm (nil: one process), checked and clipped.
// ApplyStep must follow.
func (e *Executor) EndStep(ctx context.Context, step int, comm StepComm) (StepReport, error) {
	if e.train == nil {
		return StepReport{}, fmt.Errorf("stage: EndStep before SetOptimizer")
	}
	if comm == nil {
		comm = solo{}
	}
	rep := StepReport{Step: step}
	if err := e.be.allReduce(ctx, comm); err != nil {
		return rep, &StepError{step, "all-reduce", err}
	}
	clip := e.train.ClipGradNorm
	squares, finite, err := e.readGrads(clip > 0)
	scale := e.stepScale()
	for name, sq := range squares { // the norms of the gradients as Selected scales them
		if scale != 1 {
			squares[name] = sq * float64(scale) * float64(scale)
		}
	}
	if err == nil {
		rep.Loss, err = e.stepLoss()
	}
	var check *stepCheck
	if err == nil {
		check, err = e.check(step, rep.Loss, finite)
	}
	if err != nil {
		return rep, &StepError{step, "gradients", err}
	}
	rep.NonFinite = check.describe(e.lossOp, rep.Loss)
	check.comm, check.ctx = comm, ctx
	if clip > 0 {
		norm, err := comm.PoolNorms(ctx, squares)
		if err != nil {
			return rep, &StepError{step, "gradient norm", err}
		}
		rep.GradNorm = norm
		scale *= ClipCoef(clip, norm)
	}
	if clip > 0 || scale != 1 {
		if err := e.be.scaleGrads(scale); err != nil {
			return rep, &StepError{step, "gradient norm", err}
		}
	}
	e.pending = check
	return rep, nil
}

// readGrads reads the gradients once: for their squared norms when the
// step clips (a sum of squares in float64 is finite exactly when every
// float32 squared is, so the norms say whether the gradients are), else
// for the finite check alone.
func (e *Executor) readGrads(norms bool) (squares map[string]float64, finite bool, err error) {
	if !norms {
		finite, err = e.be.gradsFinite()
		return nil, finite, err
	}
	if squares, err = e.be.squaredNorms(); err != nil {
		return nil, false, err
	}
	for _, sq := range squares {
		if !isFinite(sq) {
			return squares, false, nil
		}
	}
	return squares, true, nil
}

// ApplyStep ends the step EndStep judged: the optimizer steps at the
// schedule's rate for it or, with skip, the step is undone (the buffers
// its forward passes moved restored, the optimizer untouched, as
// mixed-precision loss scaling skips a step); the gradients are cleared
// either way.
func (e *Executor) ApplyStep(skip bool) error {
	if err := e.settleGather(); err != nil {
		return err
	}
	p := e.pending
	if p == nil {
		return fmt.Errorf("stage: ApplyStep without EndStep")
	}
	e.turnVersions(p.step) // with two versions: the newest becomes the stale one
	if skip && e.stepping {
		if err := e.be.restoreBuffers(); err != nil {
			return &StepError{p.step, "optimizer step", err}
		}
	}
	if !skip {
		if err := e.be.update(e.train.Rate(p.step)); err != nil {
			return &StepError{p.step, "optimizer step", err}
		}
		if e.shard != nil {
			if err := e.startGather(p.ctx, p.comm, p.step); err != nil {
				return &StepError{p.step, "all-gather", err}
			}
		}
	}
	e.closeStep()
	if err := e.be.clearGrads(); err != nil {
		return &StepError{p.step, "optimizer step", err}
	}
	return nil
}

// openStep starts a step at its first training Forward: the buffers kept
// for a skip, the loss started.
func (e *Executor) openStep() error {
	if e.stepping {
		return nil
	}
	e.stepping, e.losses = true, e.losses[:0]
	return e.be.keepBuffers()
}

func (e *Executor) closeStep() {
	e.stepping, e.pending, e.losses, e.selScale, e.ovl = false, nil, e.losses[:0], 0, nil
}

// stepScale is what the step's gradients are scaled by before clipping:
// selective backprop's (Selected), else 1.
func (e *Executor) stepScale() float32 {
	if e.selScale == 0 {
		return 1
	}
	return e.selScale
}

// recordLoss keeps a training Forward's loss (on the backend), in
// Forward's order.
func (e *Executor) recordLoss(m *microBatch, out map[string]*Value[float32]) error {
	v := out[e.lossOp]
	if e.lossOp == "" || v == nil {
		return nil
	}
	m.lossAt = len(e.losses)
	e.losses = append(e.losses, lossPart{})
	return e.be.keepLoss(m.lossAt, v)
}

// seedLoss notes the weight a Backward gives micro-batch m's loss.
func (e *Executor) seedLoss(m *microBatch, grads map[string]*Value[float32]) {
	if s := grads[e.lossOp]; m.lossAt >= 0 && s != nil && len(s.Data) > 0 {
		e.losses[m.lossAt].weight = s.Data[0]
	}
}

// stepLoss is the step's loss share: Σ weight·loss in Forward's order.
func (e *Executor) stepLoss() (float64, error) {
	if len(e.losses) == 0 {
		return 0, nil
	}
	vals, err := e.be.stepLosses(len(e.losses))
	if err != nil {
		return 0, err
	}
	var loss float64
	for i, p := range e.losses {
		loss += float64(p.weight) * float64(vals[i])
	}
	return loss, nil
}

// check is the step's finite check, given whether the gradients are
// (readGrads): only when one is not, or the loss is not, it scans for the
// first value that is not.
func (e *Executor) check(step int, loss float64, finite bool) (*stepCheck, error) {
	c := &stepCheck{step: step, finite: finite}
	if !c.finite || e.lossOp != "" && !isFinite(loss) {
		var err error
		if c.op, c.what, err = e.be.firstNonFinite(); err != nil {
			return nil, err
		}
		c.scanned = true
	}
	return c, nil
}

// describe is the check's verdict as StepReport.NonFinite words it.
func (c *stepCheck) describe(lossOp string, loss float64) string {
	switch {
	case !c.scanned:
		return ""
	case c.op != "":
		return fmt.Sprintf("op %q: %s", c.op, c.what)
	}
	return fmt.Sprintf("op %q: the loss is %v", lossOp, float32(loss))
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// OptimizerState is the optimizer's state, every tensor as
// "<param>.<slot>", and its step count (Stateful): what a checkpoint
// holds, brought to the host.
func (e *Executor) OptimizerState() (map[string][]float32, int, error) {
	if err := e.settleGather(); err != nil {
		return nil, 0, err
	}
	if e.train == nil {
		return nil, 0, fmt.Errorf("stage: no optimizer (SetOptimizer)")
	}
	st, n, err := e.be.optimizerState()
	return e.withStale(st), n, err // with two versions, the stale one too
}

// LoadOptimizerState restores what OptimizerState returned (a checkpoint's
// share of it) for the stage's parameters.
func (e *Executor) LoadOptimizerState(st map[string][]float32, step int) error {
	if e.train == nil {
		return fmt.Errorf("stage: no optimizer (SetOptimizer)")
	}
	st, err := e.takeStale(st) // the stale version, where the state has one
	if err != nil {
		return err
	}
	return e.be.loadOptimizerState(st, step)
}

// HostState is State brought to the host first: what a checkpoint, a dump
// or an export reads. On the CUDA backend, State alone may be behind the
// device (backend_cuda.go).
func (e *Executor) HostState() (map[string]*Value[float32], error) {
	if err := e.settleGather(); err != nil {
		return nil, err
	}
	if err := e.be.fetch(); err != nil {
		return nil, err
	}
	return e.State(), nil
}

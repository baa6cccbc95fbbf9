package stage

import (
	"context"
	"fmt"
)

// hostStep runs a step's pieces on the host's copies of the state: the
// whole step of the CPU backend (backend_cpu.go).
type hostStep struct {
	e       *Executor
	opt     Optimizer
	buffers map[string][]float32 // the buffers as the step began (keepBuffers)
	losses  []float32            // the step's losses, by slot (keepLoss)
}

func (h *hostStep) setOptimizer(o TrainOptions) error {
	opt, err := NewOptimizer(o)
	if err != nil {
		return err
	}
	h.opt = opt
	return nil
}

// keepLoss notes the loss Forward computed on the host.
func (h *hostStep) keepLoss(slot int, v *Value[float32]) error {
	for len(h.losses) <= slot {
		h.losses = append(h.losses, 0)
	}
	h.losses[slot] = v.Data[0]
	return nil
}

func (h *hostStep) stepLosses(n int) ([]float32, error) { return h.losses[:n], nil }

// allReduce hands c the gradients in parameter-name order: to be summed,
// or of a sharded stage reduce-scattered.
func (h *hostStep) allReduce(ctx context.Context, c StepComm) error {
	grads := inOrder(h.e.ParamNames(), h.e.Grads)
	if v := h.e.shard; v != nil {
		return reduceScatter(ctx, c, grads, v.s)
	}
	return c.AllReduce(ctx, grads)
}

// gather hands a sharded stage's parameters to c's all-gather.
func (h *hostStep) gather(ctx context.Context, c StepComm) error {
	return allGather(ctx, c, inOrder(h.e.ParamNames(), h.e.Params), h.e.shard.s)
}

// inOrder is vals of names, in that order.
func inOrder(names []string, vals map[string]*Value[float32]) []*Value[float32] {
	out := make([]*Value[float32], len(names))
	for i, name := range names {
		out[i] = vals[name]
	}
	return out
}

// reduceScatter is c's reduce-scatter of grads, for shard s (nothing to
// do for a stage of one replica).
func reduceScatter(ctx context.Context, c StepComm, grads []*Value[float32], s Shard) error {
	if s.Count < 2 {
		return nil
	}
	sc, ok := c.(ShardComm)
	if !ok {
		return &ShardError{s, fmt.Sprintf("the step's %T has no reduce-scatter (ShardComm)", c)}
	}
	return sc.ReduceScatter(ctx, grads)
}

// allGather is c's all-gather of params, for shard s.
func allGather(ctx context.Context, c StepComm, params []*Value[float32], s Shard) error {
	if s.Count < 2 {
		return nil
	}
	sc, ok := c.(ShardComm)
	if !ok {
		return &ShardError{s, fmt.Sprintf("the step's %T has no all-gather (ShardComm)", c)}
	}
	return sc.AllGather(ctx, params)
}

// stepState is what the step reads and writes after the all-reduce: every
// parameter and gradient, or of a sharded stage its shard's pieces of them
// (the rest of its gradients are partial sums, the rest of its parameters
// another replica's to update).
func (h *hostStep) stepState() (params, grads map[string]*Value[float32]) {
	if v := h.e.shard; v != nil {
		return v.params, v.grads
	}
	return h.e.Params, h.e.Grads
}

// gradsFinite reads every gradient (of the shard) once, all of them split
// over the cores.
func (h *hostStep) gradsFinite() (bool, error) {
	_, grads := h.stepState()
	return allFinite(gradData(grads)), nil
}

func (h *hostStep) firstNonFinite() (op, what string, err error) {
	op, what = h.e.scanNonFinite()
	return op, what, nil
}

// squaredNorms is each gradient's squared norm, of a sharded stage its
// shard's part of it (the runtime pools the parts: PoolNorms).
func (h *hostStep) squaredNorms() (map[string]float64, error) {
	_, grads := h.stepState()
	return SquaredNorms(grads), nil
}

func (h *hostStep) scaleGrads(c float32) error {
	_, grads := h.stepState()
	ScaleGrads(grads, c)
	return nil
}

func (h *hostStep) update(rate float64) error {
	params, grads := h.stepState()
	h.opt.Step(params, grads, rate)
	return nil
}

func (h *hostStep) clearGrads() error {
	all := gradData(h.e.Grads)
	eachPiece(sizesOf(all), func(k, lo, hi int) { clear(all[k][lo:hi]) })
	return nil
}

// keepBuffers copies the buffers into the step's snapshot, reusing the
// last step's storage.
func (h *hostStep) keepBuffers() error {
	if len(h.e.Buffers) == 0 {
		h.buffers = nil
		return nil
	}
	last := h.buffers
	h.buffers = make(map[string][]float32, len(h.e.Buffers))
	for name, b := range h.e.Buffers {
		h.buffers[name] = append(last[name][:0], b.Data...)
	}
	return nil
}

func (h *hostStep) restoreBuffers() error {
	for name, v := range h.buffers {
		copy(h.e.Buffers[name].Data, v)
	}
	return nil
}

// stateBytes is what the optimizer's state holds (of a sharded stage, its
// shard's).
func (h *hostStep) stateBytes() int64 { return heldBytes(h.opt) }

func (h *hostStep) optimizerState() (map[string][]float32, int, error) {
	st, n := h.opt.(Stateful).State()
	return st, n, nil
}

// loadOptimizerState loads st, a whole stage's state, or of a sharded
// stage the shard's pieces of it.
func (h *hostStep) loadOptimizerState(st map[string][]float32, step int) error {
	if v := h.e.shard; v != nil {
		return h.opt.(Stateful).LoadState(v.slice(st), step, v.params)
	}
	return h.opt.(Stateful).LoadState(st, step, h.e.Params)
}

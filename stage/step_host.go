package stage

import (
	"context"
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

// allReduce hands c the gradients in parameter-name order.
func (h *hostStep) allReduce(ctx context.Context, c StepComm) error {
	names := h.e.ParamNames()
	grads := make([]*Value[float32], len(names))
	for i, name := range names {
		grads[i] = h.e.Grads[name]
	}
	return c.AllReduce(ctx, grads)
}

// gradsFinite reads every gradient once, all of them split over the cores.
func (h *hostStep) gradsFinite() (bool, error) { return allFinite(gradData(h.e.Grads)), nil }

func (h *hostStep) firstNonFinite() (op, what string, err error) {
	op, what = h.e.scanNonFinite()
	return op, what, nil
}

func (h *hostStep) squaredNorms() (map[string]float64, error) { return SquaredNorms(h.e.Grads), nil }

func (h *hostStep) scaleGrads(c float32) error {
	ScaleGrads(h.e.Grads, c)
	return nil
}

func (h *hostStep) update(rate float64) error {
	h.opt.Step(h.e.Params, h.e.Grads, rate)
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

func (h *hostStep) optimizerState() (map[string][]float32, int, error) {
	st, n := h.opt.(Stateful).State()
	return st, n, nil
}

func (h *hostStep) loadOptimizerState(st map[string][]float32, step int) error {
	return h.opt.(Stateful).LoadState(st, step, h.e.Params)
}

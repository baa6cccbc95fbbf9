package stage

import "context"

// hostStep runs a step's pieces on the host's copies of the state: the
// whole step of the CPU backend, and of the CUDA backend once its gradients
// are on the host (backend_cuda.go).
type hostStep struct {
	e       *Executor
	opt     Optimizer
	buffers map[string][]float32 // the buffers as the step began (keepBuffers)
}

func (h *hostStep) setOptimizer(o TrainOptions) error {
	opt, err := NewOptimizer(o)
	if err != nil {
		return err
	}
	h.opt = opt
	return nil
}

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
func (h *hostStep) gradsFinite() bool { return allFinite(gradData(h.e.Grads)) }

func (h *hostStep) firstNonFinite() (op, what string) { return h.e.scanNonFinite() }

func (h *hostStep) squaredNorms() map[string]float64 { return SquaredNorms(h.e.Grads) }

func (h *hostStep) scaleGrads(c float32) { ScaleGrads(h.e.Grads, c) }

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
func (h *hostStep) keepBuffers() {
	if len(h.e.Buffers) == 0 {
		h.buffers = nil
		return
	}
	last := h.buffers
	h.buffers = make(map[string][]float32, len(h.e.Buffers))
	for name, b := range h.e.Buffers {
		h.buffers[name] = append(last[name][:0], b.Data...)
	}
}

func (h *hostStep) restoreBuffers() {
	for name, v := range h.buffers {
		copy(h.e.Buffers[name].Data, v)
	}
}

func (h *hostStep) optimizerState() (map[string][]float32, int) {
	return h.opt.(Stateful).State()
}

func (h *hostStep) loadOptimizerState(st map[string][]float32, step int) error {
	return h.opt.(Stateful).LoadState(st, step, h.e.Params)
}

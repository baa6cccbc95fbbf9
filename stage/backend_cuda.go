package stage

import (
	"fmt"

	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// cudaBackend computes on a GPU. The values of the micro-batches in flight
// and the parameters' gradients live on the device (devState, gpu_exec.go);
// for now the rest of the state is the host's:
//
//   - the parameters are uploaded at their first use after a change (an
//     update, a restore, a load), so the host's Params are always current;
//   - the gradients accumulate on the device over an iteration's
//     micro-batches and come down into the host's Grads when the step
//     gathers them (gather), before the all-reduce; the step's other pieces
//     (finite check, norms, clip, optimizer) run on the host (hostStep),
//     with the optimizer's state;
//   - the buffers stay on the host, where the kernels move batch_norm's
//     running statistics.
//
// Keeping the parameters, gradients and optimizer state on the device from
// the first step to the last is this backend's to do behind the same
// methods: the executor's callers see no difference.
type cudaBackend struct {
	hostStep
	d   *cuda.Device
	dev *devState
}

func (b *cudaBackend) Name() string { return "cuda" }

func (b *cudaBackend) bind(e *Executor) (map[int]kernel[float32], error) {
	if b.e != nil {
		return nil, fmt.Errorf("stage: a backend serves one executor")
	}
	dev := newDevState(b.d, e)
	kernels := make(map[int]kernel[float32], len(e.ops))
	for _, i := range e.ops {
		k, err := newGPUKernel(e.g, i, b.d, dev, &e.devErr, &e.ctx)
		if err != nil {
			return nil, err
		}
		kernels[i] = k
	}
	b.e, b.dev = e, dev
	return kernels, nil
}

// begin drops the parameters' device copies when the host's have changed
// and nothing is in flight, and starts mb's residency.
func (b *cudaBackend) begin(mb int) error {
	if len(b.e.mbs) == 0 && b.dev.stale {
		if err := b.dev.dropParams(); err != nil {
			return err
		}
	}
	b.dev.begin(mb)
	return nil
}

func (b *cudaBackend) resume(mb int) { b.dev.use(mb) }

// outputs downloads, into pinned staging memory, what leaves the stage:
// the outputs read outside it and the loss (with eval, the loss's inputs).
func (b *cudaBackend) outputs(out map[string]*Value[float32], eval bool) error {
	return b.dev.fetch(out, func(name string) bool { return b.dev.external[name] || eval && b.e.lossReads(name) }, true)
}

func (b *cudaBackend) inputGrads(out map[string]*Value[float32]) error {
	return b.dev.fetch(out, func(string) bool { return true }, false)
}

// detach copies an evaluation's outputs out of their staging memory, which
// goes back with the micro-batch.
func (b *cudaBackend) detach(out map[string]*Value[float32]) {
	for name, v := range out {
		out[name] = v.Clone()
	}
}

// newGrad is shape only: the gradient lives on the device.
func (b *cudaBackend) newGrad(shape []int) *Value[float32] {
	return &Value[float32]{Shape: append([]int(nil), shape...)}
}

func (b *cudaBackend) shed(mb int, feeds map[string]*Value[float32]) error {
	keep := make(map[*Value[float32]]bool, len(feeds))
	for _, v := range feeds {
		keep[v] = true
	}
	return b.dev.shed(mb, keep)
}

func (b *cudaBackend) release(mb int) error { return b.dev.release(mb) }

func (b *cudaBackend) waitOp() error { return b.d.Sync() }

func (b *cudaBackend) precision(p string) error {
	b.dev.bf16, b.dev.tf32 = p == "bf16", p == "tf32"
	return nil
}

// close frees the gradients and the parameters' copies (the executor has
// released its micro-batches).
func (b *cudaBackend) close() error {
	err := b.dev.syncGrads(false)
	if err2 := b.dev.dropParams(); err == nil {
		err = err2
	}
	return err
}

// gather adds the gradients accumulated on the device into the host's.
func (b *cudaBackend) gather() error { return b.dev.syncGrads(true) }

func (b *cudaBackend) update(rate float64) error {
	err := b.hostStep.update(rate)
	b.changed()
	return err
}

// clearGrads clears the host's gradients and frees any left on the device.
func (b *cudaBackend) clearGrads() error {
	b.hostStep.clearGrads()
	return b.dev.syncGrads(false)
}

func (b *cudaBackend) restoreBuffers() {
	b.hostStep.restoreBuffers()
	if len(b.buffers) > 0 {
		b.changed()
	}
}

// changed marks the parameters' device copies stale: the next Forward with
// nothing in flight drops them.
func (b *cudaBackend) changed() { b.dev.stale = true }

// fetch has nothing to bring: the host's parameters and buffers are current.
func (b *cudaBackend) fetch() error { return nil }

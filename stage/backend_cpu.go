package stage

import (
	"fmt"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// cpuBackend computes on the host: the executor's Params, Grads and Buffers
// are the state, values in flight are host values, and a step's pieces run
// on the host (hostStep, step_host.go), the ones after the check fused into
// one pass (fused below).
type cpuBackend struct {
	hostStep
	fused
}

func (b *cpuBackend) Name() string { return "cpu" }

func (b *cpuBackend) bind(e *Executor) (map[int]kernel.Kernel[float32], error) {
	if b.e != nil {
		return nil, fmt.Errorf("stage: a backend serves one executor")
	}
	kernels := make(map[int]kernel.Kernel[float32], len(e.ops))
	for _, i := range e.ops {
		k, err := kernel.New[float32](e.g, i, &e.ctx)
		if err != nil {
			return nil, err
		}
		kernels[i] = k
	}
	b.e = e
	return kernels, nil
}

// On the host every value is where the host reads it: the passes have
// nothing to move or free.

func (b *cpuBackend) begin(int) error { return nil }

func (b *cpuBackend) resume(int) {}

func (b *cpuBackend) outputs(map[string]*Value[float32], bool) error { return nil }

func (b *cpuBackend) inputGrads(map[string]*Value[float32]) error { return nil }

func (b *cpuBackend) detach(map[string]*Value[float32]) {}

func (b *cpuBackend) newGrad(shape []int) *Value[float32] { return NewValue[float32](shape...) }

func (b *cpuBackend) shed(int, map[string]*Value[float32]) error { return nil }

func (b *cpuBackend) release(int) error { return nil }

func (b *cpuBackend) waitOp() error { return nil }

func (b *cpuBackend) close() error { return nil }

func (b *cpuBackend) fetchGrads() error { return nil }

func (b *cpuBackend) changed([]string) {}

func (b *cpuBackend) fetch() error { return nil }

func (b *cpuBackend) attention(fused bool) error {
	if fused {
		return fmt.Errorf("attention fused: the CPU backend computes attention unfused; fused attention runs on the CUDA backend")
	}
	return nil
}

func (b *cpuBackend) precision(p kernel.Precision) error {
	if p != kernel.FP32 {
		return fmt.Errorf("precision %s: the CPU backend computes in float32 only; %s runs on the CUDA backend", p, p)
	}
	return nil
}

// fused is the CPU backend's step after EndStep's one read of the gradients
// (the finite check, or the squared norms that tell it): the clip's scale
// is kept rather than applied, and the optimizer's pass over the
// parameters reads each gradient, scales it, zeroes it and updates with it
// (fusedOptimizer). Two passes over the gradients where there were four
// (check or norms, scale, update, clear), with the same arithmetic for
// every element. Between EndStep and ApplyStep the host's gradients stay as
// they were before the clip; nothing reads them then but FirstNonFinite,
// which answers as things were before the clip.
type fused struct {
	scale   float32 // the clip's coefficient, when scaled
	scaled  bool
	cleared bool // the update zeroed the gradients
}

func (b *cpuBackend) scaleGrads(c float32) error {
	b.scale, b.scaled = c, c != 1
	return nil
}

func (b *cpuBackend) update(rate float64) error {
	f, ok := b.opt.(fusedOptimizer)
	if !ok {
		if b.scaled {
			b.scaled = false
			if err := b.hostStep.scaleGrads(b.scale); err != nil {
				return err
			}
		}
		return b.hostStep.update(rate)
	}
	scale := float32(1)
	if b.scaled {
		scale = b.scale
	}
	// a sharded stage's update reads its shard of the gradients alone: the
	// clear of the rest is clearGrads'
	params, grads := b.stepState()
	whole := b.e.shard == nil
	f.step(params, grads, rate, scale, whole)
	b.scaled, b.cleared = false, whole
	return nil
}

func (b *cpuBackend) clearGrads() error {
	if !b.cleared {
		b.hostStep.clearGrads()
	}
	b.fused = fused{}
	return nil
}

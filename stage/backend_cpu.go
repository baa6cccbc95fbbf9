package stage

import "fmt"

// cpuBackend computes on the host: the executor's Params, Grads and Buffers
// are the state, values in flight are host values, and a step's pieces run
// on the host (hostStep, step_host.go).
type cpuBackend struct{ hostStep }

func (b *cpuBackend) Name() string { return "cpu" }

func (b *cpuBackend) bind(e *Executor) (map[int]kernel[float32], error) {
	if b.e != nil {
		return nil, fmt.Errorf("stage: a backend serves one executor")
	}
	kernels := make(map[int]kernel[float32], len(e.ops))
	for _, i := range e.ops {
		k, err := newKernel[float32](e.g, i, &e.ctx)
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

func (b *cpuBackend) begin(int) error                                { return nil }
func (b *cpuBackend) resume(int)                                     {}
func (b *cpuBackend) outputs(map[string]*Value[float32], bool) error { return nil }
func (b *cpuBackend) inputGrads(map[string]*Value[float32]) error    { return nil }
func (b *cpuBackend) detach(map[string]*Value[float32])              {}
func (b *cpuBackend) newGrad(shape []int) *Value[float32]            { return NewValue[float32](shape...) }
func (b *cpuBackend) shed(int, map[string]*Value[float32]) error     { return nil }
func (b *cpuBackend) release(int) error                              { return nil }
func (b *cpuBackend) waitOp() error                                  { return nil }
func (b *cpuBackend) close() error                                   { return nil }
func (b *cpuBackend) fetchGrads() error                              { return nil }
func (b *cpuBackend) changed([]string)                               {}
func (b *cpuBackend) fetch() error                                   { return nil }

func (b *cpuBackend) precision(p string) error {
	if p != "fp32" {
		return fmt.Errorf("precision %s: the CPU backend computes in float32 only; %s runs on the CUDA backend", p, p)
	}
	return nil
}

package profile

import (
	goruntime "runtime"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// CPUMeter measures this machine with package tensor's kernels; the links it
// probes are those CPU workers on this host use.
func CPUMeter() Meter { return cpuMeter{} }

// cpuMeter measures this machine with package tensor's kernels.
type cpuMeter struct{}

func (cpuMeter) name() string { return "cpu" }

func (cpuMeter) sizes(quick bool) []int {
	if quick {
		return []int{32, 64, 128, 256}
	}
	return []int{32, 64, 128, 256, 512, 1024}
}

func (cpuMeter) gemm(n int, prec string) (float64, error) {
	if prec != "fp32" {
		return 0, nil // the CPU backend computes in float32 alone
	}
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = float32(i%7)/7, float32(i%5)/5
	}
	return timeIt(3, func() error { tensor.Sgemm(false, false, n, n, n, 1, a, n, b, n, 0, c, n); return nil })
}

func (cpuMeter) launch() (float64, error) {
	a, b, c := []float32{1}, []float32{1}, []float32{0}
	const calls = 1000
	t, err := timeIt(3, func() error {
		for i := 0; i < calls; i++ {
			tensor.Sgemm(false, false, 1, 1, 1, 1, a, 1, b, 1, 0, c, 1)
		}
		return nil
	})
	return t / calls, err
}

func (cpuMeter) copyRate(bytes int) (float64, error) {
	src, dst := make([]byte, bytes), make([]byte, bytes)
	for i := range src { // touch every page: untouched pages all read as one zero page
		src[i], dst[i] = byte(i), 1
	}
	t, err := timeIt(3, func() error { copy(dst, src); return nil })
	return 2 * float64(bytes) / t, err
}

func (cpuMeter) memory() int64 {
	if m := HostMemory(); m > 0 {
		return m
	}
	return plan.Profiles["cpu"].Memory
}

func (cpuMeter) base() plan.Device { return plan.Profiles["cpu"] }

// runCosts measures what CPU workers on this host pay beside their ops:
// the NATS path between them (their links), message costs, the ring
// all-reduce, an iteration's fixed cost, and the sharing of the cores.
func (cpuMeter) runCosts(quick bool) (plan.RunCosts, *RunCostsResult, error) {
	return MeasureRunCosts(RunCostsPlan{Cores: goruntime.NumCPU(), CPU: true, Quick: quick})
}

func (cpuMeter) device() *cuda.Device { return nil }

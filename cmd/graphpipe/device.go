package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// deviceFlags choose where workers compute: --backend, and --gpus (run:
// one entry per local worker, in turn) or --gpu (worker, train).
type deviceFlags struct {
	backend   string
	gpus      string
	gpu       int
	precision string // what matrix products compute in: fp32, tf32 or bf16 (tf32 and bf16 on CUDA backends)
	attention string // how attention runs: unfused, or fused (CUDA backends)
	noIPC     bool   // --no-ipc: every edge's tensors as bytes over NATS
	// perGPU is how many of the plan's devices share one GPU (run, where
	// its local CUDA workers outnumber the GPUs): device d's worker runs on
	// the (d/perGPU)th GPU entry; 0: workers take the entries in turn
	perGPU int
}

const attentionHelp = "unfused (its products as GEMMs, the sequence × sequence scores stored for the backward) or, with a CUDA backend, fused (one kernel a row in registers: the scores never stored, computed again in the backward, on the CUDA cores); a plan's attention is its own"

const backendHelp = "where ops run: cpu, cuda (NVIDIA GPUs through the driver, cuBLAS and NVRTC), or cuda-emulator (the CUDA code path with its kernels compiled for the CPU by g++: for testing)"

const noIPCHelp = "send every edge's tensors over NATS as bytes, even between workers whose GPUs (or CUDA emulators) share a host, which otherwise copy them device to device through an IPC handle"

const precisionHelp = "fp32; or, with a CUDA backend, tf32 (float32 storage, matrix products on TF32 tensor cores: PyTorch's allow_tf32) or bf16 (PyTorch's autocast: matrix products on bf16 operands with float32 accumulation, activations, their gradients, stashes and stage edges stored in bf16, normalisations, softmax and losses computed in float32, weights, gradients and optimizer state in float32); a plan's precision is its own"

func (f *deviceFlags) registerRun(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.backend, "backend", "cpu", backendHelp)
	cmd.Flags().StringVar(&f.precision, "precision", "fp32", precisionHelp)
	cmd.Flags().StringVar(&f.attention, "attention", "unfused", attentionHelp)
	cmd.Flags().BoolVar(&f.noIPC, "no-ipc", false, noIPCHelp)
	cmd.Flags().StringVar(&f.gpus, "gpus", "", "with --backend cuda: GPU ordinals (after CUDA_VISIBLE_DEVICES) for the local workers, e.g. 0,1,2,3; where the workers outnumber them, each GPU takes the workers of consecutive devices and the run is planned with it time-sliced among them; \"cpu\" entries keep a worker on the CPU and workers take the entries in turn (default: every GPU the driver sees)")
}

func (f *deviceFlags) registerWorker(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.backend, "backend", "cpu", backendHelp)
	cmd.Flags().IntVar(&f.gpu, "gpu", 0, "with --backend cuda: the GPU ordinal (after CUDA_VISIBLE_DEVICES)")
	cmd.Flags().BoolVar(&f.noIPC, "no-ipc", false, noIPCHelp)
	cmd.Flags().StringVar(&f.precision, "precision", "fp32", precisionHelp)
	cmd.Flags().StringVar(&f.attention, "attention", "unfused", attentionHelp)
}

func (f *deviceFlags) checkBackend() error {
	switch f.backend {
	case "cpu", "cuda", "cuda-emulator":
	default:
		return usagef("--backend: unknown backend %q (known: cpu, cuda, cuda-emulator)", f.backend)
	}
	switch {
	case f.precision != "" && f.precision != "fp32" && f.precision != "tf32" && f.precision != "bf16":
		return usagef("--precision: unknown precision %q (known: fp32, tf32, bf16)", f.precision)
	case f.precision != "" && f.precision != "fp32" && f.backend == "cpu":
		return usagef("--precision %s: the cpu backend computes in float32 only; %s needs --backend cuda (or cuda-emulator)", f.precision, f.precision)
	case plan.CheckAttention(f.attention) != nil:
		return usagef("--attention: %v", plan.CheckAttention(f.attention))
	case f.attention == plan.Fused && f.backend == "cpu":
		return usagef("--attention fused: the cpu backend computes attention unfused; fused needs --backend cuda (or cuda-emulator)")
	}
	return nil
}

// open opens the worker's device: nil for the CPU. A missing driver or
// library is an error naming it (exit 1).
func (f *deviceFlags) open() (*cuda.Device, error) {
	if err := f.checkBackend(); err != nil {
		return nil, err
	}
	switch f.backend {
	case "cuda":
		if f.gpu < 0 {
			return nil, usagef("--gpu: must be at least 0, got %d", f.gpu)
		}
		return cuda.Open(f.gpu)
	case "cuda-emulator":
		lib, err := cuda.EmulatorLibrary()
		if err != nil {
			return nil, err
		}
		return cuda.OpenEmulator(lib)
	}
	return nil, nil
}

// workerArgs checks the run's device flags and returns each local worker's
// extra arguments. With --backend cuda the driver must load here, so that a
// machine without one fails at the start, naming the library.
func (f *deviceFlags) workerArgs(workers workersFlag, emulate bool, plan *plan.Plan, log io.Writer) (func(int) []string, error) {
	if err := f.checkBackend(); err != nil {
		return nil, err
	}
	cpu := func(int) []string { return nil }
	if f.backend == "cpu" {
		if f.gpus != "" {
			return nil, usagef("--gpus: needs --backend cuda")
		}
		return cpu, nil
	}
	if !workers.local() {
		return nil, usagef("--backend %s: with --workers external, each 'graphpipe worker' takes its own --backend and --gpu", f.backend)
	}
	if emulate {
		return nil, usagef("--backend %s: an emulated run computes nothing", f.backend)
	}
	prec := []string{"--precision", f.precision, "--attention", cmp.Or(f.attention, "unfused")}
	if f.backend == "cuda-emulator" {
		if _, err := cuda.EmulatorLibrary(); err != nil {
			return nil, err
		}
		return func(int) []string { return append([]string{"--backend", "cuda-emulator"}, prec...) }, nil
	}
	n, err := cuda.Available()
	if err != nil {
		return nil, err
	}
	entries, err := parseGPUs(f.gpus, n)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e < 0 && f.precision != "" && f.precision != "fp32" {
			return nil, usagef("--precision %s: --gpus keeps a worker on the cpu backend, which computes in float32 only", f.precision)
		}
	}
	need := 0 // one worker per device of the plan
	for _, s := range plan.Stages {
		need += len(s.Devices)
	}
	gpuOf := func(i int) int { return entries[i%len(entries)] }
	switch {
	case f.perGPU > 1:
		devs := workerDevices(plan)
		gpuOf = func(i int) int { return entries[min(devs[i]/f.perGPU, len(entries)-1)] }
		fmt.Fprintf(log, "graphpipe: %d workers on %s: up to %d on a GPU, which runs their kernels in turns (priced so)\n",
			need, plural(len(entries), "GPU"), f.perGPU)
	case need > len(entries):
		fmt.Fprintf(log, "graphpipe: %d workers on %d GPU entries: workers share GPUs in turn\n", need, len(entries))
	}
	return func(i int) []string {
		e := gpuOf(i)
		if e < 0 {
			return []string{"--backend", "cpu"}
		}
		return append([]string{"--backend", "cuda", "--gpu", strconv.Itoa(e)}, prec...)
	}, nil
}

// workersPerGPU is how many of a local CUDA run's devices share each GPU
// its --gpus names (or the driver sees): the devices over the GPUs,
// rounded up; 1 where they do not outnumber them, where a worker stays on
// the CPU, and where the driver or --gpus fails (workerArgs then says why).
func (f *deviceFlags) workersPerGPU(workers workersFlag, emulate bool, devices int) int {
	if f.backend != "cuda" || !workers.local() || emulate {
		return 1
	}
	n, err := cuda.Available()
	if err != nil {
		return 1
	}
	entries, err := parseGPUs(f.gpus, n)
	if err != nil {
		return 1
	}
	return gpuShare(devices, entries)
}

// gpuShare is how many of devices share each GPU entry (rounded up), 1
// where an entry is the CPU or there are none.
func gpuShare(devices int, entries []int) int {
	if len(entries) == 0 || slices.Contains(entries, -1) {
		return 1
	}
	return max(1, (devices+len(entries)-1)/len(entries))
}

// workerDevices is each worker's device in p: workers go stage by stage,
// each stage's devices in order.
func workerDevices(p *plan.Plan) []int {
	var out []int
	for _, s := range p.Stages {
		out = append(out, s.Devices...)
	}
	return out
}

// parseGPUs reads --gpus: ordinals below n, or "cpu" (returned as −1);
// empty means every GPU.
func parseGPUs(spec string, n int) ([]int, error) {
	if spec == "" {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	for _, e := range strings.Split(spec, ",") {
		e = strings.TrimSpace(e)
		if e == "cpu" {
			out = append(out, -1)
			continue
		}
		v, err := strconv.Atoi(e)
		if err != nil || v < 0 {
			return nil, usagef("--gpus: %q is neither a GPU ordinal nor \"cpu\"", e)
		}
		if v >= n {
			return nil, usagef("--gpus: GPU %d does not exist: the driver sees %d", v, n)
		}
		out = append(out, v)
	}
	return out, nil
}

// useDevice moves a trainer onto the flags' device, if any.
func (f *deviceFlags) useDevice(t *stage.Trainer) (func(), error) {
	dev, err := f.open()
	if err != nil || dev == nil {
		return func() {}, err
	}
	if err := t.Ex.UseDevice(dev); err != nil {
		dev.Close()
		return func() {}, err
	}
	if err := t.Ex.SetPrecision(f.precision); err != nil {
		dev.Close()
		return func() {}, usagef("--precision: %v", err)
	}
	if err := t.Ex.SetAttention(f.attention == plan.Fused); err != nil {
		dev.Close()
		return func() {}, usagef("--attention: %v", err)
	}
	return func() { dev.Close() }, nil
}

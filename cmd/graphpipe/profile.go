package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	goruntime "runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// meter measures one device for a profile.
type meter interface {
	name() string
	gemm(n int, half bool) (float64, error) // seconds per n×n×n GEMM (FP32, or BF16 with FP32 accumulation)
	launch() (float64, error)               // seconds of fixed cost per kernel call
	device() *cuda.Device                   // where the executor runs ops: nil for the CPU
	copyRate(bytes int) (float64, error)    // bytes moved (read + written) per second
	memory() int64
	base() plan.Device // where the links come from when links cannot measure them
	// links measures the links between workers of this kind on one host:
	// one-way seconds per message size, or ok false when it cannot
	links(quick bool) (sizes []int, oneWay []float64, ok bool, err error)
	sizes(quick bool) []int
	close()
}

// timeIt runs f reps times after one warm-up and returns the fastest run.
func timeIt(reps int, f func() error) (float64, error) {
	if err := f(); err != nil {
		return 0, err
	}
	best := math.Inf(1)
	for i := 0; i < reps; i++ {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		best = math.Min(best, time.Since(start).Seconds())
	}
	return best, nil
}

type profileResult struct {
	Format  string      `json:"format"` // profileFormat
	Device  plan.Device `json:"device"`
	Sizes   []int       `json:"gemm_sizes"`
	FP32    []float64   `json:"gemm_fp32_s"`
	BF16    []float64   `json:"gemm_bf16_s,omitempty"`
	LinksOf string      `json:"links_from"`
	// KernelLaunch is the bare cost of a kernel call; Device.Launch is an
	// op call's through the executor (the larger).
	KernelLaunch float64 `json:"kernel_launch_s"`
	// LinkSizes and LinkS are the probed message sizes and one-way times,
	// where the links were measured.
	LinkSizes []int     `json:"link_sizes,omitempty"`
	LinkS     []float64 `json:"link_one_way_s,omitempty"`
}

func newProfileCmd() *cobra.Command {
	var device, out, model string
	var gpu int
	var quick, asJSON bool
	var batch int64
	cmd := &cobra.Command{
		Use:   "profile [--device cpu|cuda] [--model MODEL] [-o FILE]",
		Short: "Measure a device profile (GEMM rate and efficiency, launch cost, memory bandwidth) for the planner",
		Long: `Measure this machine's CPU, or a GPU, and write a device profile that
'graphpipe search --device FILE' reads. GEMMs of growing size fit the cost
model's compute term (the rate large calls approach, and the work at which a
call reaches half of it); a chain of tiny ops trained through the stage
executor gives the fixed cost of an op call (the bare kernel launch is
reported beside it); a large copy gives memory bandwidth. On the CPU, the
links between workers on this host (endpoints over an embedded NATS server)
are probed with messages of growing size; links between GPUs cannot be
measured from one device: they are copied from the nearest built-in
profile, which the output names.

With --model, time the model's own ops instead, as the paper's planner
does: the whole model runs forward, backward for its inputs and backward for
its weights through the stage executor, on this CPU or on the --device GPU
(synchronised after every op), at every power-of-two micro-batch up to the
batch, on the model's synthetic data, and each op keeps its mean share.
'graphpipe search --op-times FILE' then prices every op from these times;
links, all-reduce, the optimizer step and memory still come from its
--device. (On a GPU this path has run on the kernels' CPU emulator only.)`,
		Example: "  graphpipe profile --device cuda -o h100.json\n  graphpipe search mmt.json --devices 8 --device h100.json\n" +
			"  graphpipe profile --model mmt-small.json -o mmt-small.optimes.json\n  graphpipe search mmt-small.json --devices 2 --device cpu --op-times mmt-small.optimes.json",
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputs("-o", out); err != nil {
				return err
			}
			if model != "" {
				if asJSON {
					return usagef("--json: not with --model (op times are JSON already)")
				}
				return profileOps(cmd, model, device, gpu, batch, quick, out)
			}
			if cmd.Flags().Changed("batch") {
				return usagef("--batch: only with --model")
			}
			m, err := openMeter(device, gpu)
			if err != nil {
				return err
			}
			defer m.close()
			res, err := measure(m, quick, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			data := plan.EncodeDevice(res.Device)
			if out != "" {
				if err := writeFile("-o", out, data); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", out)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			if out == "" {
				_, err = cmd.OutOrStdout().Write(data)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&device, "device", "cpu", "what to measure: cpu, cuda or cuda-emulator (the emulator's figures say nothing about a GPU; it exercises the code path)")
	cmd.Flags().IntVar(&gpu, "gpu", 0, "with --device cuda: the GPU ordinal")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the profile to `FILE` (default: print it)")
	cmd.Flags().BoolVar(&quick, "quick", false, "fewer and smaller GEMMs (seconds, not a minute); with --model, 20 ms of timing per micro-batch size instead of 200")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the profile and every measurement as one JSON object")
	cmd.Flags().StringVar(&model, "model", "", "instead of the device, time every op of the model in `FILE` (forward, input and weight gradient, at every power-of-two micro-batch up to the batch) and write op times for 'graphpipe search --op-times'")
	cmd.Flags().Int64Var(&batch, "batch", 0, "with --model: the largest micro-batch timed (default: the model's batch_size)")
	return cmd
}

func openMeter(device string, gpu int) (meter, error) {
	switch device {
	case "cpu":
		return cpuMeter{}, nil
	case "cuda", "cuda-emulator":
		// every call below comes from this goroutine: keep it on the
		// thread where the device's context is current
		goruntime.LockOSThread()
		f := deviceFlags{backend: device, gpu: gpu}
		d, err := f.open()
		if err == nil {
			err = d.Bind()
		}
		if err != nil {
			goruntime.UnlockOSThread()
			return nil, err
		}
		return &gpuMeter{d: d}, nil
	}
	return nil, usagef("--device: cannot measure %q (known: cpu, cuda, cuda-emulator)", device)
}

// measure runs the GEMM sweep, the launch and copy measurements, and fits.
func measure(m meter, quick bool, log io.Writer) (*profileResult, error) {
	res := &profileResult{Format: profileFormat, Sizes: m.sizes(quick)}
	launch, err := m.launch()
	if err != nil {
		return nil, err
	}
	tw := tabwriter.NewWriter(log, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\nGEMM n\tFP32 s\tFP32 TFLOP/s\tBF16 TFLOP/s\n", m.name())
	var samples []search.KernelSample
	for _, n := range res.Sizes {
		t, err := m.gemm(n, false)
		if err != nil {
			return nil, err
		}
		w := 2 * math.Pow(float64(n), 3)
		samples = append(samples, search.KernelSample{Work: w, Seconds: t})
		res.FP32 = append(res.FP32, t)
		bf := "-"
		if th, err := m.gemm(n, true); err == nil && th > 0 {
			res.BF16 = append(res.BF16, th)
			bf = fmt.Sprintf("%.4g", w/th/1e12)
		}
		fmt.Fprintf(tw, "%d\t%.4g\t%.4g\t%s\n", n, t, w/t/1e12, bf)
	}
	tw.Flush()
	peak, half, err := search.FitCompute(samples, launch)
	if err != nil {
		return nil, err
	}
	bw, err := m.copyRate(map[bool]int{true: 64 << 20, false: 512 << 20}[quick])
	if err != nil {
		return nil, err
	}
	perCall, err := opOverhead(m.device())
	if err != nil {
		return nil, err
	}
	d := m.base()
	res.LinksOf = d.Name
	if sizes, oneWay, ok, err := m.links(quick); err != nil {
		return nil, err
	} else if ok {
		if d, err = search.WithLinks(d, sizes, oneWay); err != nil {
			return nil, err
		}
		res.LinkSizes, res.LinkS = sizes, oneWay
		res.LinksOf = fmt.Sprintf("measured between workers on this host (%.3g µs + bytes / %.3g GB/s)", d.IntraLat*1e6, d.IntraBW/1e9)
	}
	d.Name = m.name() + " (measured)"
	// the cost model's Launch is what an op call costs beyond its work: the
	// executor's own per-call work (allocation, bookkeeping, the launch
	// itself), measured through it; the GEMM fit keeps the bare launch
	d.PeakFLOPs, d.MaxEff, d.HalfWork, d.Launch, d.MemBW, d.Memory = peak, 1, half, max(perCall, launch), bw, m.memory()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	res.Device, res.KernelLaunch = d, launch
	fmt.Fprintf(log, "fit: %.4g TFLOP/s for large GEMMs, half of it at %.3g FLOPs per call; launch %.3g µs per kernel, %.3g µs per op call through the executor; copy %.4g GB/s; links %s\n",
		peak/1e12, half, launch*1e6, perCall*1e6, bw/1e9, res.LinksOf)
	return res, nil
}

// opOverhead is the fixed cost of one op call through the stage executor on
// dev (nil: the CPU): a chain of 1-wide linear and relu layers trains one
// sample, forward and backward, and the fastest run's time is divided by
// the calls the cost model counts (forward, input gradient, and weight
// gradient where there are weights). The work in the chain is negligible.
func opOverhead(dev *cuda.Device) (float64, error) {
	e, err := models.Lookup("mlp")
	if err != nil {
		return 0, err
	}
	c := e.Small
	c.Layers, c.Hidden, c.Input, c.Classes, c.Batch = 32, 1, 1, 2, 1
	g, err := e.Build(c)
	if err != nil {
		return 0, err
	}
	calls := 0
	var ops []int
	for i := 0; i < g.NumOps(); i++ {
		ops = append(ops, i)
		calls += 2
		if g.Cost(i).BwdWeightFLOPs > 0 {
			calls++
		}
	}
	ex, err := stage.NewExecutor(g, ops, g.Seed())
	if err != nil {
		return 0, err
	}
	if dev != nil {
		if err := ex.UseDevice(dev); err != nil {
			return 0, err
		}
		defer ex.Close()
	}
	data, err := stage.NewDataset(g)
	if err != nil {
		return 0, err
	}
	batch, err := data.Batch(0, 1)
	if err != nil {
		return 0, err
	}
	loss := g.Op(g.Loss()).Name
	seed := map[string]*stage.Value[float32]{loss: {Shape: []int{1}, Data: []float32{1}}}
	const reps = 20 // steps per timed run
	mb := 0
	t, err := timeIt(5, func() error {
		for r := 0; r < reps; r++ {
			mb++
			if _, err := ex.Forward(mb, stage.Position{Step: mb}, batch); err != nil {
				return err
			}
			if _, err := ex.Backward(mb, seed, true); err != nil {
				return err
			}
		}
		return ex.ZeroGrads()
	})
	return t / reps / float64(calls), err
}

// cpuMeter measures this machine with package tensor's kernels.
type cpuMeter struct{}

func (cpuMeter) name() string { return "cpu" }

func (cpuMeter) sizes(quick bool) []int {
	if quick {
		return []int{32, 64, 128, 256}
	}
	return []int{32, 64, 128, 256, 512, 1024}
}

func (cpuMeter) gemm(n int, half bool) (float64, error) {
	if half {
		return 0, nil // the CPU backend has no 16-bit GEMM
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
	if m := hostMemory(); m > 0 {
		return m
	}
	return plan.Profiles["cpu"].Memory
}

func (cpuMeter) base() plan.Device { return plan.Profiles["cpu"] }

// links probes the links CPU workers on this host use: endpoints over an
// embedded NATS server on loopback.
func (cpuMeter) links(quick bool) ([]int, []float64, bool, error) {
	sizes, reps := []int{1 << 10, 64 << 10, 1 << 20, 8 << 20}, 20
	if quick {
		sizes, reps = []int{1 << 10, 1 << 20}, 5
	}
	t, err := runtime.ProbeLinks(sizes, reps)
	return sizes, t, err == nil, err
}
func (cpuMeter) device() *cuda.Device { return nil }
func (cpuMeter) close()               {}

// gpuMeter measures a GPU (or the emulator) through package cuda.
type gpuMeter struct{ d *cuda.Device }

func (g *gpuMeter) name() string {
	if g.d.Emulated {
		return g.d.Name
	}
	return fmt.Sprintf("%s %s", g.d.Name, g.d.Arch)
}

func (g *gpuMeter) sizes(quick bool) []int {
	switch {
	case g.d.Emulated:
		return []int{8, 16, 32}
	case quick:
		return []int{256, 1024, 4096}
	}
	return []int{256, 512, 1024, 2048, 4096, 8192}
}

func (g *gpuMeter) gemm(n int, half bool) (float64, error) {
	d := g.d
	a, err := d.Zeros(n * n)
	if err != nil {
		return 0, err
	}
	defer d.Free(a)
	c, err := d.Zeros(n * n)
	if err != nil {
		return 0, err
	}
	defer d.Free(c)
	args := cuda.GemmArgs{M: n, N: n, K: n, Alpha: 1, A: a, B: a, C: c}
	reps := 5
	run := func() error { return d.Sgemm(args) }
	if half {
		h, err := d.HalfBuffer(n * n)
		if err != nil {
			return 0, err
		}
		defer d.Free(h)
		if err := d.Convert(h, a, cuda.BF16); err != nil {
			return 0, err
		}
		args.A, args.B = h, h
		run = func() error { return d.Gemm16(args, cuda.BF16) }
	}
	const calls = 10
	t, err := timeIt(reps, func() error {
		for i := 0; i < calls; i++ {
			if err := run(); err != nil {
				return err
			}
		}
		return d.Sync()
	})
	return t / calls, err
}

func (g *gpuMeter) launch() (float64, error) {
	b, err := g.d.Zeros(1)
	if err != nil {
		return 0, err
	}
	defer g.d.Free(b)
	const calls = 1000
	t, err := timeIt(3, func() error {
		for i := 0; i < calls; i++ {
			if err := g.d.Launch("gp_fill", 1, b, float32(0), 1); err != nil {
				return err
			}
		}
		return g.d.Sync()
	})
	return t / calls, err
}

func (g *gpuMeter) copyRate(bytes int) (float64, error) {
	if g.d.Emulated {
		bytes = min(bytes, 16<<20)
	}
	n := bytes / 4
	src, err := g.d.Zeros(n)
	if err != nil {
		return 0, err
	}
	defer g.d.Free(src)
	dst, err := g.d.Zeros(n)
	if err != nil {
		return 0, err
	}
	defer g.d.Free(dst)
	t, err := timeIt(3, func() error {
		if err := g.d.Copy(dst, src, n); err != nil {
			return err
		}
		return g.d.Sync()
	})
	return 2 * float64(4*n) / t, err
}

func (g *gpuMeter) memory() int64 {
	if g.d.Emulated {
		return plan.Profiles["cpu"].Memory
	}
	return int64(g.d.Memory)
}

// base picks the built-in profile whose links stand in for this GPU's.
func (g *gpuMeter) base() plan.Device {
	name := strings.ToLower(g.d.Name)
	for _, p := range []string{"v100", "a100", "h100"} {
		if strings.Contains(name, p) {
			return plan.Profiles[p]
		}
	}
	if g.d.Emulated {
		return plan.Profiles["cpu"]
	}
	return plan.Profiles["h100"]
}

func (g *gpuMeter) device() *cuda.Device { return g.d }

// links: one GPU cannot measure the links between GPUs.
func (g *gpuMeter) links(bool) ([]int, []float64, bool, error) { return nil, nil, false, nil }

func (g *gpuMeter) close() {
	g.d.Close()
	goruntime.UnlockOSThread()
}

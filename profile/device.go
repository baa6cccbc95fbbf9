package profile

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// A Meter measures one device for a profile: CPUMeter or GPUMeter.
type Meter interface {
	name() string
	// gemm is the seconds of an n×n×n GEMM in precision prec ("fp32",
	// "tf32": FP32 operands on TF32 tensor cores, "bf16": BF16 operands
	// with FP32 accumulation); 0 where the meter has no such GEMM
	gemm(n int, prec string) (float64, error)
	launch() (float64, error)            // seconds of fixed cost per kernel call
	device() *cuda.Device                // where the executor runs ops: nil for the CPU
	copyRate(bytes int) (float64, error) // bytes moved (read + written) per second
	memory() int64
	base() plan.Device // where the links come from when links cannot measure them
	// runCosts measures what a run of workers of this kind on this host
	// pays beside its ops (MeasureRunCosts, and on a GPU its same-host
	// device copies); nil measurements where it measures none
	runCosts(quick bool) (plan.RunCosts, *RunCostsResult, error)
	sizes(quick bool) []int
}

// Result is a measured device profile and every measurement it was fitted
// to, as graphpipe profile --json prints it.
type Result struct {
	Format  string      `json:"format"` // the caller's format tag: Measure leaves it empty
	Device  plan.Device `json:"device"`
	Sizes   []int       `json:"gemm_sizes"`
	FP32    []float64   `json:"gemm_fp32_s"`
	TF32    []float64   `json:"gemm_tf32_s,omitempty"`
	BF16    []float64   `json:"gemm_bf16_s,omitempty"`
	LinksOf string      `json:"links_from"`
	// KernelLaunch is the bare cost of a kernel call; Device.Launch is an
	// op call's through the executor (the larger).
	KernelLaunch float64 `json:"kernel_launch_s"`
	// LinkSizes and LinkS are the probed message sizes and one-way times,
	// where the links were measured.
	LinkSizes []int     `json:"link_sizes,omitempty"`
	LinkS     []float64 `json:"link_one_way_s,omitempty"`
	// RunCosts is every measurement of what a run pays beside its ops
	// (Device.RunCosts is their fit).
	RunCosts *RunCostsResult `json:"run_costs,omitempty"`
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

// Measure runs the GEMM sweep, the launch and copy measurements and the link
// probe on m, fits them, and returns the profile with its measurements; the
// sweep's table and the fit go to log. quick measures fewer and smaller
// GEMMs and a smaller copy.
func Measure(m Meter, quick bool, log io.Writer) (*Result, error) {
	res := &Result{Sizes: m.sizes(quick)}
	launch, err := m.launch()
	if err != nil {
		return nil, err
	}
	peak, half, rates, err := sweep(m, res, launch, log)
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
	d, err := measureLinks(m, res, quick)
	if err != nil {
		return nil, err
	}
	d.Name = m.name() + " (measured)"
	// the cost model's Launch is what an op call costs beyond its work: the
	// executor's own per-call work (allocation, bookkeeping, the launch
	// itself), measured through it; the GEMM fit keeps the bare launch
	d.PeakFLOPs, d.MaxEff, d.HalfWork, d.Launch, d.MemBW, d.Memory = peak, 1, half, max(perCall, launch), bw, m.memory()
	d.Rates = rates
	if err := d.Validate(); err != nil {
		return nil, err
	}
	res.Device, res.KernelLaunch = d, launch
	fmt.Fprintf(log, "fit: %.4g TFLOP/s for large GEMMs, half of it at %.3g FLOPs per call; launch %.3g µs per kernel, %.3g µs per op call through the executor; copy %.4g GB/s; links %s\n",
		peak/1e12, half, launch*1e6, perCall*1e6, bw/1e9, res.LinksOf)
	return res, nil
}

// sweep times the GEMMs of res.Sizes in FP32, TF32 and BF16 (those m
// has), records them in res, writes their table to log, and fits the
// compute term (FitCompute) with the bare kernel launch: FP32's is the
// profile's peak and half-work point, each other precision's peak its
// rate (plan.Rates), where m measured it at every size.
func sweep(m Meter, res *Result, launch float64, log io.Writer) (peak, half float64, rates plan.Rates, err error) {
	tw := tabwriter.NewWriter(log, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\nGEMM n\tFP32 s\tFP32 TFLOP/s\tTF32 TFLOP/s\tBF16 TFLOP/s\n", m.name())
	samples := map[string][]KernelSample{}
	times := map[string]*[]float64{"fp32": &res.FP32, "tf32": &res.TF32, "bf16": &res.BF16}
	for _, n := range res.Sizes {
		w := 2 * math.Pow(float64(n), 3)
		cols := []string{fmt.Sprint(n)}
		for _, p := range plan.Precisions {
			t, err := m.gemm(n, p)
			switch {
			case err != nil && p == "fp32":
				return 0, 0, rates, err
			case err != nil || t <= 0:
				cols = append(cols, "-")
				continue
			case p == "fp32":
				cols = append(cols, fmt.Sprintf("%.4g", t))
			}
			samples[p] = append(samples[p], KernelSample{Work: w, Seconds: t})
			*times[p] = append(*times[p], t)
			cols = append(cols, fmt.Sprintf("%.4g", w/t/1e12))
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	tw.Flush()
	if peak, half, err = FitCompute(samples["fp32"], launch); err != nil {
		return 0, 0, rates, err
	}
	for _, p := range plan.Precisions[1:] {
		if len(samples[p]) != len(res.Sizes) {
			*times[p] = nil // measured at some sizes only: no rate
			continue
		}
		r, _, err := FitCompute(samples[p], launch)
		if err != nil {
			return 0, 0, rates, fmt.Errorf("%s GEMMs: %w", p, err)
		}
		if p == "tf32" {
			rates.TF32 = r
		} else {
			rates.BF16 = r
		}
	}
	return peak, half, rates, nil
}

// measureLinks is m's base profile with what a run pays beside its ops
// (m.runCosts, recorded in res) and, on a CPU, whose workers' links are
// the NATS path it probed, its links fitted to that probe; res.LinksOf
// says where the links came from.
func measureLinks(m Meter, res *Result, quick bool) (plan.Device, error) {
	d := m.base()
	res.LinksOf = d.Name
	rc, rr, err := m.runCosts(quick)
	if err != nil || rr == nil {
		return d, err
	}
	d.RunCosts, res.RunCosts = rc, rr
	if m.device() != nil { // a GPU's links to other GPUs are not the NATS path
		return d, nil
	}
	if d, err = WithLinks(d, rr.LinkSizes, rr.OneWay); err != nil {
		return d, err
	}
	res.LinkSizes, res.LinkS = rr.LinkSizes, rr.OneWay
	res.LinksOf = fmt.Sprintf("measured between workers on this host (%.3g µs + bytes / %.3g GB/s)", d.IntraLat*1e6, d.IntraBW/1e9)
	return d, nil
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

package profile

import (
	"fmt"
	goruntime "runtime"
	"strings"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// GPUMeter measures d, a GPU or the kernels' CPU emulator, through package
// cuda. The caller opens d, binds it to the thread every measurement runs
// on, and closes it after.
func GPUMeter(d *cuda.Device) Meter { return &gpuMeter{d: d} }

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

func (g *gpuMeter) gemm(n int, prec string) (float64, error) {
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
	if prec == "tf32" {
		run = func() error { return d.GemmTF32(args) }
	}
	if prec == "bf16" {
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

// runCosts measures what GPU workers on this host pay beside their ops:
// the NATS path their host side uses, message costs, the ring all-reduce
// and an iteration's fixed cost (MeasureRunCosts), and the same-host
// device path, a handle over NATS and a device-to-device copy (ipcCopy).
// One GPU cannot measure its links to other GPUs: they stay the base
// profile's.
func (g *gpuMeter) runCosts(quick bool) (plan.RunCosts, *RunCostsResult, error) {
	rc, rr, err := MeasureRunCosts(RunCostsPlan{Cores: goruntime.NumCPU(), Quick: quick})
	if err != nil {
		return rc, nil, err
	}
	lat, bw, err := g.ipcCopy()
	if err != nil {
		return rc, nil, err
	}
	rc.IPCLat, rc.IPCBW = rc.NATSLat+lat, bw
	return rc, rr, nil
}

// ipcCopy fits a device-to-device copy's time, latency + bytes/bandwidth
// (bytes copied once), to copies of a few sizes.
func (g *gpuMeter) ipcCopy() (lat, bw float64, err error) {
	var samples []KernelSample
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		n := size / 4
		src, err := g.d.Zeros(n)
		if err != nil {
			return 0, 0, err
		}
		dst, err := g.d.Zeros(n)
		if err != nil {
			g.d.Free(src)
			return 0, 0, err
		}
		t, err := timeIt(5, func() error {
			if err := g.d.Copy(dst, src, n); err != nil {
				return err
			}
			return g.d.Sync()
		})
		g.d.Free(src)
		g.d.Free(dst)
		if err != nil {
			return 0, 0, err
		}
		samples = append(samples, KernelSample{Work: float64(size), Seconds: t})
	}
	return FitLink(samples)
}

package stage

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sync"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

var (
	emuOnce sync.Once
	emuLib  string
	emuErr  error
)

// emulatedDevice is package cuda's CPU emulator of the GPU kernels (skips
// only where there is no C++ compiler to build it).
func emulatedDevice(t *testing.T) *cuda.Device {
	t.Helper()
	emuOnce.Do(func() {
		dir, err := os.MkdirTemp("", "graphpipe-stage-emu-")
		if err != nil {
			emuErr = err
			return
		}
		emuLib, emuErr = cuda.BuildEmulator(dir)
	})
	if errors.Is(emuErr, cuda.ErrNoCompiler) {
		t.Skipf("the CUDA kernels' CPU emulator needs a C++ compiler: %v", emuErr)
	}
	if emuErr != nil {
		t.Fatal(emuErr)
	}
	d, err := cuda.OpenEmulator(emuLib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// gpuDevice is GPU 0, or a skip naming what is missing.
func gpuDevice(t *testing.T) *cuda.Device {
	t.Helper()
	d, err := cuda.Open(0)
	if err != nil {
		t.Skipf("no GPU to test on: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// gpuCases is every op case (opCases, model@2's included: their init
// functions run after this file's variables are set) and the larger shapes
// of gpuExtraCases and gpuV2Cases.
func gpuCases() []opCase {
	return append(append(append([]opCase(nil), opCases...), gpuExtraCases...), gpuV2Cases...)
}

// gpuExtraCases add larger shapes to opCases, so that the GEMM strides of
// attention and linear are exercised beyond one-element tiles.
var gpuExtraCases = append([]opCase(nil),
	opCase{"attention-wide", `{"name":"x","shape":[8,16],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":4}`},
	opCase{"attention-wide-causal", `{"name":"x","shape":[6,12],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":3,"causal":true}`},
	opCase{"linear-wide", `{"name":"x","shape":[5,33],"dtype":"float32"}`, `"op":"linear","inputs":["x"],"attrs":{"out":17}`},
	opCase{"linear-wide-in_out", `{"name":"x","shape":[5,33],"dtype":"float32"}`, `"op":"linear","inputs":["x"],"attrs":{"out":17,"weight_layout":"in_out"}`},
	// fewer heads than samples (3), and one head: the strided batches over
	// every (sample, head) at other strides
	opCase{"attention-few-heads", `{"name":"x","shape":[5,8],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":2}`},
	opCase{"attention-one-head-causal", `{"name":"x","shape":[6,4],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":1,"causal":true}`},
	// sequences longer than the softmax's 32 lanes, not a multiple of them
	opCase{"attention-long", `{"name":"x","shape":[45,8],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":2}`},
	opCase{"attention-long-causal", `{"name":"x","shape":[37,6],"dtype":"float32"}`, `"op":"attention","inputs":["x"],"attrs":{"heads":3,"causal":true}`},
	// more rows than one pass of the column sums takes (colParts: chunks of 3)
	opCase{"linear-tall", `{"name":"x","shape":[1500,5],"dtype":"float32"}`, `"op":"linear","inputs":["x"],"attrs":{"out":120}`},
	opCase{"layer_norm-tall", `{"name":"x","shape":[1500,120],"dtype":"float32"}`, `"op":"layer_norm","inputs":["x"]`},
)

// TestColParts: the chunks of the two-pass column sums cover every row
// once, and there are never more of them than rows.
func TestColParts(t *testing.T) {
	for rows := 0; rows <= 700; rows++ {
		for _, cols := range []int{1, 7, 120, 1024, 70000} {
			chunk, parts := colParts(rows, cols)
			if rows == 0 {
				if parts != 0 {
					t.Fatalf("rows 0, cols %d: %d parts", cols, parts)
				}
				continue
			}
			if chunk < 1 || parts < 1 || parts > rows || chunk*parts < rows || (parts-1)*chunk >= rows {
				t.Fatalf("rows %d, cols %d: chunk %d, parts %d", rows, cols, chunk, parts)
			}
		}
	}
}

// checkOpsOn runs every op kind's forward and backward on d and on the CPU
// backend (float32) and compares them within 1e-3 relative. Gradients start
// non-zero, so that accumulation (+=) is checked too, and the backward runs
// three ways: inputs and weights together, inputs alone, weights alone.
func checkOpsOn(t *testing.T, d *cuda.Device) {
	var worst closeness
	defer func() { t.Logf("largest relative difference, device against CPU: %.3g (%s)", worst.rel, worst.what) }()
	for _, c := range gpuCases() {
		t.Run(c.name, func(t *testing.T) { checkOpOn(t, d, c, &worst) })
	}
}

// opCtx is the pass an op test runs in: 3 rows (what parameter and constant
// make), and a seed, step and first sample for dropout's mask.
func opCtx() *runCtx { return &runCtx{seed: 5, pos: Position{Step: 2, Sample: 7, Rows: 3}} }

// checkOpOn compares one case's op on d with its CPU kernel: the output,
// the buffers the forward updates (batch_norm's running statistics: each
// side moves its own copy), and every gradient.
func checkOpOn(t *testing.T, d *cuda.Device, c opCase, worst *closeness) {
	checkOpWith(t, d, c, worst, scopeOpts{}, 1e-3)
}

// checkOpWith is checkOpOn with the GPU kernel run as opts says, within
// tol relative (to 1 + |want|). With opts.tf32 the inputs, parameters and
// the output's gradient are rounded to TF32 first, on both sides, so that
// the CPU's FP32 computes what TF32 products of them compute, up to the
// order of the sums (and what an algorithm's own transforms round).
func checkOpWith(t *testing.T, d *cuda.Device, c opCase, worst *closeness, opts scopeOpts, tol float64) {
	g, i, cpu, gpu, devErr := opKernels(t, d, c)
	gk, generic := gpu.(*gpuKernel)
	if !generic {
		t.Fatalf("%s: the GPU kernel is the CPU's %T", c.name, gpu)
	}
	gk.opts = opts
	close3 := func(t *testing.T, what string, got, want []float32) float64 {
		t.Helper()
		return closeTol(t, what, got, want, tol)
	}
	x64, p64 := randomValues(g, i, 3, rand.New(rand.NewSource(11)))
	positive(c, x64)
	x, p, pg := narrow(x64), narrow(p64), narrow(p64)
	round := func(vs []*Value[float32]) {
		for _, v := range vs {
			if opts.tf32 && v != nil && v.Data != nil {
				v.Data = tf32Round(v.Data)
			}
		}
	}
	round(x)
	round(p)
	round(pg)
	yc, stc, err := cpu.forward(x, p)
	if err != nil {
		t.Fatal(err)
	}
	yg, stg, err := gpu.forward(x, pg)
	if err != nil {
		t.Fatal(err)
	}
	worst.note(c.name+": y", close3(t, "y", yg.Data, yc.Data))
	for j := len(g.Params(i)); j < len(p); j++ { // the buffers
		worst.note(fmt.Sprintf("%s: buffer %d", c.name, j), close3(t, fmt.Sprintf("buffer %d", j), pg[j].Data, p[j].Data))
	}
	gy := outputGrad(yc.Shape)
	round([]*Value[float32]{gy})
	for _, mode := range []struct {
		name    string
		inputs  bool
		weights bool
	}{{"both", true, true}, {"inputs", true, false}, {"weights", false, true}} {
		gxc, gpc := seeded(x, mode.inputs), seeded(p[:len(g.Params(i))], mode.weights)
		gxg, gpg := seeded(x, mode.inputs), seeded(p[:len(g.Params(i))], mode.weights)
		if !mode.weights {
			gpc, gpg = nil, nil
		} else { // no gradients for the buffers
			gpc, gpg = append(gpc, make([]*Value[float32], len(p)-len(gpc))...), append(gpg, make([]*Value[float32], len(p)-len(gpg))...)
		}
		cpu.backward(gy, x, p, yc, stc, gxc, gpc)
		gpu.backward(gy, x, pg, yg, stg, gxg, gpg)
		if *devErr != nil {
			t.Fatal(*devErr)
		}
		for j := range gxc {
			if gxc[j] != nil {
				worst.note(fmt.Sprintf("%s: %s: gx%d", c.name, mode.name, j), close3(t, fmt.Sprintf("%s: gx%d", mode.name, j), gxg[j].Data, gxc[j].Data))
			}
		}
		for j := range gpc {
			if gpc[j] != nil {
				worst.note(fmt.Sprintf("%s: %s: gp%d", c.name, mode.name, j), close3(t, fmt.Sprintf("%s: gp%d", mode.name, j), gpg[j].Data, gpc[j].Data))
			}
		}
	}
}

// opKernels is op case c's graph and op, its CPU kernel and its kernel on
// d, and where that one reports a device failure.
func opKernels(t *testing.T, d *cuda.Device, c opCase) (*dag.Graph, int, kernel[float32], kernel[float32], *error) {
	t.Helper()
	g, i := oneOp(t, c)
	cpu, err := newKernel[float32](g, i, opCtx())
	if err != nil {
		t.Fatal(err)
	}
	devErr := new(error)
	gpu, err := newGPUKernel(g, i, d, nil, devErr, opCtx())
	if err != nil {
		t.Fatal(err)
	}
	return g, i, cpu, gpu, devErr
}

// outputGrad is the output's gradient the op checks give the backward:
// (j mod 7 − 3)/3 at element j.
func outputGrad(shape []int) *Value[float32] {
	gy := NewValue[float32](shape...)
	for j := range gy.Data {
		gy.Data[j] = float32(j%7-3) / 3
	}
	return gy
}

// seeded gives a gradient buffer per float value, starting at 0.25 (nil
// for int values, or for all when not wanted).
func seeded(vs []*Value[float32], want bool) []*Value[float32] {
	out := make([]*Value[float32], len(vs))
	for i, v := range vs {
		if !want || v == nil || v.Data == nil {
			continue
		}
		out[i] = NewValue[float32](v.Shape...)
		for j := range out[i].Data {
			out[i].Data[j] = 0.25
		}
	}
	return out
}

// closeness keeps the largest relative difference seen and where.
type closeness struct {
	rel  float64
	what string
}

func (c *closeness) note(what string, rel float64) {
	if rel > c.rel {
		c.rel, c.what = rel, what
	}
}

// close3 fails where got and want differ by more than 1e-3 relative (to
// 1 + |want|), or where one of them is NaN and the other not, and returns
// the largest such difference.
func close3(t *testing.T, what string, got, want []float32) float64 {
	t.Helper()
	return closeTol(t, what, got, want, 1e-3)
}

// closeTol is close3 within tol.
func closeTol(t *testing.T, what string, got, want []float32, tol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var worst float64
	for j := range want {
		if math.IsNaN(float64(got[j])) && math.IsNaN(float64(want[j])) {
			continue
		}
		rel := math.Abs(float64(got[j])-float64(want[j])) / (1 + math.Abs(float64(want[j])))
		if !(rel <= tol) { // NaN on one side fails
			t.Fatalf("%s[%d]: device %v, CPU %v", what, j, got[j], want[j])
		}
		worst = max(worst, rel)
	}
	return worst
}

func TestOpsOnEmulator(t *testing.T) { checkOpsOn(t, emulatedDevice(t)) }

func TestOpsOnGPU(t *testing.T) { checkOpsOn(t, gpuDevice(t)) }

// TestGPUIndexOutOfRange: the device path refuses a bad index with the CPU
// path's error, naming the op.
func TestGPUIndexOutOfRange(t *testing.T) {
	d := emulatedDevice(t)
	for _, c := range []opCase{opCases[15], opCases[16], opCases[21]} { // embedding, embedding_bag, cross-entropy
		t.Run(c.name, func(t *testing.T) {
			g, i := oneOp(t, c)
			var devErr error
			gk, _ := newGPUKernel(g, i, d, nil, &devErr, &runCtx{})
			ck, _ := newKernel[float32](g, i, &runCtx{})
			x64, p64 := randomValues(g, i, 2, rand.New(rand.NewSource(3)))
			x, p := narrow(x64), narrow(p64)
			for _, v := range x {
				if v.Ints != nil {
					v.Ints[len(v.Ints)-1] = 99
				}
			}
			_, _, gerr := gk.forward(x, p)
			_, _, cerr := ck.forward(x, p)
			if gerr == nil || cerr == nil || gerr.Error() != cerr.Error() {
				t.Fatalf("index 99: device error %v, CPU error %v", gerr, cerr)
			}
		})
	}
}

// TestParamCacheKeepsParametersFresh: training on the device with 4
// micro-batches a step uploads the parameters once, at the first step, and
// never again (not per step, micro-batch or op call: the optimizer updates
// them there), and still follows the optimizer's updates step by step (=
// the CPU trainer within 1e-4, once HostState brings them down).
func TestParamCacheKeepsParametersFresh(t *testing.T) {
	d := emulatedDevice(t)
	g := small(t, "mmt")
	o := TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9, MicroBatch: int(g.BatchSize()) / 4}
	cpu, err := NewTrainer(g, o)
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := NewTrainer(g, o)
	paramBytes := int64(0)
	for _, p := range cpu.Ex.Params {
		paramBytes += int64(4 * len(p.Data))
	}
	before := d.Counts()
	if err := dev.Ex.UseDevice(d); err != nil {
		t.Fatal(err)
	}
	const steps = 3
	for s := 0; s < steps; s++ {
		if s > 0 {
			before = d.Counts()
		}
		lc, _, err := cpu.Step(s)
		if err != nil {
			t.Fatal(err)
		}
		ld, _, err := dev.Step(s)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(lc-ld) > 1e-4*math.Abs(lc) {
			t.Fatalf("step %d: loss %v on the device, %v on the CPU", s, ld, lc)
		}
		up := d.Counts().Sub(before).H2DBytes
		if s == 0 && up < paramBytes || s > 0 && up >= paramBytes {
			t.Errorf("step %d uploaded %d bytes; the parameters are %d bytes, to be uploaded at the first step alone", s, up, paramBytes)
		}
	}
	state, err := dev.Ex.HostState()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range cpu.Ex.Params {
		close3(t, name, state[name].Data, want.Data)
	}
}

// TestDeviceAccumulation: with values kept on the device, 4 micro-batches
// with the weight gradients taken at once or deferred (W after every B, in
// another order) give the CPU's full-batch gradients; the outputs that stay
// inside the stage never come back to the host (checked in gradsOn).
func TestDeviceAccumulation(t *testing.T) { checkDeviceAccumulation(t, emulatedDevice(t)) }

func TestDeviceAccumulationOnGPU(t *testing.T) { checkDeviceAccumulation(t, gpuDevice(t)) }

func checkDeviceAccumulation(t *testing.T, d *cuda.Device) {
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "case-study"} {
		t.Run(name, func(t *testing.T) {
			g := small(t, name)
			full := gradsOf(t, g, 1, false)
			for _, v := range []struct {
				mbs   int
				split bool
			}{{4, false}, {4, true}, {1, true}} {
				got := gradsOn(t, g, v.mbs, v.split, d)
				for k, want := range full {
					close3(t, fmt.Sprintf("%+v: %s", v, k), got[k], want)
				}
			}
			if used := d.MemStats(); used.InUse > 512 { // the bad-index flag
				t.Errorf("%d bytes of device memory in use after the executors closed", used.InUse)
			}
		})
	}
}

// TestDeviceForwardFailure: a micro-batch that fails on the device (an
// index out of range) reports the op and leaves no device memory behind.
func TestDeviceForwardFailure(t *testing.T) {
	d := emulatedDevice(t)
	g := small(t, "dlrm")
	tr, err := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Ex.UseDevice(d); err != nil {
		t.Fatal(err)
	}
	batch, err := tr.Data.Batch(0, int(g.BatchSize()))
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, v := range batch {
		if v.Ints != nil {
			v.Ints[0] = 1 << 30
			bad++
		}
	}
	if bad == 0 {
		t.Fatal("dlrm has no index input")
	}
	if _, err := tr.Ex.Forward(0, Position{}, batch); err == nil {
		t.Fatal("an index of 2^30 was accepted")
	}
	if tr.Ex.InFlight() != 0 {
		t.Errorf("%d micro-batches in flight after a failed forward", tr.Ex.InFlight())
	}
	if err := tr.Ex.Close(); err != nil {
		t.Fatal(err)
	}
	if used := d.MemStats(); used.InUse > 512 {
		t.Errorf("%d bytes of device memory in use after the failure and Close", used.InUse)
	}
}

package stage

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

var (
	fakeDNNOnce sync.Once
	fakeDNNLib  string
	fakeDNNErr  error
)

// fakeDNNDevice is the kernels' emulator with package cuda's fake cuDNN
// (cuda.BuildFakeDNN): conv2d's cuDNN path, its descriptors, algorithm
// choice, workspace and accumulation, run on the CPU. It skips only where
// there is no C++ compiler.
func fakeDNNDevice(t *testing.T) *cuda.Device {
	t.Helper()
	d := emulatedDevice(t)
	fakeDNNOnce.Do(func() {
		dir, err := os.MkdirTemp("", "graphpipe-stage-fakednn-")
		if err != nil {
			fakeDNNErr = err
			return
		}
		fakeDNNLib, fakeDNNErr = cuda.BuildFakeDNN(dir)
	})
	if errors.Is(fakeDNNErr, cuda.ErrNoCompiler) {
		t.Skipf("the fake cuDNN needs a C++ compiler: %v", fakeDNNErr)
	}
	if fakeDNNErr != nil {
		t.Fatal(fakeDNNErr)
	}
	if err := d.UseDNN(fakeDNNLib); err != nil {
		t.Fatal(err)
	}
	return d
}

// dnnDevice is GPU 0 with its cuDNN, or a skip saying which is missing.
func dnnDevice(t *testing.T) *cuda.Device {
	t.Helper()
	d := gpuDevice(t)
	d.ConvPath() // makes the cuDNN handle, or says why not
	if err := d.ConvPathReason(); err != nil {
		t.Skipf("no cuDNN on this GPU machine (conv2d runs as im2col + GEMM): %v", err)
	}
	return d
}

// dnnConvCases are conv2d's op cases (strides, padding, dilation, groups,
// depthwise, 1×1; two with asymmetric padding, which stay on the im2col
// path) and ResNet's kinds of convolution made small: a 3×3 of 16
// channels, a 1×1 of stride 2 (a downsample), a 7×7 stem of stride 2, a
// depthwise 3×3 of stride 2.
func dnnConvCases() []opCase {
	out := append(append([]opCase(nil), convCases[:6]...), gpuV2Cases[:2]...)
	return append(out,
		opCase{"conv2d-3x3-wide", `{"name":"x","shape":[16,10,10],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":24,"kernel":[3,3],"padding":[1,1,1,1]}`},
		opCase{"conv2d-1x1-stride2", `{"name":"x","shape":[16,9,9],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":32,"kernel":[1,1],"stride":[2,2],"bias":false}`},
		opCase{"conv2d-7x7-stem", `{"name":"x","shape":[3,20,20],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":8,"kernel":[7,7],"stride":[2,2],"padding":[3,3,3,3],"bias":false}`},
		opCase{"conv2d-depthwise-stride2", `{"name":"x","shape":[8,10,10],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":8,"kernel":[3,3],"stride":[2,2],"padding":[1,1,1,1],"groups":8}`},
	)
}

// tf32OpTol is how far a TF32 convolution of TF32-rounded operands may be
// from the CPU's FP32 on d (relative to 1 + |want|): on the emulator, the
// fake cuDNN's rounding is the test's, so only the order of the sums
// differs; a GPU's cuDNN may round otherwise (truncate), and its Winograd
// and FFT algorithms round their transformed operands again.
func tf32OpTol(d *cuda.Device) float64 {
	if d.Emulated {
		return 1e-5
	}
	return 5e-3
}

// checkConvDNN runs dnnConvCases' forward and three backwards (inputs and
// weights, inputs, weights: into gradients that start non-zero) through
// d's cuDNN in fp32 (within 1e-3 of the CPU kernels) and tf32 (its
// operands rounded to TF32 on both sides, within tf32OpTol), and checks
// that cuDNN ran exactly where the padding is symmetric.
func checkConvDNN(t *testing.T, d *cuda.Device) {
	for _, prec := range []string{"fp32", "tf32"} {
		var worst closeness
		tol := 1e-3
		if prec == "tf32" {
			tol = tf32OpTol(d)
		}
		for _, c := range dnnConvCases() {
			t.Run(prec+"/"+c.name, func(t *testing.T) {
				g, i := oneOp(t, c)
				k := conv2DKernel[float32](newOpArgs(g, i, &runCtx{}))
				symmetric := k.pt == k.padBottom && k.pl == k.padRight
				before := d.Counts()
				checkOpWith(t, d, c, &worst, scopeOpts{tf32: prec == "tf32"}, tol)
				n := d.Counts().Sub(before).DNN
				if symmetric && n == 0 || !symmetric && n != 0 {
					t.Errorf("padding %v: %d cuDNN calls (symmetric padding runs on cuDNN, asymmetric on im2col)", []int{k.pt, k.pl, k.padBottom, k.padRight}, n)
				}
			})
		}
		t.Logf("%s: largest relative difference, cuDNN (%s) against the CPU: %.3g (%s)", prec, d.ConvPath(), worst.rel, worst.what)
	}
}

// TestConvDNNEmulated runs checkConvDNN on the emulator with the fake
// cuDNN: the stage's cuDNN path, its shapes, buffers and accumulation.
func TestConvDNNEmulated(t *testing.T) { checkConvDNN(t, fakeDNNDevice(t)) }

// TestConvDNNOnGPU runs checkConvDNN on GPU 0 with the system's cuDNN
// (skipped, saying why, without a GPU or without cuDNN).
func TestConvDNNOnGPU(t *testing.T) { checkConvDNN(t, dnnDevice(t)) }

// bnCases are batch_norm's op cases: per channel alone, over a length, over
// planes, with many channels, with planes wider than a warp.
func bnCases() []opCase {
	var out []opCase
	for _, c := range append(append([]opCase(nil), convCases...), gpuV2Cases...) {
		if strings.HasPrefix(c.name, "batch_norm") {
			out = append(out, c)
		}
	}
	return out
}

// checkBatchNormDNN runs bnCases' forward (its output and the running
// statistics it moves) and three backwards (into gradients that start
// non-zero; with the input's gradient alone, cuDNN's parameter gradients
// go to scratch, and the other way round) on d through cuDNN and through
// graphpipe's own kernels, each within 1e-3 of the CPU kernels, and checks
// that cuDNN ran on the one path and not on the other.
func checkBatchNormDNN(t *testing.T, d *cuda.Device) {
	var worst closeness
	for _, c := range bnCases() {
		for _, own := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/own-kernels=%v", c.name, own), func(t *testing.T) {
				before := d.Counts()
				checkOpWith(t, d, c, &worst, scopeOpts{im2col: own}, 1e-3)
				if n := d.Counts().Sub(before).DNN; (n > 0) == own {
					t.Errorf("%d cuDNN calls (own kernels %v)", n, own)
				}
			})
		}
	}
	t.Logf("largest relative difference against the CPU (%s): %.3g (%s)", d.ConvPath(), worst.rel, worst.what)
}

// TestBatchNormDNNEmulated runs checkBatchNormDNN on the emulator with the
// fake cuDNN: the stage's use of cuDNN's batch norm (descriptors, stash,
// running statistics, accumulation, scratch for gradients not wanted).
func TestBatchNormDNNEmulated(t *testing.T) { checkBatchNormDNN(t, fakeDNNDevice(t)) }

// TestBatchNormDNNOnGPU runs checkBatchNormDNN on GPU 0 with the system's
// cuDNN (skipped, saying why, without a GPU or without cuDNN).
func TestBatchNormDNNOnGPU(t *testing.T) { checkBatchNormDNN(t, dnnDevice(t)) }

// TestBatchNormDNNDroppedEmulated: a batch norm whose forward ran through
// cuDNN, on a device that drops cuDNN before the backward (a later plan's
// call fails: the fake refuses 7 groups), takes its gradients from
// graphpipe's kernels, from cuDNN's saved statistics, within 1e-3 of the
// CPU's.
func TestBatchNormDNNDroppedEmulated(t *testing.T) {
	d := fakeDNNDevice(t)
	g, i, cpu, gpu, devErr := opKernels(t, d, bnCases()[len(bnCases())-1])
	x64, p64 := randomValues(g, i, 3, rand.New(rand.NewSource(11)))
	x, p, pg := narrow(x64), narrow(p64), narrow(p64)
	yc, stc, err := cpu.forward(x, p)
	if err != nil {
		t.Fatal(err)
	}
	yg, stg, err := gpu.forward(x, pg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := stg.(*gpuBNDNNStash); !ok {
		t.Fatalf("the forward's stash is %T, not cuDNN's", stg)
	}
	seven := cuda.ConvShape{N: 1, C: 7, H: 3, W: 3, K: 7, KH: 1, KW: 1, StrideH: 1, StrideW: 1, DilationH: 1, DilationW: 1, Groups: 7}
	if err := d.ConvReady(seven); !errors.Is(err, cuda.ErrNoDNN) || d.ConvPathReason() == nil {
		t.Fatalf("a convolution of 7 groups on the fake: %v; cuDNN dropped: %v", err, d.ConvPathReason())
	}
	gy := outputGrad(yc.Shape)
	np := len(g.Params(i))
	gxc, gpc := seeded(x, true), append(seeded(p[:np], true), make([]*Value[float32], len(p)-np)...)
	gxg, gpg := seeded(x, true), append(seeded(p[:np], true), make([]*Value[float32], len(p)-np)...)
	cpu.backward(gy, x, p, yc, stc, gxc, gpc)
	gpu.backward(gy, x, pg, yg, stg, gxg, gpg)
	if *devErr != nil {
		t.Fatal(*devErr)
	}
	closeTol(t, "gx", gxg[0].Data, gxc[0].Data, 1e-3)
	for j := 0; j < np; j++ {
		closeTol(t, fmt.Sprintf("gp%d", j), gpg[j].Data, gpc[j].Data, 1e-3)
	}
}

// TestModelV2TrainsFakeDNNEmulated is TestModelV2TrainsOnEmulator with
// the fake cuDNN: the executor's device-resident path through cuDNN (its
// 3×3 convolution there; the other, padded asymmetrically, on im2col).
func TestModelV2TrainsFakeDNNEmulated(t *testing.T) {
	d := fakeDNNDevice(t)
	before := d.Counts()
	checkModelV2Trains(t, d)
	if n := d.Counts().Sub(before).DNN; n == 0 {
		t.Error("no cuDNN call: v2Net's convolutions all ran as im2col")
	}
}

// convLayerModel is two of ResNet-50's convolutions with the batch norm
// between them (layer1's: a 3×3 of 64 channels at 56×56, a 1×1 from 64 to
// 256), at batch batch and width c (64 for ResNet's), and a loss.
func convLayerModel(batch, c, hw int) string {
	return fmt.Sprintf(`{"format":"graphpipe/model@2","batch_size":%d,"inputs":[
 {"name":"x","shape":[%d,%d,%[3]d],"dtype":"float32"},{"name":"tgt","shape":[%d],"dtype":"float32"}],"ops":[
 {"name":"conv3x3","op":"conv2d","inputs":["x"],"attrs":{"out":%[2]d,"kernel":[3,3],"padding":[1,1,1,1],"bias":false}},
 {"name":"bn","op":"batch_norm","inputs":["conv3x3"]},
 {"name":"conv1x1","op":"conv2d","inputs":["bn"],"attrs":{"out":%[4]d,"kernel":[1,1],"bias":false}},
 {"name":"gap","op":"global_avg_pool","inputs":["conv1x1"]},
 {"name":"f","op":"flatten","inputs":["gap"]},
 {"name":"loss","op":"mse","inputs":["f","tgt"]}]}`, batch, c, hw, 4*c)
}

// TestConvTimesOnGPU times one of ResNet-50's 3×3 convolutions and one of
// its 1×1 convolutions (convLayerModel: layer1's, at batch 64) on GPU 0,
// through cuDNN and through im2col + GEMM, in fp32 and tf32, as `graphpipe
// profile --model` times ops (each to its end, in the model's passes:
// forward, input gradient, weight gradient), and the batch norm between
// them (graphpipe's kernels). It prints milliseconds, and checks that the
// two paths agree at this size (cuDNN's algorithms for large shapes use
// workspaces the small op tests may not): outputs and gradients within
// 1e-3 of each other in fp32, 2e-2 in tf32. It fails only on a
// disagreement or an error. Meant to take under 20 s on an H100 or H200
// (not yet run on one); bench/gpu/run.sh runs it with the other OnGPU
// tests, or alone:
//
//	cd stage && ../build/gpu/stage.test -test.run TestConvTimesOnGPU -test.v
func TestConvTimesOnGPU(t *testing.T) {
	timeConvLayers(t, dnnDevice(t), 64, 64, 56, 300*time.Millisecond)
}

// TestConvTimesEmulated runs TestConvTimesOnGPU's code on the emulator
// with the fake cuDNN at a small shape, so that it is known to run where
// it matters.
func TestConvTimesEmulated(t *testing.T) {
	timeConvLayers(t, fakeDNNDevice(t), 2, 4, 6, 0)
}

// timeConvLayers times convLayerModel's ops on d at batch batch, width c
// and size hw×hw, each variant's passes repeated for minTime (at least 3
// times), then compares the two paths' results.
func timeConvLayers(t *testing.T, d *cuda.Device, batch, c, hw int, minTime time.Duration) {
	g, err := dag.Load([]byte(convLayerModel(batch, c, hw)))
	if err != nil {
		t.Fatal(err)
	}
	data, err := NewDataset(g)
	if err != nil {
		t.Fatal(err)
	}
	feeds, err := data.Batch(0, batch)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(s float64) float64 { return 1e3 * s }
	t.Logf("%s, %s; batch %d, %d channels at %d×%d", d.Name, d.ConvPath(), batch, c, hw, hw)
	for _, prec := range []string{"fp32", "tf32"} {
		for _, path := range []string{"cudnn", "im2col"} {
			ex, err := NewExecutor(g, allOps(g), g.Seed(), DeviceBackend(d))
			if err != nil {
				t.Fatal(err)
			}
			ex.SyncOps = true
			if err := ex.SetPrecision(prec); err != nil {
				t.Fatal(err)
			}
			for _, k := range ex.kernels {
				if gk, ok := k.(*gpuKernel); ok {
					gk.opts.im2col = path == "im2col"
				}
			}
			before := d.Counts()
			times, err := timePasses(ex, g, feeds, minTime)
			ex.Close()
			if err != nil {
				t.Fatal(err)
			}
			if n := d.Counts().Sub(before).DNN; (n > 0) != (path == "cudnn") {
				t.Errorf("%s, %s: %d cuDNN calls", prec, path, n)
			}
			for _, op := range []string{"conv3x3", "conv1x1", "bn"} { // bn on the im2col path: graphpipe's own kernels
				a := times[op]
				t.Logf("%s %-6s %-8s forward %7.3f ms, input gradient %7.3f, weight gradient %7.3f (%d repetitions)",
					prec, path, op, ms(meanOf(a[0])), ms(meanOf(a[1])), ms(meanOf(a[2])), len(a[0]))
			}
		}
		for _, op := range []string{"conv3x3", "conv1x1"} {
			i, _ := g.OpIndex(op)
			tol := 1e-3
			if prec == "tf32" {
				tol = 2e-2
			}
			compareConvPaths(t, d, g, i, batch, prec == "tf32", tol)
		}
	}
}

// compareConvPaths runs op i of g (a conv2d) on d over batch samples
// through cuDNN and through im2col + GEMM, from the same inputs, and fails
// where the output or a gradient differs by more than tol (relative to
// 1 + the largest |im2col's| value of that tensor: a weight gradient sums
// a batch's 200 000 products, and two summation orders part by more than
// a small sum's own magnitude where its terms cancel).
func compareConvPaths(t *testing.T, d *cuda.Device, g *dag.Graph, i, batch int, tf32 bool, tol float64) {
	x64, p64 := randomValues(g, i, batch, rand.New(rand.NewSource(5)))
	x, p := narrow(x64), narrow(p64)
	type result struct{ y, gx, gw []float32 }
	var res [2]result
	for j, im2col := range []bool{false, true} {
		var devErr error
		k, err := newGPUKernel(g, i, d, nil, &devErr, &runCtx{})
		if err != nil {
			t.Fatal(err)
		}
		k.(*gpuKernel).opts = scopeOpts{tf32: tf32, im2col: im2col}
		before := d.Counts()
		y, st, err := k.forward(x, p)
		if err != nil {
			t.Fatal(err)
		}
		gy := NewValue[float32](y.Shape...)
		for q := range gy.Data {
			gy.Data[q] = float32(q%13-6) / 6
		}
		gx, gw := NewValue[float32](x[0].Shape...), NewValue[float32](p[0].Shape...)
		k.backward(gy, x, p, y, st, []*Value[float32]{gx}, []*Value[float32]{gw})
		if devErr != nil {
			t.Fatal(devErr)
		}
		if n := d.Counts().Sub(before).DNN; (n > 0) == im2col {
			t.Fatalf("%s (im2col %v): %d cuDNN calls", g.Op(i).Name, im2col, n)
		}
		res[j] = result{y.Data, gx.Data, gw.Data}
	}
	var worst []string
	for _, o := range []struct {
		what      string
		dnn, cols []float32
	}{{"y", res[0].y, res[1].y}, {"gx", res[0].gx, res[1].gx}, {"gw", res[0].gw, res[1].gw}} {
		e := closeScaled(t, fmt.Sprintf("%s (tf32 %v): %s, cuDNN against im2col", g.Op(i).Name, tf32, o.what), o.dnn, o.cols, tol)
		worst = append(worst, fmt.Sprintf("%s %.3g", o.what, e))
	}
	t.Logf("%s (tf32 %v): cuDNN against im2col: %s", g.Op(i).Name, tf32, strings.Join(worst, ", "))
}

// closeScaled is closeTol with each difference relative to 1 + the largest
// |want| of the tensor, not its own value's.
func closeScaled(t *testing.T, what string, got, want []float32, tol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	scale := 0.0
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	var worst float64
	for j := range want {
		rel := math.Abs(float64(got[j])-float64(want[j])) / (1 + scale)
		if !(rel <= tol) { // NaN fails
			t.Fatalf("%s[%d]: cuDNN %v, im2col %v (largest |im2col| %.4g)", what, j, got[j], want[j], scale)
		}
		worst = max(worst, rel)
	}
	return worst
}

package kernel

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

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
				k := conv2DKernel[float32](newOpArgs(g, i, &Pass{}))
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
func TestConvDNNEmulated(t *testing.T) { checkConvDNN(t, cudatest.FakeDNN(t)) }

// TestConvDNNOnGPU runs checkConvDNN on GPU 0 with the system's cuDNN
// (skipped, saying why, without a GPU or without cuDNN).
func TestConvDNNOnGPU(t *testing.T) { checkConvDNN(t, cudatest.DNN(t)) }

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
func TestBatchNormDNNEmulated(t *testing.T) { checkBatchNormDNN(t, cudatest.FakeDNN(t)) }

// TestBatchNormDNNOnGPU runs checkBatchNormDNN on GPU 0 with the system's
// cuDNN (skipped, saying why, without a GPU or without cuDNN).
func TestBatchNormDNNOnGPU(t *testing.T) { checkBatchNormDNN(t, cudatest.DNN(t)) }

// TestBatchNormDNNDroppedEmulated: a batch norm whose forward ran through
// cuDNN, on a device that drops cuDNN before the backward (a later plan's
// call fails: the fake refuses 7 groups), takes its gradients from
// graphpipe's kernels, from cuDNN's saved statistics, within 1e-3 of the
// CPU's.
func TestBatchNormDNNDroppedEmulated(t *testing.T) {
	d := cudatest.FakeDNN(t)
	g, i, cpu, gpu, devErr := opKernels(t, d, bnCases()[len(bnCases())-1])
	x64, p64 := randomValues(g, i, 3, rand.New(rand.NewSource(11)))
	x, p, pg := narrow(x64), narrow(p64), narrow(p64)
	yc, stc, err := cpu.Forward(x, p)
	if err != nil {
		t.Fatal(err)
	}
	yg, stg, err := gpu.Forward(x, pg)
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
	cpu.Backward(gy, x, p, yc, stc, gxc, gpc)
	gpu.Backward(gy, x, pg, yg, stg, gxg, gpg)
	if *devErr != nil {
		t.Fatal(*devErr)
	}
	cudatest.Near(t, "gx", gxg[0].Data, gxc[0].Data, 1e-3)
	for j := 0; j < np; j++ {
		cudatest.Near(t, fmt.Sprintf("gp%d", j), gpg[j].Data, gpc[j].Data, 1e-3)
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
		k, err := NewGPU(g, i, d, nil, &devErr, &Pass{})
		if err != nil {
			t.Fatal(err)
		}
		k.(*gpuKernel).opts = scopeOpts{tf32: tf32, im2col: im2col}
		before := d.Counts()
		y, st, err := k.Forward(x, p)
		if err != nil {
			t.Fatal(err)
		}
		gy := NewValue[float32](y.Shape...)
		for q := range gy.Data {
			gy.Data[q] = float32(q%13-6) / 6
		}
		gx, gw := NewValue[float32](x[0].Shape...), NewValue[float32](p[0].Shape...)
		k.Backward(gy, x, p, y, st, []*Value[float32]{gx}, []*Value[float32]{gw})
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

// TestConvPathsAgreeOnGPU checks that cuDNN's path and im2col + GEMM agree
// on two of ResNet-50's convolutions at batch 64 (layer1's 3×3 of 64
// channels at 56×56 and 1×1 from 64 to 256; stage's TestConvTimesOnGPU
// times them), where cuDNN's algorithms for large shapes use workspaces
// the small op tests may not: outputs and gradients within 1e-3 of each
// other in fp32, 2e-2 in tf32.
func TestConvPathsAgreeOnGPU(t *testing.T) { checkConvPaths(t, cudatest.DNN(t), 64, 64, 56) }

// TestConvPathsAgreeEmulated runs TestConvPathsAgreeOnGPU's code on the
// emulator with the fake cuDNN at a small shape.
func TestConvPathsAgreeEmulated(t *testing.T) { checkConvPaths(t, cudatest.FakeDNN(t), 2, 4, 6) }

func checkConvPaths(t *testing.T, d *cuda.Device, batch, c, hw int) {
	x := fmt.Sprintf(`{"name":"x","shape":[%d,%d,%[2]d],"dtype":"float32"}`, c, hw)
	for _, oc := range []opCase{
		{"conv3x3", x, fmt.Sprintf(`"op":"conv2d","inputs":["x"],"attrs":{"out":%d,"kernel":[3,3],"padding":[1,1,1,1],"bias":false}`, c)},
		{"conv1x1", x, fmt.Sprintf(`"op":"conv2d","inputs":["x"],"attrs":{"out":%d,"kernel":[1,1],"bias":false}`, 4*c)},
	} {
		g, i := oneOp(t, oc)
		compareConvPaths(t, d, g, i, batch, false, 1e-3)
		compareConvPaths(t, d, g, i, batch, true, 2e-2)
	}
}

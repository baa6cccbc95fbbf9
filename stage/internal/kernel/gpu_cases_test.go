package kernel

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// gpuV2Cases add to model@2's op cases (convCases, tensorCases) shapes that
// exercise the GPU kernels' options together and their index arithmetic
// beyond the smallest tensors, and the ops without inputs.
var gpuV2Cases = []opCase{
	// stride, asymmetric padding, dilation and groups at once, no bias
	{"conv2d-all-options", `{"name":"x","shape":[4,7,6],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":6,"kernel":[3,2],"stride":[2,1],"padding":[1,0,2,1],"dilation":[2,1],"groups":2,"bias":false}`},
	{"conv2d-1x1-groups", `{"name":"x","shape":[6,3,3],"dtype":"float32"}`, `"op":"conv2d","inputs":["x"],"attrs":{"out":9,"kernel":[1,1],"groups":3}`},
	// 65537 channels: one part of the channel sums holds every sample
	{"batch_norm-many-channels", `{"name":"x","shape":[65537],"dtype":"float32"}`, `"op":"batch_norm","inputs":["x"],"attrs":{"momentum":0.2}`},
	{"batch_norm-chw-wide", `{"name":"x","shape":[5,4,3],"dtype":"float32"}`, `"op":"batch_norm","inputs":["x"],"attrs":{"eps":0.01}`},
	// planes of 45 values: 32 lanes per (sample, channel), some with two values
	{"batch_norm-lanes", `{"name":"x","shape":[3,5,9],"dtype":"float32"}`, `"op":"batch_norm","inputs":["x"]`},
	// overlapping windows: an input is the maximum of several outputs
	{"max_pool2d-overlap", `{"name":"x","shape":[2,6,5],"dtype":"float32"}`, `"op":"max_pool2d","inputs":["x"],"attrs":{"kernel":[3,2],"stride":[1,2],"padding":[1,0,1,1]}`},
	{"avg_pool2d-ceil-exclude", `{"name":"x","shape":[2,7,6],"dtype":"float32"}`, `"op":"avg_pool2d","inputs":["x"],"attrs":{"kernel":[3,3],"stride":[2,2],"padding":[1,1,1,1],"ceil_mode":true,"count_include_pad":false}`},
	{"avg_pool2d-overlap", `{"name":"x","shape":[1,6,6],"dtype":"float32"}`, `"op":"avg_pool2d","inputs":["x"],"attrs":{"kernel":[3,2],"stride":[1,1],"padding":[1,0,0,1]}`},
	{"transpose-4d", `{"name":"x","shape":[2,3,4,5],"dtype":"float32"}`, `"op":"transpose","inputs":["x"],"attrs":{"perm":[3,1,0,2]}`},
	{"softmax-middle", `{"name":"x","shape":[3,4,5],"dtype":"float32"}`, `"op":"softmax","inputs":["x"],"attrs":{"axis":1}`},
	{"slice-middle", `{"name":"x","shape":[2,8,3],"dtype":"float32"}`, `"op":"slice","inputs":["x"],"attrs":{"axis":1,"start":1,"end":-1,"step":3}`},
	{"pad-3d", `{"name":"x","shape":[2,3,2],"dtype":"float32"}`, `"op":"pad","inputs":["x"],"attrs":{"pads":[0,1,2,1,0,1]}`},
	{"matmul-4", `{"name":"a","shape":[2,3,4,5],"dtype":"float32"},{"name":"b","shape":[2,3,5,2],"dtype":"float32"}`, `"op":"matmul","inputs":["a","b"]`},
	{"matmul-same", `{"name":"a","shape":[3,3],"dtype":"float32"}`, `"op":"matmul","inputs":["a","a"]`},
	{"mul-broadcast-3d", `{"name":"x","shape":[4,1,3],"dtype":"float32"},{"name":"y","shape":[2,1],"dtype":"float32"}`, `"op":"mul","inputs":["x","y"]`},
	{"div-broadcast-both", `{"name":"x","shape":[1,3],"dtype":"float32"},{"name":"y","shape":[4,1],"dtype":"float32"}`, `"op":"div","inputs":["x","y"]`},
	{"sub-same-shape", `{"name":"x","shape":[2,3],"dtype":"float32"},{"name":"y","shape":[2,3],"dtype":"float32"}`, `"op":"sub","inputs":["x","y"]`},
	{"div-same-shape", `{"name":"x","shape":[5],"dtype":"float32"},{"name":"y","shape":[5],"dtype":"float32"}`, `"op":"div","inputs":["x","y"]`},
	{"add-broadcast-same-input", `{"name":"x","shape":[2,3],"dtype":"float32"},{"name":"y","shape":[3],"dtype":"float32"}`, `"op":"add","inputs":["x","y","x"]`},
	{"reduce_sum-middle-keep", `{"name":"x","shape":[2,3,4],"dtype":"float32"}`, `"op":"reduce_sum","inputs":["x"],"attrs":{"axes":[1],"keepdims":true}`},
	{"reduce_mean-all", `{"name":"x","shape":[3,2],"dtype":"float32"}`, `"op":"reduce_mean","inputs":["x"]`},
	{"dropout-half", `{"name":"x","shape":[20,30],"dtype":"float32"}`, `"op":"dropout","inputs":["x"],"attrs":{"p":0.5}`},
	{"pow-neg", `{"name":"x","shape":[6],"dtype":"float32"}`, `"op":"pow","inputs":["x"],"attrs":{"exponent":-1.5}`},
	{"parameter", ``, `"op":"parameter","inputs":[],"attrs":{"shape":[2,3]}`},
	{"constant", ``, `"op":"constant","inputs":[],"attrs":{"shape":[2,2],"value":[1.5,-2,0.25,4]}`},
	{"constant-fill", ``, `"op":"constant","inputs":[],"attrs":{"shape":[3],"value":[0.5]}`},
}

func init() { positiveInputs["pow-neg"] = true }

// TestConv2DChunksOnEmulator: with an im2col buffer of one or two samples,
// conv2d's samples go through in chunks (gpuConv2DCols: the im2col path,
// even where cuDNN is loaded), and the outputs and gradients (the
// weight's summed over the chunks) still match the CPU.
func TestConv2DChunksOnEmulator(t *testing.T) { checkConv2DChunks(t, cudatest.Emulator(t)) }

// TestConv2DChunksOnGPU is TestConv2DChunksOnEmulator on a real GPU (skipped without one).
func TestConv2DChunksOnGPU(t *testing.T) { checkConv2DChunks(t, cudatest.GPU(t)) }

func checkConv2DChunks(t *testing.T, d *cuda.Device) {
	old := convColElems
	defer func() { convColElems = old }()
	var worst closeness
	for _, c := range append(append([]opCase(nil), convCases[:6]...), gpuV2Cases[:2]...) {
		g, i := oneOp(t, c)
		cv := conv2DKernel[float32](newOpArgs(g, i, &Pass{}))
		cols := cv.c * cv.kh * cv.kw * cv.oh * cv.ow // one sample's im2col
		for _, samples := range []int{1, 2} {
			convColElems = samples * cols
			t.Run(c.name+"/"+string(rune('0'+samples)), func(t *testing.T) {
				before := d.Counts()
				checkOpWith(t, d, c, &worst, scopeOpts{im2col: true}, 1e-3)
				if n := d.Counts().Sub(before).DNN; n != 0 {
					t.Errorf("%d cuDNN calls on the im2col path", n)
				}
			})
		}
	}
	t.Logf("largest relative difference, device against CPU: %.3g (%s)", worst.rel, worst.what)
}

// TestGPUConstantIntsOnEmulator: an int32 constant (indices) is made on the host, as
// on the CPU.
func TestGPUConstantIntsOnEmulator(t *testing.T) { checkGPUConstantInts(t, cudatest.Emulator(t)) }

// TestGPUConstantIntsOnGPU is TestGPUConstantIntsOnEmulator on a real GPU (skipped without one).
func TestGPUConstantIntsOnGPU(t *testing.T) { checkGPUConstantInts(t, cudatest.GPU(t)) }

func checkGPUConstantInts(t *testing.T, d *cuda.Device) {
	g, err := dag.Load([]byte(`{"format":"graphpipe/model@2","batch_size":2,"inputs":[{"name":"y","shape":[],"dtype":"float32"}],
		"ops":[{"name":"c","op":"constant","inputs":[],"attrs":{"shape":[2],"dtype":"int32","value":[4,1]}},
		{"name":"e","op":"embedding","inputs":["c"],"attrs":{"num":5,"dim":3}},{"name":"f","op":"flatten","inputs":["e"]},
		{"name":"m","op":"mean","inputs":["f"],"attrs":{"axis":0}},{"name":"loss","op":"mse","inputs":["m","y"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	i, _ := g.OpIndex("c")
	var devErr error
	gk, err := NewGPU(g, i, d, nil, &devErr, opCtx())
	if err != nil {
		t.Fatal(err)
	}
	y, _, err := gk.Forward(nil, nil)
	if err != nil || len(y.Ints) != 6 || y.Ints[2] != 4 || y.Ints[5] != 1 || y.Data != nil {
		t.Fatalf("int constant on the device path: %+v, %v", y, err)
	}
}

// TestGPUDropoutMaskOnEmulator: on a large tensor, the device drops exactly
// the elements the CPU drops, at several rates, samples and steps.
func TestGPUDropoutMaskOnEmulator(t *testing.T) { checkGPUDropoutMask(t, cudatest.Emulator(t)) }

// TestGPUDropoutMaskOnGPU is TestGPUDropoutMaskOnEmulator on a real GPU (skipped without one).
func TestGPUDropoutMaskOnGPU(t *testing.T) { checkGPUDropoutMask(t, cudatest.GPU(t)) }

func checkGPUDropoutMask(t *testing.T, d *cuda.Device) {
	x := NewValue[float32](4, 3000)
	r := rand.New(rand.NewSource(1))
	for i := range x.Data {
		x.Data[i] = float32(r.NormFloat64())
	}
	for _, p := range []float64{0.1, 0.5, 1.0 / 3} {
		for _, pos := range []Position{{Step: 0, Sample: 0}, {Step: 9, Sample: 1 << 20}} {
			ctx := &Pass{Seed: -3, Pos: pos}
			cpu := &dropout[float32]{op: "drop", p: p, ctx: ctx}
			var devErr error
			fwd, bwd := gpuDropout(cpu)
			gk := &gpuKernel{d: d, errp: &devErr, fwd: fwd, bwd: bwd}
			yc, _, _ := cpu.Forward([]*Value[float32]{x}, nil)
			yg, _, err := gk.Forward([]*Value[float32]{x}, nil)
			if err != nil {
				t.Fatal(err)
			}
			dropped := 0
			for i := range yc.Data {
				if (yc.Data[i] == 0) != (yg.Data[i] == 0) || yc.Data[i] != yg.Data[i] {
					t.Fatalf("p %v, %+v: element %d is %v on the device, %v on the CPU", p, pos, i, yg.Data[i], yc.Data[i])
				}
				if yc.Data[i] == 0 {
					dropped++
				}
			}
			if frac := float64(dropped) / float64(len(yc.Data)); math.Abs(frac-p) > 0.02 {
				t.Fatalf("p %v: %.3f dropped", p, frac)
			}
		}
	}
}

// TestEveryKindHasAnEmulatorCase: every op kind but opaque has a case that
// TestOpsOnEmulator compares with the CPU (and which fails there if the
// device path hands the op back to the CPU kernel).
func TestEveryKindHasAnEmulatorCase(t *testing.T) {
	for _, k := range dag.Kinds() {
		if k == dag.Opaque {
			continue
		}
		found := false
		for _, c := range gpuCases() {
			found = found || strings.Contains(c.op, `"op":"`+string(k)+`"`)
		}
		if !found {
			t.Errorf("no GPU op case of %s", k)
		}
	}
}

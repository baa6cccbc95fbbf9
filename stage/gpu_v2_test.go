package stage

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
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
func TestConv2DChunksOnEmulator(t *testing.T) { checkConv2DChunks(t, emulatedDevice(t)) }

// TestConv2DChunksOnGPU is TestConv2DChunksOnEmulator on a real GPU (skipped without one).
func TestConv2DChunksOnGPU(t *testing.T) { checkConv2DChunks(t, gpuDevice(t)) }

func checkConv2DChunks(t *testing.T, d *cuda.Device) {
	old := convColElems
	defer func() { convColElems = old }()
	var worst closeness
	for _, c := range append(append([]opCase(nil), convCases[:6]...), gpuV2Cases[:2]...) {
		g, i := oneOp(t, c)
		cv := conv2DKernel[float32](newOpArgs(g, i, &runCtx{}))
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
func TestGPUConstantIntsOnEmulator(t *testing.T) { checkGPUConstantInts(t, emulatedDevice(t)) }

// TestGPUConstantIntsOnGPU is TestGPUConstantIntsOnEmulator on a real GPU (skipped without one).
func TestGPUConstantIntsOnGPU(t *testing.T) { checkGPUConstantInts(t, gpuDevice(t)) }

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
	gk, err := newGPUKernel(g, i, d, nil, &devErr, opCtx())
	if err != nil {
		t.Fatal(err)
	}
	y, _, err := gk.forward(nil, nil)
	if err != nil || len(y.Ints) != 6 || y.Ints[2] != 4 || y.Ints[5] != 1 || y.Data != nil {
		t.Fatalf("int constant on the device path: %+v, %v", y, err)
	}
}

// TestGPUDropoutMaskOnEmulator: on a large tensor, the device drops exactly
// the elements the CPU drops, at several rates, samples and steps.
func TestGPUDropoutMaskOnEmulator(t *testing.T) { checkGPUDropoutMask(t, emulatedDevice(t)) }

// TestGPUDropoutMaskOnGPU is TestGPUDropoutMaskOnEmulator on a real GPU (skipped without one).
func TestGPUDropoutMaskOnGPU(t *testing.T) { checkGPUDropoutMask(t, gpuDevice(t)) }

func checkGPUDropoutMask(t *testing.T, d *cuda.Device) {
	x := NewValue[float32](4, 3000)
	r := rand.New(rand.NewSource(1))
	for i := range x.Data {
		x.Data[i] = float32(r.NormFloat64())
	}
	for _, p := range []float64{0.1, 0.5, 1.0 / 3} {
		for _, pos := range []Position{{Step: 0, Sample: 0}, {Step: 9, Sample: 1 << 20}} {
			ctx := &runCtx{seed: -3, pos: pos}
			cpu := &dropout[float32]{op: "drop", p: p, ctx: ctx}
			var devErr error
			fwd, bwd := gpuDropout(cpu)
			gk := &gpuKernel{d: d, errp: &devErr, fwd: fwd, bwd: bwd}
			yc, _, _ := cpu.forward([]*Value[float32]{x}, nil)
			yg, _, err := gk.forward([]*Value[float32]{x}, nil)
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

// v2Net is a small model@2 network with a conv trunk (conv2d, batch_norm,
// relu, a 1×1 conv2d, a residual add (relu's output's gradient comes
// from both), max_pool2d, a strided grouped conv, avg_pool2d, global_avg_pool)
// and a branch of tensor ops (reshape, transpose, matmul, softmax, a
// parameter, dropout, reductions, the elementwise ops in their scalar and
// broadcast forms, a relu of 3 values a sample), joined into linear and the
// loss.
const v2Net = `{"format":"graphpipe/model@2","batch_size":8,"seed":3,
 "inputs":[{"name":"x","shape":[2,8,8],"dtype":"float32"},{"name":"label","shape":[],"dtype":"int32","range":[0,4]}],
 "ops":[
  {"name":"c1","op":"conv2d","inputs":["x"],"attrs":{"out":4,"kernel":[3,3],"padding":[1,1,1,1]}},
  {"name":"bn","op":"batch_norm","inputs":["c1"],"attrs":{"momentum":0.2}},
  {"name":"r","op":"relu","inputs":["bn"]},
  {"name":"c0","op":"conv2d","inputs":["r"],"attrs":{"out":4,"kernel":[1,1],"bias":false}},
  {"name":"res","op":"add","inputs":["c0","r"]},
  {"name":"mp","op":"max_pool2d","inputs":["res"],"attrs":{"kernel":[2,2]}},
  {"name":"c2","op":"conv2d","inputs":["mp"],"attrs":{"out":4,"kernel":[3,2],"stride":[2,1],"padding":[1,0,1,1],"dilation":[1,2],"groups":2}},
  {"name":"ap","op":"avg_pool2d","inputs":["c2"],"attrs":{"kernel":[2,2],"ceil_mode":true,"count_include_pad":false}},
  {"name":"gap","op":"global_avg_pool","inputs":["ap"]},
  {"name":"f","op":"flatten","inputs":["gap"]},
  {"name":"s","op":"reshape","inputs":["mp"],"attrs":{"shape":[4,16]}},
  {"name":"st","op":"transpose","inputs":["s"],"attrs":{"perm":[1,0]}},
  {"name":"mm","op":"matmul","inputs":["s","st"]},
  {"name":"mms","op":"mul","inputs":["mm"],"attrs":{"scalar":0.25}},
  {"name":"sm","op":"softmax","inputs":["mms"]},
  {"name":"pp","op":"parameter","inputs":[],"attrs":{"shape":[4]}},
  {"name":"a","op":"add","inputs":["sm","pp"]},
  {"name":"dr","op":"dropout","inputs":["a"],"attrs":{"p":0.25}},
  {"name":"red","op":"reduce_mean","inputs":["dr"],"attrs":{"axes":[1]}},
  {"name":"sq","op":"pow","inputs":["red"],"attrs":{"exponent":2}},
  {"name":"sq1","op":"add","inputs":["sq"],"attrs":{"scalar":1}},
  {"name":"rt","op":"sqrt","inputs":["sq1"]},
  {"name":"q","op":"div","inputs":["f","rt"]},
  {"name":"e","op":"erf","inputs":["red"]},
  {"name":"z","op":"sub","inputs":["q","e"]},
  {"name":"ex","op":"exp","inputs":["e"]},
  {"name":"lg","op":"log","inputs":["ex"]},
  {"name":"ng","op":"neg","inputs":["lg"]},
  {"name":"k","op":"constant","inputs":[],"attrs":{"shape":[4],"value":[0.5,-1,2,0.25]}},
  {"name":"nk","op":"mul","inputs":["ng","k"]},
  {"name":"sl","op":"slice","inputs":["z"],"attrs":{"axis":0,"start":1,"end":4}},
  {"name":"rr","op":"relu","inputs":["sl"]},
  {"name":"pd","op":"pad","inputs":["rr"],"attrs":{"pads":[1,0],"value":0.5}},
  {"name":"rs","op":"reduce_sum","inputs":["sm"],"attrs":{"axes":[0],"keepdims":false}},
  {"name":"cat","op":"concat","inputs":["pd","nk","rs"]},
  {"name":"lin","op":"linear","inputs":["cat"],"attrs":{"out":4}},
  {"name":"loss","op":"softmax_cross_entropy","inputs":["lin","label"]}]}`

// TestModelV2TrainsOnEmulator: v2Net trained 3 steps of 4 micro-batches
// (SGD with momentum) with every op on the emulated device gives the CPU's
// losses, parameters and batch-norm statistics within 1e-4; and one batch's
// gradients with the weight passes deferred (B, then W in another order)
// are the CPU's.
func TestModelV2TrainsOnEmulator(t *testing.T) { checkModelV2Trains(t, emulatedDevice(t)) }

// TestModelV2TrainsOnGPU is TestModelV2TrainsOnEmulator on a real GPU (skipped without one).
func TestModelV2TrainsOnGPU(t *testing.T) { checkModelV2Trains(t, gpuDevice(t)) }

func checkModelV2Trains(t *testing.T, d *cuda.Device) {
	g, err := dag.Load([]byte(v2Net))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < g.NumOps(); i++ {
		if g.Op(i).Kind.Since() < 2 {
			continue
		}
		var devErr error
		if k, err := newGPUKernel(g, i, d, nil, &devErr, &runCtx{}); err != nil {
			t.Fatal(err)
		} else if _, ok := k.(*gpuKernel); !ok {
			t.Fatalf("op %s: the CPU's kernel %T on the device path", g.Op(i).Name, k)
		}
	}
	o := TrainOptions{Optimizer: "sgd", LR: 0.02, Momentum: 0.9, MicroBatch: 2}
	cpu, err := NewTrainer(g, o)
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := NewTrainer(g, o)
	if err := dev.Ex.UseDevice(d); err != nil {
		t.Fatal(err)
	}
	defer dev.Ex.Close()
	for s := 0; s < 3; s++ {
		lc, _, err := cpu.Step(s)
		if err != nil {
			t.Fatal(err)
		}
		ld, _, err := dev.Step(s)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d: loss %.7g on the CPU, %.7g on the device", s, lc, ld)
		if math.Abs(lc-ld) > 1e-4*math.Abs(lc) {
			t.Fatalf("step %d: loss %v on the device, %v on the CPU", s, ld, lc)
		}
	}
	var worst float64
	for name, want := range cpu.Ex.State() {
		worst = max(worst, close4(t, name, hostState(t, dev.Ex)[name].Data, want.Data))
	}
	if len(cpu.Ex.Buffers) != 2 {
		t.Fatalf("%d buffers, want batch_norm's running mean and variance", len(cpu.Ex.Buffers))
	}
	t.Logf("after 3 steps, %d parameters and buffers: largest difference %.3g", len(cpu.Ex.State()), worst)
	full := gradsOf(t, g, 4, false)
	got := gradsOn(t, g, 4, true, d)
	for k, want := range full {
		close4(t, "deferred W: "+k, got[k], want)
	}
}

// close4 fails where got and want differ by more than 1e-4 relative (to
// 1 + |want|, NaN failing) and returns the largest difference.
func close4(t *testing.T, what string, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var worst float64
	for j := range want {
		rel := math.Abs(float64(got[j])-float64(want[j])) / (1 + math.Abs(float64(want[j])))
		if !(rel <= 1e-4) {
			t.Fatalf("%s[%d]: device %v, CPU %v", what, j, got[j], want[j])
		}
		worst = max(worst, rel)
	}
	return worst
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

// synthEval is an evaluation set drawn from a model's synthetic data:
// batches of 8 from steps 100 on, the last one cut to 5 rows.
type synthEval struct{ d *Dataset }

func (e synthEval) Batches() int { return 3 }
func (e synthEval) Batch(k int, names map[string]bool) (map[string]*Value[float32], error) {
	b, err := e.d.Inputs(100+k, 8, names)
	if err != nil || k < 2 {
		return b, err
	}
	for name, v := range b {
		b[name] = SliceRows(v, 0, 5)
	}
	return b, nil
}

// TestEvaluateOnEmulator: evaluation mode on the device (batch_norm by its
// running statistics, dropout passing through) gives the CPU's loss and
// accuracy, and leaves the running statistics alone on both.
func TestEvaluateOnEmulator(t *testing.T) { checkEvaluate(t, emulatedDevice(t)) }

// TestEvaluateOnGPU is TestEvaluateOnEmulator on a real GPU (skipped without one).
func TestEvaluateOnGPU(t *testing.T) { checkEvaluate(t, gpuDevice(t)) }

func checkEvaluate(t *testing.T, d *cuda.Device) {
	g, err := dag.Load([]byte(v2Net))
	if err != nil {
		t.Fatal(err)
	}
	o := TrainOptions{Optimizer: "sgd", LR: 0.02, Momentum: 0.9, MicroBatch: 2}
	cpu, _ := NewTrainer(g, o)
	dev, _ := NewTrainer(g, o)
	if err := dev.Ex.UseDevice(d); err != nil {
		t.Fatal(err)
	}
	defer dev.Ex.Close()
	for s := 0; s < 2; s++ {
		if _, _, err := cpu.Step(s); err != nil {
			t.Fatal(err)
		}
		if _, _, err := dev.Step(s); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string][]float32{}
	for name, v := range cpu.Ex.Buffers {
		before[name] = append([]float32(nil), v.Data...)
	}
	rc, err := cpu.Evaluate(2, synthEval{cpu.Data})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := dev.Evaluate(2, synthEval{dev.Data})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CPU: %+v; device: %+v", rc, rd)
	if rc.Samples != 21 || rd.Samples != 21 || math.Abs(rc.Loss-rd.Loss) > 1e-4*math.Abs(rc.Loss) || rc.Accuracy != rd.Accuracy {
		t.Fatalf("evaluation on the device %+v, on the CPU %+v", rd, rc)
	}
	for name, v := range cpu.Ex.Buffers {
		if !slices.Equal(v.Data, before[name]) {
			t.Errorf("evaluation moved buffer %s", name)
		}
		close4(t, name, hostState(t, dev.Ex)[name].Data, v.Data)
	}
	if cpu.Ex.InFlight() != 0 || dev.Ex.InFlight() != 0 {
		t.Error("evaluation left micro-batches in flight")
	}
}

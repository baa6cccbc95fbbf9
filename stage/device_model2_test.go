package stage

import (
	"math"
	"slices"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

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
func TestModelV2TrainsOnEmulator(t *testing.T) { checkModelV2Trains(t, cudatest.Emulator(t)) }

// TestModelV2TrainsOnGPU is TestModelV2TrainsOnEmulator on a real GPU (skipped without one).
func TestModelV2TrainsOnGPU(t *testing.T) { checkModelV2Trains(t, cudatest.GPU(t)) }

func checkModelV2Trains(t *testing.T, d *cuda.Device) {
	g, err := dag.Load([]byte(v2Net))
	if err != nil {
		t.Fatal(err)
	}
	// (the kernel room's TestKernelTable: every kind has its GPU kernel)
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
func TestEvaluateOnEmulator(t *testing.T) { checkEvaluate(t, cudatest.Emulator(t)) }

// TestEvaluateOnGPU is TestEvaluateOnEmulator on a real GPU (skipped without one).
func TestEvaluateOnGPU(t *testing.T) { checkEvaluate(t, cudatest.GPU(t)) }

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

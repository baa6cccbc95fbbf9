package stage

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

func small(t *testing.T, name string) *dag.Graph {
	t.Helper()
	e, err := models.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// gradsOf runs one batch through fresh parameters in mbs micro-batches, with
// the weight gradients taken at once (split false) or deferred (split true),
// and returns the accumulated gradients.
func gradsOf(t *testing.T, g *dag.Graph, mbs int, split bool) map[string][]float32 {
	return gradsOn(t, g, mbs, split, nil)
}

// gradsOn is gradsOf with the executor on device d (nil: the CPU).
func gradsOn(t *testing.T, g *dag.Graph, mbs int, split bool, d *cuda.Device) map[string][]float32 {
	tr, err := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if d != nil {
		if err := tr.Ex.UseDevice(d); err != nil {
			t.Fatal(err)
		}
		defer tr.Ex.Close()
	}
	batch, err := tr.Data.Batch(0, int(g.BatchSize()))
	if err != nil {
		t.Fatal(err)
	}
	n := int(g.BatchSize())
	b := n / mbs
	loss := g.Op(g.Loss()).Name
	for j := 0; j < mbs; j++ {
		feeds := map[string]*Value[float32]{}
		for k, v := range batch {
			feeds[k] = SliceRows(v, j*b, (j+1)*b)
		}
		out, err := tr.Ex.Forward(j, Position{Sample: j * b}, feeds)
		if err != nil {
			t.Fatal(err)
		}
		if d != nil { // nothing leaves a whole-model stage: even the loss stays on the device for the step
			for name, v := range out {
				if v.Data != nil {
					t.Fatalf("output %s (the loss is %s) came to the host", name, loss)
				}
			}
		}
	}
	for j := mbs - 1; j >= 0; j-- { // backward in another order than forward
		seed := &Value[float32]{Shape: []int{1}, Data: []float32{float32(b) / float32(n)}}
		if _, err := tr.Ex.Backward(j, map[string]*Value[float32]{loss: seed}, !split); err != nil {
			t.Fatal(err)
		}
	}
	if split {
		if tr.Ex.InFlight() != mbs {
			t.Fatalf("%d micro-batches stashed before W, want %d", tr.Ex.InFlight(), mbs)
		}
		for j := 0; j < mbs; j++ {
			if err := tr.Ex.Weights(j); err != nil {
				t.Fatal(err)
			}
		}
	}
	if tr.Ex.InFlight() != 0 {
		t.Fatalf("%d micro-batches still stashed", tr.Ex.InFlight())
	}
	if d != nil { // the device's gradients stay there: the host's see them only when brought down
		for k, v := range tr.Ex.Grads {
			for _, x := range v.Data {
				if x != 0 {
					t.Fatalf("gradient %s reached the host unasked", k)
				}
			}
		}
	}
	if err := tr.Ex.be.fetchGrads(); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for k, v := range tr.Ex.Grads {
		out[k] = append([]float32(nil), v.Data...)
	}
	return out
}

// TestMicroBatchAccumulation: the gradients of 4 micro-batches, accumulated,
// equal the full batch's; deferring the weight gradients changes nothing.
func TestMicroBatchAccumulation(t *testing.T) {
	for _, name := range []string{"mmt", "dlrm", "candle-uno", "case-study"} {
		t.Run(name, func(t *testing.T) {
			g := small(t, name)
			full := gradsOf(t, g, 1, false)
			for _, variant := range []struct {
				mbs   int
				split bool
			}{{4, false}, {4, true}, {1, true}} {
				got := gradsOf(t, g, variant.mbs, variant.split)
				nonzero := 0
				for k, want := range full {
					for i := range want {
						if math.Abs(float64(got[k][i]-want[i])) > 1e-5*(1+math.Abs(float64(want[i]))) {
							t.Fatalf("%+v: %s[%d] = %v, full batch %v", variant, k, i, got[k][i], want[i])
						}
						if want[i] != 0 {
							nonzero++
						}
					}
				}
				if nonzero == 0 {
					t.Fatal("every gradient is zero")
				}
			}
		})
	}
}

func TestExecutorRefusals(t *testing.T) {
	g := small(t, "mlp")
	ex, err := NewExecutor(g, []int{0, 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Forward(0, Position{}, map[string]*Value[float32]{}); err == nil {
		t.Error("a forward without its inputs ran")
	}
	if _, err := ex.Backward(3, nil, true); err == nil {
		t.Error("a backward without a forward ran")
	}
	if err := ex.Weights(3); err == nil {
		t.Error("weights without a backward ran")
	}
	opq, err := dag.Load([]byte(`{"format":"graphpipe/model@1","batch_size":2,
	 "inputs":[{"name":"x","shape":[2],"dtype":"float32"},{"name":"y","shape":[2],"dtype":"float32"}],
	 "ops":[{"name":"black","op":"opaque","inputs":["x"],"attrs":{"out_shape":[2],"flops_fwd":10}},
	        {"name":"loss","op":"mse","inputs":["black","y"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewExecutor(opq, []int{0, 1}, 1); err == nil || err.Error() != `op "black": is opaque: it has a cost but no computation, so it can be searched and simulated but not run` {
		t.Errorf("opaque: %v", err)
	}
}

func TestIndexOutOfRange(t *testing.T) {
	g := small(t, "dlrm")
	tr, _ := NewTrainer(g, TrainOptions{Optimizer: "sgd", LR: 0.1})
	batch, _ := tr.Data.Batch(0, int(g.BatchSize()))
	batch["sparse0.idx"].Ints[0] = 100000
	if _, err := tr.Ex.Forward(0, Position{}, batch); err == nil {
		t.Fatal("an index past the table trained")
	}
}

func TestInitIsPartitionFree(t *testing.T) {
	g := small(t, "mmt")
	all := make([]int, g.NumOps())
	for i := range all {
		all[i] = i
	}
	whole, _ := NewExecutor(g, all, 7)
	half, _ := NewExecutor(g, all[:len(all)/2], 7)
	for name, v := range half.Params {
		w := whole.Params[name]
		for i := range v.Data {
			if v.Data[i] != w.Data[i] {
				t.Fatalf("%s differs between partitions", name)
			}
		}
	}
	if len(half.Params) == 0 {
		t.Fatal("no parameters compared")
	}
	other, _ := NewExecutor(g, all, 8)
	if other.Params["head.weight"].Data[0] == whole.Params["head.weight"].Data[0] {
		t.Error("the seed does not change the parameters")
	}
}

// TestOptimizerStateRoundTrip: training 3 steps, saving parameters and
// optimizer state, loading them into a fresh trainer and training 3 more
// gives the parameters of 6 steps in a row.
func TestOptimizerStateRoundTrip(t *testing.T) {
	g := small(t, "mlp")
	for _, o := range []TrainOptions{{Optimizer: "adam", LR: 1e-2}, {Optimizer: "sgd", LR: 0.05, Momentum: 0.9}} {
		straight, _ := NewTrainer(g, o)
		for s := 0; s < 6; s++ {
			straight.Step(s)
		}
		first, _ := NewTrainer(g, o)
		for s := 0; s < 3; s++ {
			first.Step(s)
		}
		state, step, err := first.Ex.OptimizerState()
		if err != nil {
			t.Fatal(err)
		}
		second, _ := NewTrainer(g, o)
		saved, err := first.Ex.HostState()
		if err != nil {
			t.Fatal(err)
		}
		second.Ex.LoadState(saved)
		if err := second.Ex.LoadOptimizerState(state, step); err != nil {
			t.Fatal(err)
		}
		for s := 3; s < 6; s++ {
			second.Step(s)
		}
		for name, v := range straight.Ex.Params {
			for i := range v.Data {
				if second.Ex.Params[name].Data[i] != v.Data[i] {
					t.Fatalf("%s: %s[%d] differs after a save and load", o.Optimizer, name, i)
				}
			}
		}
	}
}

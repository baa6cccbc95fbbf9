//go:build toyop

package stage

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
)

// The toy operator scale2 (y = 2x) end to end through the executor, with
// nothing but its row in dag's table (dag/op_toy.go) and its row and
// kernels in the kernel room's (internal/kernel/toy.go):
// go test -tags toyop ./stage/... -run 'Toy|Table|Gradients|Float32|OpsOnEmulator'.
// The kernel room's op cases put it through the finite-difference, float32
// and GPU-emulator checks every op gets (internal/kernel/toy_test.go).

const toyModel = `{"format": "graphpipe/model@2", "batch_size": 2,
  "inputs": [{"name": "x", "shape": [3], "dtype": "float32"}, {"name": "t", "shape": [4], "dtype": "float32"}],
  "ops": [{"name": "lin", "op": "linear", "inputs": ["x"], "attrs": {"out": 4}},
    {"name": "s", "op": "scale2", "inputs": ["lin"]},
    {"name": "loss", "op": "mse", "inputs": ["s", "t"]}]}`

// TestToyOpModel: the model file reads, infers, costs and writes the toy
// op; model@1 refuses it, an op of model@2.
func TestToyOpModel(t *testing.T) {
	g, err := dag.Load([]byte(toyModel))
	if err != nil {
		t.Fatal(err)
	}
	i, _ := g.OpIndex("s")
	if sh := g.Out(i).Shape; !sh.Equal(dag.Shape{4}) {
		t.Errorf("shape %v, want [4]", sh)
	}
	want := dag.Cost{FwdFLOPs: 4, BwdInputFLOPs: 4, OutBytes: 16, MemBytes: 32}
	if c := g.Cost(i); c != want {
		t.Errorf("cost %+v, want %+v", c, want)
	}
	if w := string(dag.Write(g.Model())); !strings.Contains(w, `"op": "scale2"`) {
		t.Errorf("written without scale2:\n%s", w)
	} else if _, err := dag.Load([]byte(w)); err != nil {
		t.Errorf("written, it does not read back: %v", err)
	}
	_, err = dag.Load([]byte(strings.Replace(toyModel, "model@2", "model@1", 1)))
	if err == nil || !strings.Contains(err.Error(), "scale2 is an operator of graphpipe/model@2; this model is graphpipe/model@1") {
		t.Errorf("model@1 with scale2: %v", err)
	}
}

// TestToyOpTrains: through the executor, the gradients of the loss with
// respect to scale2's input (fed to a stage of scale2 and the loss, as from
// another stage) and to the linear layer before it (the whole model) are
// its central differences: the loss is quadratic in each, so they agree
// but for rounding.
func TestToyOpTrains(t *testing.T) {
	g, err := dag.Load([]byte(toyModel))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(3))
	feeds := map[string]*Value[float32]{"x": NewValue[float32](2, 3), "lin": NewValue[float32](2, 4), "t": NewValue[float32](2, 4)}
	for _, v := range feeds {
		for j := range v.Data {
			v.Data[j] = float32(r.NormFloat64())
		}
	}
	tail := toyExecutor(t, g, []int{1, 2}) // scale2 and the loss, fed lin
	gx := toyBackward(t, tail, feeds)
	checkCentral(t, "lin", toyLoss(t, tail, feeds), feeds["lin"].Data, gx["lin"].Data)
	whole := toyExecutor(t, g, []int{0, 1, 2})
	toyBackward(t, whole, feeds)
	loss := toyLoss(t, whole, feeds)
	for _, p := range []string{"lin.weight", "lin.bias"} {
		checkCentral(t, p, loss, whole.Params[p].Data, whole.Grads[p].Data)
	}
}

func toyExecutor(t *testing.T, g *dag.Graph, ops []int) *Executor {
	e, err := NewExecutor(g, ops, 7)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// toyBackward runs micro-batch 0 forward and backward, seeding the loss's
// gradient with 1, and returns the gradients of what was fed.
func toyBackward(t *testing.T, e *Executor, feeds map[string]*Value[float32]) map[string]*Value[float32] {
	if _, err := e.Forward(0, Position{}, feeds); err != nil {
		t.Fatal(err)
	}
	gx, err := e.Backward(0, map[string]*Value[float32]{"loss": {Shape: []int{1}, Data: []float32{1}}}, true)
	if err != nil {
		t.Fatal(err)
	}
	return gx
}

// toyLoss is the loss of a forward pass, each on a micro-batch of its own.
func toyLoss(t *testing.T, e *Executor, feeds map[string]*Value[float32]) func() float64 {
	mb := 0
	return func() float64 {
		mb++
		out, err := e.Forward(mb, Position{}, feeds)
		if err != nil {
			t.Fatal(err)
		}
		return float64(out["loss"].Data[0])
	}
}

// checkCentral compares analytic, the gradient of loss with respect to
// vals, with central differences.
func checkCentral(t *testing.T, what string, loss func() float64, vals, analytic []float32) {
	t.Helper()
	for j := range vals {
		old := vals[j]
		vals[j] = old + 1e-2
		up := loss()
		vals[j] = old - 1e-2
		down := loss()
		vals[j] = old
		num := (up - down) / 2e-2
		if math.Abs(num-float64(analytic[j])) > 1e-3*(1+math.Abs(num)) {
			t.Fatalf("%s[%d]: backward %.6g, central difference %.6g", what, j, analytic[j], num)
		}
	}
}

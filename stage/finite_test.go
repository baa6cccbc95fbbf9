package stage

import (
	"math"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// TestFinite: a NaN or an infinity anywhere in a slice of any length (the
// unrolled body, the tail, a span of its own) is found; finite extremes
// are not taken for one.
func TestFinite(t *testing.T) {
	for _, n := range []int{0, 1, 3, 4, 5, 17, kernel.MinSpan*4 + 3} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		if n > 0 {
			x[0], x[n-1] = math.MaxFloat32, -math.MaxFloat32
		}
		if !Finite(x) {
			t.Fatalf("n %d: finite values taken for non-finite", n)
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			for _, at := range []int{0, n / 2, n - 1} {
				if n == 0 {
					continue
				}
				old := x[at]
				x[at] = bad
				if Finite(x) {
					t.Fatalf("n %d: %v at %d not found", n, bad, at)
				}
				x[at] = old
			}
		}
	}
}

// TestFirstNonFinite: the first op in order with a bad value is named, with
// the value; a skipped step's buffers come back.
func TestFirstNonFinite(t *testing.T) {
	g := small(t, "mlp")
	ex, err := NewExecutor(g, allOps(g), 1)
	if err != nil {
		t.Fatal(err)
	}
	if op, what := ex.FirstNonFinite(); op != "" || !ex.GradsFinite() {
		t.Fatalf("a fresh executor: %q %q", op, what)
	}
	names := ex.ParamNames()
	last := names[len(names)-1]
	ex.Grads[last].Data[0] = float32(math.Inf(-1))
	op, what := ex.FirstNonFinite()
	if ex.GradsFinite() || op == "" || !strings.Contains(what, `the gradient of "`+last+`" holds -Inf`) {
		t.Fatalf("got %q %q", op, what)
	}
}

// TestSkippedStep: Apply(true) after Compute leaves the parameters and the
// optimizer as they were and the buffers as before the step; the next
// step is the step a trainer that never computed this one makes.
func TestSkippedStep(t *testing.T) {
	g := small(t, "mlp")
	tr, err := NewTrainer(g, TrainOptions{Optimizer: "adam", LR: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := NewTrainer(g, TrainOptions{Optimizer: "adam", LR: 1e-3})
	tr.Ex.Buffers["fake.running_mean"] = &Value[float32]{Shape: []int{2}, Data: []float32{1, 2}}
	before := map[string][]float32{}
	for name, v := range tr.Ex.Params {
		before[name] = append([]float32(nil), v.Data...)
	}
	if _, _, err := tr.Compute(0); err != nil {
		t.Fatal(err)
	}
	tr.Ex.Buffers["fake.running_mean"].Data[0] = 99 // as a forward pass updates batch_norm's
	if err := tr.Apply(true); err != nil {
		t.Fatal(err)
	}
	if b := tr.Ex.Buffers["fake.running_mean"].Data; b[0] != 1 || b[1] != 2 {
		t.Fatalf("buffer after a skipped step: %v", b)
	}
	for name, v := range tr.Ex.Params {
		for i := range v.Data {
			if v.Data[i] != before[name][i] || tr.Ex.Grads[name].Data[i] != 0 {
				t.Fatalf("%s[%d] moved, or its gradient was kept, in a skipped step", name, i)
			}
		}
	}
	delete(tr.Ex.Buffers, "fake.running_mean")
	tr.Step(1)
	ref.Step(1)
	for name, v := range tr.Ex.Params {
		for i := range v.Data {
			if v.Data[i] != ref.Ex.Params[name].Data[i] {
				t.Fatalf("%s[%d]: %v after a skipped step and step 1, %v after step 1 alone (Adam's step count moved?)", name, i, v.Data[i], ref.Ex.Params[name].Data[i])
			}
		}
	}
}

package stage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// The step's contract, which every backend runs (stepContract): EndStep and
// ApplyStep compute what the host's primitives compute from the same
// gradients, in the order step.go gives; the report carries the loss share,
// the norm and the first value that is not finite as it was before
// clipping; a skip undoes the step; a StepComm's failure names its piece.

// backendCase makes a backend for a test, or skips it.
type backendCase struct {
	name string
	make func(t *testing.T) Backend
	tol  float64 // relative, against the host's step on the same gradients
}

func backendCases() []backendCase {
	return []backendCase{
		{"cpu", func(*testing.T) Backend { return CPU() }, 0},
		{"cuda-emulator", func(t *testing.T) Backend { return CUDA(cudatest.Emulator(t)) }, 0}, // the device's optimizer is the host's, bit for bit
		{"cuda", func(t *testing.T) Backend { return CUDA(cudatest.GPU(t)) }, 1e-6},
	}
}

func TestBackendStepContract(t *testing.T) {
	checks := []struct {
		name string
		run  func(t *testing.T, c backendCase)
	}{
		{"MatchesHostStep", stepMatchesHostStep},
		{"ReportsBeforeClipping", stepReportsBeforeClipping},
		{"SkipUndoes", stepSkipUndoes},
		{"CommFailuresNamed", stepCommFailuresNamed},
		{"Misuse", stepMisuse},
	}
	for _, c := range backendCases() {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range checks {
				t.Run(k.name, func(t *testing.T) { k.run(t, c) })
			}
		})
	}
}

// recorder is a StepComm that copies what it is handed and can plant a
// value or fail.
type recorder struct {
	grads   []string             // the names, in the order AllReduce got them
	seen    map[string][]float32 // the gradients AllReduce got, by name
	squares map[string]float64
	names   []string                // the executor's parameter names, to name what AllReduce got
	plant   func([]*Value[float32]) // changes the gradients, as a replica's sum would
	fail    string                  // "all-reduce" or "norm": fail there
}

func (r *recorder) AllReduce(_ context.Context, grads []*Value[float32]) error {
	if r.fail == "all-reduce" {
		return errors.New("link down")
	}
	r.seen = map[string][]float32{}
	for i, g := range grads {
		r.seen[r.names[i]] = append([]float32(nil), g.Data...)
		r.grads = append(r.grads, r.names[i])
	}
	if r.plant != nil {
		r.plant(grads)
		for i, g := range grads {
			r.seen[r.names[i]] = append([]float32(nil), g.Data...)
		}
	}
	return nil
}

func (r *recorder) PoolNorms(_ context.Context, squares map[string]float64) (float64, error) {
	if r.fail == "norm" {
		return 0, errors.New("peer gone")
	}
	r.squares = maps.Clone(squares)
	return GlobalNorm(squares), nil
}

// stepTrainer is a trainer of the small mlp on c's backend.
func stepTrainer(t *testing.T, c backendCase, o TrainOptions) *Trainer {
	t.Helper()
	tr, err := NewTrainer(small(t, "mlp"), o, c.make(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Ex.Close() })
	return tr
}

// runPasses runs step's micro-batches forward and backward (what the
// Trainer does before EndStep) and returns Σ weight·loss in Forward's order.
func runPasses(t *testing.T, tr *Trainer, step int) float64 {
	t.Helper()
	batch, err := tr.Source.Inputs(step, tr.batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, loss := tr.batch/tr.mbs, tr.G.Op(tr.G.Loss()).Name
	weight := float32(b) / float32(tr.batch)
	var sum float64
	for j := 0; j < tr.mbs; j++ {
		feeds := map[string]*Value[float32]{}
		for name, v := range batch {
			feeds[name] = SliceRows(v, j*b, (j+1)*b)
		}
		out, err := tr.Ex.Forward(j, Position{Step: step, Sample: j * b}, feeds)
		if err != nil {
			t.Fatal(err)
		}
		sum += float64(weight) * float64(lossOf(t, tr.Ex, j, out[loss]))
		seed := &Value[float32]{Shape: []int{1}, Data: []float32{weight}}
		if _, err := tr.Ex.Backward(j, map[string]*Value[float32]{loss: seed}, true); err != nil {
			t.Fatal(err)
		}
	}
	return sum
}

func copyValues(vals map[string]*Value[float32]) map[string]*Value[float32] {
	out := make(map[string]*Value[float32], len(vals))
	for name, v := range vals {
		out[name] = v.Clone()
	}
	return out
}

// stepMatchesHostStep: two steps of SGD with momentum and clipping equal
// the host's primitives (SquaredNorms, GlobalNorm, ClipCoef, ScaleGrads,
// the catalogue's optimizer) run on the gradients the StepComm was handed,
// in parameter-name order; the report's loss is the passes' Σ weight·loss.
func stepMatchesHostStep(t *testing.T, c backendCase) {
	o := TrainOptions{Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3, ClipGradNorm: 0.05, MicroBatch: 2}
	tr := stepTrainer(t, c, o)
	ref, err := NewOptimizer(o)
	if err != nil {
		t.Fatal(err)
	}
	params := copyValues(tr.Ex.State())
	for step := 0; step < 2; step++ {
		loss := runPasses(t, tr, step)
		comm := &recorder{names: tr.Ex.ParamNames()}
		rep, err := tr.Ex.EndStep(context.Background(), step, comm)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(comm.grads, ",") != strings.Join(tr.Ex.ParamNames(), ",") {
			t.Fatalf("AllReduce got %v, want the parameters in name order", comm.grads)
		}
		grads := map[string]*Value[float32]{}
		for name, g := range comm.seen {
			grads[name] = &Value[float32]{Shape: tr.Ex.Params[name].Shape, Data: g}
		}
		norm := GlobalNorm(SquaredNorms(grads))
		if rep.Loss != loss || rep.GradNorm != norm || rep.NonFinite != "" || !maps.Equal(comm.squares, SquaredNorms(grads)) {
			t.Fatalf("step %d: report %+v, want loss %v and norm %v, all finite", step, rep, loss, norm)
		}
		ScaleGrads(grads, ClipCoef(o.ClipGradNorm, norm))
		ref.Step(onlyParams(params, grads), grads, o.Rate(step))
		if err := tr.Ex.ApplyStep(false); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range params {
		closeTo(t, name, hostState(t, tr.Ex)[name].Data, want.Data, c.tol)
	}
}

// hostState is the executor's parameters and buffers brought to the host.
func hostState(t *testing.T, ex *Executor) map[string]*Value[float32] {
	t.Helper()
	st, err := ex.HostState()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// lossOf is micro-batch mb's loss as its training Forward left it: on the
// host, or on the device, where a CUDA executor keeps it for the step.
func lossOf(t *testing.T, ex *Executor, mb int, v *Value[float32]) float32 {
	t.Helper()
	if v.Data != nil {
		return v.Data[0]
	}
	cb := ex.be.(*cudaBackend)
	var x [1]float32
	if err := kernel.OnDevice(cb.d, nil, func(s *kernel.Scope) { s.Down(x[:], cb.dev.mbs[mb].vals[v]) }); err != nil {
		t.Fatal(err)
	}
	return x[0]
}

// onlyParams is params' entries that have a gradient.
func onlyParams(params, grads map[string]*Value[float32]) map[string]*Value[float32] {
	out := map[string]*Value[float32]{}
	for name := range grads {
		out[name] = params[name]
	}
	return out
}

func closeTo(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*math.Abs(float64(want[i])) {
			t.Fatalf("%s[%d] = %v, the host's step gives %v", name, i, got[i], want[i])
		}
	}
}

// stepReportsBeforeClipping: a -Inf a replica's sum brings is found by the
// check, with clipping (from the squared norms) and without, named as it
// was (clipping by a norm that is not finite would make it NaN), and
// GradsFinite and FirstNonFinite answer from the check until ApplyStep.
func stepReportsBeforeClipping(t *testing.T, c backendCase) {
	for _, clip := range []float64{0.1, 0} {
		tr := stepTrainer(t, c, TrainOptions{Optimizer: "adam", LR: 1e-3, ClipGradNorm: clip})
		runPasses(t, tr, 0)
		last := tr.Ex.ParamNames()[len(tr.Ex.ParamNames())-1]
		comm := &recorder{names: tr.Ex.ParamNames(), plant: func(g []*Value[float32]) { g[len(g)-1].Data[0] = float32(math.Inf(-1)) }}
		rep, err := tr.Ex.EndStep(context.Background(), 0, comm)
		if err != nil {
			t.Fatal(err)
		}
		want := `the gradient of "` + last + `" holds -Inf`
		if !strings.Contains(rep.NonFinite, want) || clip > 0 && !math.IsNaN(rep.GradNorm) && !math.IsInf(rep.GradNorm, 0) {
			t.Fatalf("clip %v: report %+v: want %q and a norm that is not finite", clip, rep, want)
		}
		if op, what := tr.Ex.FirstNonFinite(); tr.Ex.GradsFinite() || what != want || rep.NonFinite != fmt.Sprintf("op %q: %s", op, what) {
			t.Fatalf("clip %v, between EndStep and ApplyStep: finite %v, first %q %q; want the check's, %q", clip, tr.Ex.GradsFinite(), op, what, rep.NonFinite)
		}
		if err := tr.Ex.ApplyStep(true); err != nil {
			t.Fatal(err)
		}
		if !tr.Ex.GradsFinite() {
			t.Fatal("the gradients are not finite after ApplyStep cleared them")
		}
	}
}

// stepSkipUndoes: ApplyStep(true) leaves the parameters and the optimizer's
// state as they were, puts back the buffers the step's forward passes
// moved (v2Net's batch_norm running statistics), and clears the gradients.
func stepSkipUndoes(t *testing.T, c backendCase) {
	g, err := dag.Load([]byte(v2Net))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(g, TrainOptions{Optimizer: "adam", LR: 1e-3, MicroBatch: 2}, c.make(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Ex.Close()
	if _, _, err := tr.Step(0); err != nil {
		t.Fatal(err)
	}
	before := copyValues(hostState(t, tr.Ex))
	st, n, err := tr.Ex.OptimizerState()
	if err != nil {
		t.Fatal(err)
	}
	runPasses(t, tr, 1)
	if moved := hostState(t, tr.Ex); slices.Equal(moved["bn.running_mean"].Data, before["bn.running_mean"].Data) {
		t.Fatal("the step's forward passes left batch_norm's running mean alone")
	}
	if _, err := tr.Ex.EndStep(context.Background(), 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := tr.Ex.ApplyStep(true); err != nil {
		t.Fatal(err)
	}
	for name, v := range hostState(t, tr.Ex) {
		closeTo(t, name, v.Data, before[name].Data, 0)
	}
	st2, n2, _ := tr.Ex.OptimizerState()
	if n2 != n || len(st2) != len(st) {
		t.Fatalf("the optimizer moved in a skipped step: step %d, %d tensors; was %d, %d", n2, len(st2), n, len(st))
	}
	for slot, v := range st {
		closeTo(t, slot, st2[slot], v, 0)
	}
	if err := tr.Ex.be.fetchGrads(); err != nil {
		t.Fatal(err)
	}
	for name, g := range tr.Ex.Grads {
		for i, x := range g.Data {
			if x != 0 {
				t.Fatalf("gradient %s[%d] = %v after a skipped step", name, i, x)
			}
		}
	}
}

// stepCommFailuresNamed: a failing all-reduce or norm exchange is a
// StepError naming its piece, wrapping the comm's error.
func stepCommFailuresNamed(t *testing.T, c backendCase) {
	for piece, fail := range map[string]string{"all-reduce": "all-reduce", "gradient norm": "norm"} {
		tr := stepTrainer(t, c, TrainOptions{Optimizer: "sgd", LR: 0.1, ClipGradNorm: 1})
		runPasses(t, tr, 0)
		_, err := tr.Ex.EndStep(context.Background(), 0, &recorder{names: tr.Ex.ParamNames(), fail: fail})
		var se *StepError
		if !errors.As(err, &se) || se.Piece != piece || se.Step != 0 || !strings.HasPrefix(err.Error(), piece+": ") {
			t.Fatalf("comm failing at %s: %v, want a StepError naming %q", fail, err, piece)
		}
	}
}

// stepMisuse: no step without an optimizer, no ApplyStep without EndStep.
func stepMisuse(t *testing.T, c backendCase) {
	g := small(t, "mlp")
	ex, err := NewExecutor(g, allOps(g), 1, c.make(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if _, err := ex.EndStep(context.Background(), 0, nil); err == nil {
		t.Error("EndStep without an optimizer")
	}
	if err := ex.SetOptimizer(TrainOptions{Optimizer: "sgd", LR: 0.1}); err != nil {
		t.Fatal(err)
	}
	if err := ex.ApplyStep(false); err == nil {
		t.Error("ApplyStep without EndStep")
	}
	if ex.Backend().Name() != strings.Split(c.name, "-")[0] {
		t.Errorf("backend %q in case %s", ex.Backend().Name(), c.name)
	}
}

// TestUseDeviceCarriesTheOptimizer: moving an executor onto CUDA after
// steps on the CPU keeps its optimizer's state, bit for bit.
func TestUseDeviceCarriesTheOptimizer(t *testing.T) {
	d := cudatest.Emulator(t)
	tr := stepTrainer(t, backendCases()[0], TrainOptions{Optimizer: "adam", LR: 1e-3})
	for s := 0; s < 2; s++ {
		if _, _, err := tr.Step(s); err != nil {
			t.Fatal(err)
		}
	}
	st, n, _ := tr.Ex.OptimizerState()
	if err := tr.Ex.UseDevice(d); err != nil {
		t.Fatal(err)
	}
	st2, n2, _ := tr.Ex.OptimizerState()
	if tr.Ex.Backend().Name() != "cuda" || n2 != n || len(st2) != len(st) || len(st) == 0 {
		t.Fatalf("after UseDevice: %s, step %d with %d tensors; before: step %d with %d", tr.Ex.Backend().Name(), n2, len(st2), n, len(st))
	}
	for slot, v := range st {
		closeTo(t, slot, st2[slot], v, 0)
	}
	if _, _, err := tr.Step(2); err != nil {
		t.Fatal(err)
	}
}

// TestOneBackend: NewExecutor takes at most one backend.
func TestOneBackend(t *testing.T) {
	g := small(t, "mlp")
	if _, err := NewExecutor(g, allOps(g), 1, CPU(), CPU()); err == nil {
		t.Error("two backends taken")
	}
	b := CPU()
	if _, err := NewExecutor(g, allOps(g), 1, b); err != nil {
		t.Fatal(err)
	}
	if _, err := NewExecutor(g, allOps(g), 1, b); err == nil {
		t.Error("one backend bound to two executors")
	}
}

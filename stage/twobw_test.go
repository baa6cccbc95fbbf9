package stage

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor/cuda/cudatest"
)

// twoBWTrainer is a trainer of the small mlp keeping two versions of its
// weights (or one, with two false).
func twoBWTrainer(t *testing.T, o TrainOptions, two bool) *Trainer {
	t.Helper()
	tr, err := NewTrainer(small(t, "mlp"), o)
	if err != nil {
		t.Fatal(err)
	}
	if two {
		if err := tr.Ex.SetTwoVersions(); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// TestTwoVersionsFollowTheUpdateRule is the oracle: the update rule
// W(t+1) = W(t) − lr·g_t(W(t−1)), W(−1) = W(0), applied directly (each
// batch's gradient taken by a plain executor at the weights of one update
// before, the SGD step written out here) against the trainer keeping two
// versions, step by step, parameters and losses; and the trainer without
// two versions (synchronous) ends elsewhere.
func TestTwoVersionsFollowTheUpdateRule(t *testing.T) {
	const lr, steps = 0.1, 5
	o := TrainOptions{Optimizer: "sgd", LR: lr, MicroBatch: 2}
	two := twoBWTrainer(t, o, true)
	sync := twoBWTrainer(t, o, false)
	grader := twoBWTrainer(t, o, false) // takes gradients only: never steps
	cur := cloneValues(grader.Ex.Params)
	prev := cloneValues(cur)
	for step := 0; step < steps; step++ {
		grader.Ex.LoadState(prev)
		want := runPasses(t, grader, step)
		next := map[string]*Value[float32]{}
		for name, w := range cur {
			g := grader.Ex.Grads[name].Data
			n := w.Clone()
			for i := range n.Data {
				n.Data[i] = w.Data[i] - float32(lr)*g[i]
			}
			next[name] = n
		}
		if err := grader.Ex.ZeroGrads(); err != nil {
			t.Fatal(err)
		}
		prev, cur = cur, next
		loss, _, err := two.Step(step)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(loss-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("step %d: loss %v, the rule's (at W(t-1)) %v", step, loss, want)
		}
		if d := maxRelDiff(two.Ex.Params, cur); d > 1e-6 {
			t.Fatalf("step %d: parameters %.3g from the update rule's", step, d)
		}
		if _, _, err := sync.Step(step); err != nil {
			t.Fatal(err)
		}
	}
	if d := maxRelDiff(sync.Ex.Params, cur); d < 1e-4 {
		t.Errorf("synchronous training is within %.3g of the stale rule: the test cannot tell them apart", d)
	}
}

// maxRelDiff is the largest max|a−b|/max|b| over the tensors of b.
func maxRelDiff(a, b map[string]*Value[float32]) float64 {
	worst := 0.0
	for name, w := range b {
		scale, diff := 1e-12, 0.0
		for i, x := range w.Data {
			scale = math.Max(scale, math.Abs(float64(x)))
			diff = math.Max(diff, math.Abs(float64(a[name].Data[i])-float64(x)))
		}
		worst = math.Max(worst, diff/scale)
	}
	return worst
}

// TestTwoVersionsResume: a trainer stopped after 2 steps and rebuilt from
// its parameters and optimizer state (which carries the stale version)
// goes on bit for bit, with Adam; without the stale version it would not.
func TestTwoVersionsResume(t *testing.T) {
	o := TrainOptions{Optimizer: "adam", LR: 0.01, MicroBatch: 4}
	whole := twoBWTrainer(t, o, true)
	for step := 0; step < 2; step++ {
		if _, _, err := whole.Step(step); err != nil {
			t.Fatal(err)
		}
	}
	params, err := whole.Ex.HostState()
	if err != nil {
		t.Fatal(err)
	}
	st, n, err := whole.Ex.OptimizerState()
	if err != nil {
		t.Fatal(err)
	}
	if len(st["mlp.fc0.weight.stale"]) == 0 {
		t.Fatalf("the optimizer state carries no stale version: %d slots", len(st))
	}
	resumed := twoBWTrainer(t, o, true)
	resumed.Ex.LoadState(cloneValues(params))
	if err := resumed.Ex.LoadOptimizerState(st, n); err != nil {
		t.Fatal(err)
	}
	for step := 2; step < 4; step++ {
		for _, tr := range []*Trainer{whole, resumed} {
			if _, _, err := tr.Step(step); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, w := range whole.Ex.Params {
		for i, x := range w.Data {
			if resumed.Ex.Params[name].Data[i] != x {
				t.Fatalf("%s[%d]: resumed %v, uninterrupted %v", name, i, resumed.Ex.Params[name].Data[i], x)
			}
		}
	}
}

// TestTwoVersionsPasses: a stage without the loss runs the next step's
// forwards ahead of the update on the newest weights; a pass two steps
// ahead, and the loss's stage running ahead, are VersionErrors.
func TestTwoVersionsPasses(t *testing.T) {
	g := small(t, "mlp")
	var front []int
	for _, name := range []string{"mlp.fc0", "mlp.relu0"} {
		i, _ := g.OpIndex(name)
		front = append(front, i)
	}
	ex, err := NewExecutor(g, front, g.Seed())
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.SetOptimizer(TrainOptions{Optimizer: "sgd", LR: 0.1}); err != nil {
		t.Fatal(err)
	}
	if err := ex.SetTwoVersions(); err != nil {
		t.Fatal(err)
	}
	data, err := NewDataset(g)
	if err != nil {
		t.Fatal(err)
	}
	feeds := func(step int) map[string]*Value[float32] {
		b, err := data.Inputs(step, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := ex.Forward(0, Position{Step: 0}, feeds(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Forward(1, Position{Step: 1}, feeds(1)); err != nil {
		t.Fatalf("the next step's forward ahead: %v", err)
	}
	var ve *VersionError
	if _, err := ex.Forward(2, Position{Step: 2}, feeds(2)); !errors.As(err, &ve) || ve.Step != 2 || ve.Current != 0 {
		t.Fatalf("two steps ahead: %v, want a VersionError", err)
	}
	whole := twoBWTrainer(t, TrainOptions{Optimizer: "sgd", LR: 0.1}, true)
	b, err := whole.Data.Inputs(0, whole.batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whole.Ex.Forward(0, Position{Step: 0}, b); err != nil {
		t.Fatal(err)
	}
	if _, err := whole.Ex.Forward(1, Position{Step: 1}, b); !errors.As(err, &ve) {
		t.Fatalf("the loss's stage ahead: %v, want a VersionError", err)
	}
}

// TestTwoVersionsRefused: the CUDA backend (the emulator too), buffers and
// selective backprop are refused, each by name.
func TestTwoVersionsRefused(t *testing.T) {
	var ve *VersionError
	dev, err := NewTrainer(small(t, "mlp"), TrainOptions{Optimizer: "sgd", LR: 0.1}, CUDA(cudatest.Emulator(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Ex.Close()
	if err := dev.Ex.SetTwoVersions(); !errors.As(err, &ve) || !strings.Contains(err.Error(), "cuda backend") {
		t.Errorf("cuda: %v", err)
	}
	v2, err := dag.Load([]byte(v2Net))
	if err != nil {
		t.Fatal(err)
	}
	bn, err := NewTrainer(v2, TrainOptions{Optimizer: "sgd", LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if err := bn.Ex.SetTwoVersions(); !errors.As(err, &ve) || !strings.Contains(err.Error(), "bn.running_") {
		t.Errorf("buffers: %v", err)
	}
	sb := twoBWTrainer(t, TrainOptions{Optimizer: "sgd", LR: 0.1}, false)
	sb.Ex.SampleLoss = true
	if err := sb.Ex.SetTwoVersions(); !errors.As(err, &ve) || !strings.Contains(err.Error(), "selective backprop") {
		t.Errorf("selective backprop: %v", err)
	}
}

package stage

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
)

// TestTeacherLabels: the data is the same from every Dataset and for every
// subset of inputs that holds the target, and the teacher's labels are not
// degenerate: cross-entropy classes spread, logits' signs mixed, regression
// targets varied.
func TestTeacherLabels(t *testing.T) {
	for _, name := range []string{"mlp", "mmt", "dlrm", "candle-uno", "case-study", "transformer"} {
		t.Run(name, func(t *testing.T) {
			g := small(t, name)
			a, _ := NewDataset(g)
			b, _ := NewDataset(g)
			const n = 512
			x, err := a.Batch(3, n)
			if err != nil {
				t.Fatal(err)
			}
			y, err := b.Inputs(3, n, map[string]bool{a.target: true})
			if err != nil {
				t.Fatal(err)
			}
			want, got := x[a.target], y[a.target]
			for i := range want.Ints {
				if got.Ints[i] != want.Ints[i] {
					t.Fatalf("label %d: %d from one dataset, %d from another", i, got.Ints[i], want.Ints[i])
				}
			}
			for i := range want.Data {
				if got.Data[i] != want.Data[i] {
					t.Fatalf("target %d: %v from one dataset, %v from another", i, got.Data[i], want.Data[i])
				}
			}
			checkSpread(t, g.Op(g.Loss()).Kind, want)
		})
	}
}

func checkSpread(t *testing.T, kind dag.Kind, v *Value[float32]) {
	t.Helper()
	switch kind {
	case dag.SoftmaxCrossEntropy:
		count := map[int32]int{}
		for _, c := range v.Ints {
			count[c]++
		}
		for c, k := range count {
			if k > len(v.Ints)*6/10 {
				t.Errorf("class %d labels %d of %d samples", c, k, len(v.Ints))
			}
		}
		if len(count) < 2 {
			t.Errorf("one class for every sample")
		}
	case dag.BCEWithLogits:
		ones := 0
		for _, z := range v.Data {
			ones += int(z)
		}
		if ones < len(v.Data)/10 || ones > len(v.Data)*9/10 {
			t.Errorf("%d of %d targets are 1", ones, len(v.Data))
		}
	case dag.MSE:
		var sum, sq float64
		for _, z := range v.Data {
			sum += float64(z)
			sq += float64(z) * float64(z)
		}
		mean := sum / float64(len(v.Data))
		if sd := math.Sqrt(sq/float64(len(v.Data)) - mean*mean); sd < 0.05 {
			t.Errorf("regression targets barely vary: standard deviation %.3g", sd)
		}
	}
}

// TestTeacherIsLearnable: training on the teacher's labels lowers the loss:
// the mean of the last 10 of 60 Adam steps (each on a fresh batch) is below
// 0.93 times the first 10's.
func TestTeacherIsLearnable(t *testing.T) {
	for _, name := range []string{"mlp", "candle-uno"} {
		t.Run(name, func(t *testing.T) {
			g := small(t, name)
			tr, err := NewTrainer(g, TrainOptions{Optimizer: "adam", LR: 1e-3})
			if err != nil {
				t.Fatal(err)
			}
			var first, last float64
			for s := 0; s < 60; s++ {
				l, _, err := tr.Step(s)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case s < 10:
					first += l / 10
				case s >= 50:
					last += l / 10
				}
			}
			t.Logf("mean loss, steps 0-9: %.4f; steps 50-59: %.4f", first, last)
			if last > 0.93*first {
				t.Errorf("the loss did not fall: %.4f, then %.4f", first, last)
			}
		})
	}
}

// TestGenerator: float inputs have mean 0 and variance 1 (within 1% on a
// million values) and stay within ±2√3; int inputs fill their range evenly
// (every value of a range of 10 within 2% of its share); any value is the
// same made alone (the label's taps) as in a whole input.
func TestGenerator(t *testing.T) {
	base := stepBase(12345, 7)
	const n = 1 << 20
	var sum, sq float64
	for i := 0; i < n; i++ {
		x := float64(normalAt(base, i))
		if math.Abs(x) > 2*math.Sqrt(3)+1e-6 {
			t.Fatalf("value %d: %v outside ±2√3", i, x)
		}
		sum += x
		sq += x * x
	}
	mean, variance := sum/n, sq/n-(sum/n)*(sum/n)
	if math.Abs(mean) > 0.01 || math.Abs(variance-1) > 0.01 {
		t.Errorf("mean %.4f, variance %.4f: want 0 and 1", mean, variance)
	}
	rng := [2]int64{-3, 7}
	count := map[int32]int{}
	for i := 0; i < n; i++ {
		count[intAt(base, i, &rng)]++
	}
	for v := int32(-3); v < 7; v++ {
		if share := float64(count[v]) / n; math.Abs(share-0.1) > 0.002 {
			t.Errorf("value %d: share %.4f, want 0.1", v, share)
		}
	}
	if len(count) != 10 {
		t.Errorf("%d distinct values, want 10", len(count))
	}
	g := small(t, "dlrm")
	d, _ := NewDataset(g)
	batch, err := d.Batch(5, 16)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range g.Inputs() {
		if in.Name == d.target { // the teacher's labels
			continue
		}
		v, b := batch[in.Name], stepBase(d.dataKey(in.Name), 5)
		for i := range v.Data {
			if v.Data[i] != normalAt(b, i) {
				t.Fatalf("%s[%d]: %v in the batch, %v alone", in.Name, i, v.Data[i], normalAt(b, i))
			}
		}
		for i := range v.Ints {
			if v.Ints[i] != intAt(b, i, in.Range) {
				t.Fatalf("%s[%d]: %v in the batch, %v alone", in.Name, i, v.Ints[i], intAt(b, i, in.Range))
			}
		}
	}
}

package stage

import (
	"errors"
	"slices"
	"testing"
)

// TestNonFiniteJudge: the rule graphpipe train and the coordinator share,
// step by step: stop at the first bad step, or skip up to MaxSkips in a
// row, a finite step starting the count again.
func TestNonFiniteJudge(t *testing.T) {
	type want struct {
		v       Verdict
		skipped int
	}
	for _, tc := range []struct {
		name  string
		rule  NonFinite
		steps []string // each step's check: "" finite, else where
		want  []want
	}{
		{"stop", NonFinite{}, []string{"", "x", ""}, []want{{StepOn, 0}, {StopRun, 0}, {StepOn, 0}}},
		{"skip within the limit", NonFinite{Skip: true, MaxSkips: 2}, []string{"x", "x", "", "x"},
			[]want{{SkipStep, 0}, {SkipStep, 0}, {StepOn, 0}, {SkipStep, 0}}},
		{"skip past the limit", NonFinite{Skip: true, MaxSkips: 2}, []string{"x", "x", "x"},
			[]want{{SkipStep, 0}, {SkipStep, 0}, {StopRun, 2}}},
		{"a limit of one", NonFinite{Skip: true, MaxSkips: 1}, []string{"x", "", "x", "x"},
			[]want{{SkipStep, 0}, {StepOn, 0}, {SkipStep, 0}, {StopRun, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := tc.rule
			for i, bad := range tc.steps {
				v, n := rule.Judge(bad)
				if (want{v, n}) != tc.want[i] {
					t.Fatalf("step %d (%q): verdict %d, %d skipped; want %+v", i, bad, v, n, tc.want[i])
				}
			}
		})
	}
}

// TestRunJudgesNonFinite: Trainer.Run on a batch gone bad (PoisonEnv at
// step 2) stops there, or skips the step's update (its parameters are those
// before it) and trains on.
func TestRunJudgesNonFinite(t *testing.T) {
	t.Setenv(PoisonEnv, "2:x")
	g := small(t, "mlp")
	o := TrainOptions{Optimizer: "sgd", LR: 0.05}

	tr, err := NewTrainer(g, o)
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Run(Loop{Steps: 5})
	var stop *NonFiniteStop
	if !errors.As(err, &stop) || stop.Step != 3 || stop.What == "" {
		t.Fatalf("stop rule: %v, want a stop at step 3 naming where", err)
	}

	tr, _ = NewTrainer(g, o)
	var skipped []int
	var before, after map[string][]float32
	snapshot := func() map[string][]float32 {
		m := map[string][]float32{}
		for n, v := range tr.Ex.Params {
			m[n] = slices.Clone(v.Data)
		}
		return m
	}
	err = tr.Run(Loop{Steps: 5, NonFinite: NonFinite{Skip: true, MaxSkips: 3}, Stepped: func(r StepResult) error {
		switch r.Step {
		case 1:
			before = snapshot()
		case 2:
			after = snapshot()
		}
		if r.NonFinite != "" {
			skipped = append(skipped, r.Step)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(skipped, []int{2}) {
		t.Fatalf("skipped steps %v, want [2]", skipped)
	}
	for n, v := range before {
		if !slices.Equal(v, after[n]) {
			t.Fatalf("%s changed in the skipped step", n)
		}
	}
}

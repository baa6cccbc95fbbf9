package plan

import (
	"os"
	"testing"
)

// TestScaled: every duration and the predicted iteration scale, the
// simulator agrees with the scaled prediction, and the plan given is left
// alone.
func TestScaled(t *testing.T) {
	data, err := os.ReadFile("testdata/plans/case-study-zb-3cpu.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodePlan(data)
	if err != nil {
		t.Fatal(err)
	}
	before, iter := p.Stages[0].ForwardS, p.Predicted.IterationS
	slow := p.Scaled(3)
	if p.Stages[0].ForwardS != before || p.Predicted.IterationS != iter {
		t.Fatal("Scaled changed the plan it was given")
	}
	for i, st := range slow.Stages {
		was := p.Stages[i]
		if st.ForwardS != 3*was.ForwardS || st.BackwardS != 3*was.BackwardS || st.WeightS != 3*was.WeightS || st.FlushS != 3*was.FlushS {
			t.Errorf("stage %d: %+v from %+v", i, st, was)
		}
	}
	for i, e := range slow.Edges {
		if e.Transfer != 3*p.Edges[i].Transfer {
			t.Errorf("edge %d: %v from %v", i, e.Transfer, p.Edges[i].Transfer)
		}
	}
	r, err := slow.Simulate()
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Iteration/slow.Predicted.IterationS - 1; d > 1e-9 || d < -1e-9 {
		t.Errorf("simulated %v, predicted %v", r.Iteration, slow.Predicted.IterationS)
	}
}

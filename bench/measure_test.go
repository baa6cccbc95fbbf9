package bench

import (
	"testing"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
)

// TestSlowed: every duration and the predicted iteration scale; the plan
// given is left alone.
func TestSlowed(t *testing.T) {
	g, err := Paper("case-study")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := search.Search(g, search.Options{Device: plan.Profiles["v100"], Devices: 4, MicroBatch: 2, Schedule: "zb"})
	if err != nil {
		t.Fatal(err)
	}
	before, iter := plan.Stages[0].ForwardS, plan.Predicted.IterationS
	slow := Slowed(plan, 3)
	if plan.Stages[0].ForwardS != before || plan.Predicted.IterationS != iter {
		t.Fatal("Slowed changed the plan it was given")
	}
	for i, st := range slow.Stages {
		was := plan.Stages[i]
		if st.ForwardS != 3*was.ForwardS || st.BackwardS != 3*was.BackwardS || st.WeightS != 3*was.WeightS || st.FlushS != 3*was.FlushS {
			t.Errorf("stage %d: %+v from %+v", i, st, was)
		}
	}
	for i, e := range slow.Edges {
		if e.Transfer != 3*plan.Edges[i].Transfer {
			t.Errorf("edge %d: %v from %v", i, e.Transfer, plan.Edges[i].Transfer)
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

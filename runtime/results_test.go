package runtime

import (
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestStageTimes: the mean forward and backward (input plus weight
// gradient) per micro-batch of a stage's timeline, beside the plan's; a
// stage without a timeline is left out.
func TestStageTimes(t *testing.T) {
	pl := &plan.Plan{Stages: []plan.PlanStage{{ForwardS: 1, BackwardS: 2, WeightS: 0.5}, {ForwardS: 3}}}
	res := &Result{Events: [][]Event{{
		{Kind: 'F', MB: 0, Start: 0, End: 1}, {Kind: 'F', MB: 1, Start: 1, End: 3},
		{Kind: 'B', MB: 0, Start: 3, End: 4}, {Kind: 'W', MB: 0, Start: 4, End: 5},
		{Kind: 'B', MB: 1, Start: 5, End: 7},
	}}}
	got := StageTimes(pl, res)
	want := []StageTime{{Stage: 0, PredictedForward: 1, MeasuredForward: 1.5, PredictedBackward: 2.5, MeasuredBackward: 2}}
	if len(got) != len(want) || got[0] != want[0] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

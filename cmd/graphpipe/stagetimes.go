package main

import (
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
)

// stageTime sets one stage's measured compute per micro-batch (the mean
// over the last iteration's actions of its replica 0) beside the plan's.
type stageTime struct {
	Stage             int     `json:"stage"`
	PredictedForward  float64 `json:"predicted_forward_s"`
	MeasuredForward   float64 `json:"measured_forward_s"`
	PredictedBackward float64 `json:"predicted_backward_s"` // input and weight gradients
	MeasuredBackward  float64 `json:"measured_backward_s"`
}

// stageTimes compares each stage's planned and measured compute: where a
// run's iteration misses its prediction, this says which stage and pass.
// Stages without a timeline (none reported) are left out.
func stageTimes(plan *plan.Plan, res *runtime.Result) []stageTime {
	var out []stageTime
	for s, st := range plan.Stages {
		if s >= len(res.Events) || len(res.Events[s]) == 0 {
			continue
		}
		var f, b float64
		var nf int
		for _, e := range res.Events[s] {
			switch microbatch.Kind(e.Kind) {
			case microbatch.Forward:
				f += e.End - e.Start
				nf++
			case microbatch.Backward, microbatch.Weight:
				b += e.End - e.Start
			}
		}
		if nf == 0 {
			continue
		}
		out = append(out, stageTime{Stage: s, PredictedForward: st.ForwardS, MeasuredForward: f / float64(nf),
			PredictedBackward: st.BackwardS + st.WeightS, MeasuredBackward: b / float64(nf)})
	}
	return out
}

package runtime

import (
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
)

// Timeline is the last iteration's measured timeline in the simulator's
// terms: every stage's forwards, backwards, weight gradients, sends and
// receives (replica 0's), each stage weighing its devices in the bubble.
// It draws and traces as a simulated one does.
func (r *Result) Timeline(plan *plan.Plan) *microbatch.Result {
	var evs []microbatch.Event
	for s, es := range r.Events {
		for _, e := range es {
			evs = append(evs, microbatch.Event{Stage: s, Kind: microbatch.Kind(e.Kind), MB: e.MB, Edge: e.Edge, Dir: microbatch.Dir(e.Dir), Start: e.Start, End: e.End})
		}
	}
	devices := make([]int, len(plan.Stages))
	for s, st := range plan.Stages {
		devices[s] = len(st.Devices)
	}
	return microbatch.Timeline(evs, len(plan.Stages), devices)
}

// StageTime sets one stage's measured compute per micro-batch (the mean
// over the last iteration's actions of its replica 0) beside the plan's.
type StageTime struct {
	Stage             int     `json:"stage"`
	PredictedForward  float64 `json:"predicted_forward_s"`
	MeasuredForward   float64 `json:"measured_forward_s"`
	PredictedBackward float64 `json:"predicted_backward_s"` // input and weight gradients
	MeasuredBackward  float64 `json:"measured_backward_s"`
}

// StageTimes compares each stage's planned and measured compute: where a
// run's iteration misses its prediction, this says which stage and pass.
// Stages without a timeline (none reported) are left out.
func StageTimes(plan *plan.Plan, res *Result) []StageTime {
	var out []StageTime
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
		out = append(out, StageTime{Stage: s, PredictedForward: st.ForwardS, MeasuredForward: f / float64(nf),
			PredictedBackward: st.BackwardS + st.WeightS, MeasuredBackward: b / float64(nf)})
	}
	return out
}

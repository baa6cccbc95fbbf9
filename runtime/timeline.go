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

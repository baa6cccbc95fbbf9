package runtime

import (
	"context"
	"time"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Event is one measured action of a stage, in seconds from its iteration's
// start: a forward, backward or weight gradient, or the call that sends or
// receives a micro-batch's tensors along an edge (Edge and Dir).
type Event struct {
	Kind  byte    `json:"kind"`
	MB    int     `json:"mb"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	Edge  int     `json:"edge,omitempty"`
	Dir   byte    `json:"dir,omitempty"`
}

// timeline is what a worker measures of an iteration as it runs: when it
// began, by which its actions are timed and its emulated waits end, its
// actions' events, and what it asked of its device. Only the worker's
// goroutine uses it.
type timeline struct {
	zero   time.Time
	events []Event // this iteration's
	// calls is what the worker asked of its device in the last iteration
	// whose update is done (from its first action to its optimizer step),
	// nil on the CPU; callsAt the counts as the iteration began.
	calls   *cuda.Counts
	callsAt cuda.Counts
}

// begin starts an iteration's timeline now, on dev (nil: the CPU).
func (tl *timeline) begin(dev *cuda.Device) {
	tl.zero, tl.events = time.Now(), tl.events[:0]
	tl.callsAt = deviceCounts(dev)
}

// updated counts what the iteration asked of dev, once its update is done.
func (tl *timeline) updated(dev *cuda.Device) {
	if dev != nil {
		c := deviceCounts(dev).Sub(tl.callsAt)
		tl.calls = &c
	}
}

// deviceCounts is dev's counts so far (zero on the CPU), read with the
// device taken: workers of one process may share it, and then each one's
// calls include the others'.
func deviceCounts(dev *cuda.Device) cuda.Counts {
	if dev == nil {
		return cuda.Counts{}
	}
	defer dev.Exclusive()()
	return dev.Counts()
}

// record adds action a, which began at start and ends now.
func (tl *timeline) record(a microbatch.Action, start time.Time) {
	tl.events = append(tl.events, Event{Kind: byte(a.Kind), MB: a.MB, Start: start.Sub(tl.zero).Seconds(), End: time.Since(tl.zero).Seconds(),
		Edge: a.Edge, Dir: byte(a.Dir)})
}

// now is the seconds since the iteration began.
func (tl *timeline) now() float64 { return time.Since(tl.zero).Seconds() }

// at is the seconds from the iteration's start to t.
func (tl *timeline) at(t time.Time) float64 { return t.Sub(tl.zero).Seconds() }

// wallClock is the time t seconds into the iteration.
func (tl *timeline) wallClock(t float64) time.Time {
	return tl.zero.Add(time.Duration(t * float64(time.Second)))
}

// sleepUntil sleeps until t seconds into the iteration, or ctx ends.
func (tl *timeline) sleepUntil(ctx context.Context, t float64) {
	d := time.Until(tl.wallClock(t))
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// last is a copy of the events of the last iteration the worker finished.
func (tl *timeline) last() []Event { return append([]Event(nil), tl.events...) }

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

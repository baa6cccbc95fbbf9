package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// TestTimeline: a run's measured timeline holds every action of the last
// iteration's schedule once, on its stage: each stage's forwards, backwards,
// weight gradients, sends and receives (with their edges), one at a time,
// within the iteration.
func TestTimeline(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: 3, Schedule: "zb", MicroBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunLocal(ctx, &Job{Run: "tl", Graph: g, Plan: plan, Steps: 2, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}}}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	tl := res.Timeline(plan)
	sch, err := plan.ScheduleOf()
	if err != nil {
		t.Fatal(err)
	}
	want := map[microbatch.Event]int{} // stage, kind, micro-batch, edge, direction
	for s, l := range sch.Lists {
		for _, a := range l {
			want[microbatch.Event{Stage: s, Kind: a.Kind, MB: a.MB, Edge: a.Edge, Dir: a.Dir}]++
		}
	}
	last := map[int]float64{}
	for _, ev := range tl.Events {
		key := microbatch.Event{Stage: ev.Stage, Kind: ev.Kind, MB: ev.MB, Edge: ev.Edge, Dir: ev.Dir}
		if want[key] == 0 {
			t.Fatalf("event %+v is not in the schedule, or twice", ev)
		}
		want[key]--
		if ev.Start < last[ev.Stage] || ev.End < ev.Start || ev.End > tl.Iteration {
			t.Fatalf("event %+v overlaps its stage's previous one (ending at %v) or the iteration's end (%v)", ev, last[ev.Stage], tl.Iteration)
		}
		last[ev.Stage] = ev.End
	}
	for k, n := range want {
		if n != 0 {
			t.Errorf("%+v: %d missing from the timeline", k, n)
		}
	}
	if tl.Bubble <= 0 || tl.Bubble >= 1 || len(tl.Busy) != len(plan.Stages) {
		t.Errorf("bubble %v, busy %v", tl.Bubble, tl.Busy)
	}
}

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

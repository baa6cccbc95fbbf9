package runtime

import (
	"errors"
	"testing"

	"github.com/graphpipe/graphpipe/stage"
)

// TestJobValidate: a whole job passes; each broken field is refused with a
// *JobError naming that field.
func TestJobValidate(t *testing.T) {
	g, plan := smallPlan(t, "mlp", 2, 8)
	_, other := smallPlan(t, "case-study", 2, 8)
	good := func() *Job {
		return &Job{Run: "r1", Graph: g, Plan: plan, Steps: 3, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.1}}}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("a whole job: %v", err)
	}
	for _, tc := range []struct {
		field string
		spoil func(j *Job)
	}{
		{"Run", func(j *Job) { j.Run = "" }},
		{"Run", func(j *Job) { j.Run = "a..b" }},
		{"Run", func(j *Job) { j.Run = "a*b" }},
		{"Graph", func(j *Job) { j.Graph = nil }},
		{"Plan", func(j *Job) { j.Plan = nil }},
		{"Plan", func(j *Job) { j.Plan = other }},
		{"Steps", func(j *Job) { j.Steps = 0 }},
		{"Options.CheckpointEvery", func(j *Job) { j.Options.CheckpointEvery = 2 }},
		{"Options.CheckpointEvery", func(j *Job) { j.Options.CheckpointEvery, j.Options.CheckpointDir = -1, "ck" }},
		{"Options.OnNonFinite", func(j *Job) { j.Options.OnNonFinite = "retry" }},
		{"Options.MaxSkips", func(j *Job) { j.Options.MaxSkips = -1 }},
		{"Options.JoinTimeout", func(j *Job) { j.Options.JoinTimeout = -1 }},
		{"Options.Init", func(j *Job) { j.Options.Init = true }},
		{"Options.Resume", func(j *Job) { j.Options.Resume = &Checkpoint{Manifest: Manifest{Step: 3}} }},
		{"Local.Restarts", func(j *Job) { j.Local.Restarts = -1 }},
		{"Local.Outputs.Dump", func(j *Job) { j.Options.Emulate, j.Local.Outputs.Dump = true, "d" }},
		{"Local.Outputs.Profile", func(j *Job) { j.Options.Emulate, j.Local.Outputs.Profile = true, "p" }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			j := good()
			tc.spoil(j)
			var je *JobError
			if err := j.Validate(); !errors.As(err, &je) || je.Field != tc.field {
				t.Fatalf("got %v, want a JobError on %s", err, tc.field)
			}
		})
	}
}

// TestSlots: one slot per device of the plan, in worker id order, each on
// its device's node.
func TestSlots(t *testing.T) {
	_, plan := smallPlan(t, "candle-uno", 6, 8)
	plan.DevicesPerNode = 2
	slots := Slots(plan)
	if len(slots) != Workers(plan) || len(slots) != 6 {
		t.Fatalf("%d slots for %d workers", len(slots), Workers(plan))
	}
	lay := layout(plan)
	for i, s := range slots {
		st, r := lay.where(i)
		if s.Worker != i || s.Stage != st || s.Replica != r || s.Device != plan.Stages[st].Devices[r] || s.Node != s.Device/2 {
			t.Errorf("slot %d: %+v", i, s)
		}
	}
}

package supervise

import (
	"errors"
	"testing"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
)

// TestJobValidate: a whole job passes; a broken field of runtime.Job or of
// Local is refused with a *runtime.JobError naming that field.
func TestJobValidate(t *testing.T) {
	g, plan := smallPlan(t, "mlp", 2, 8)
	good := func() *Job {
		return &Job{Job: runtime.Job{Run: "r1", Graph: g, Plan: plan, Steps: 3, Options: runtime.Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.1}}}}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("a whole job: %v", err)
	}
	for _, tc := range []struct {
		field string
		spoil func(j *Job)
	}{
		{"Steps", func(j *Job) { j.Steps = 0 }},
		{"Config.JoinTimeout", func(j *Job) { j.Config.JoinTimeout = -1 }},
		{"Local.Restarts", func(j *Job) { j.Local.Restarts = -1 }},
		{"Local.Outputs.Dump", func(j *Job) { j.Options.Emulate, j.Local.Outputs.Dump = true, "d" }},
		{"Local.Outputs.Profile", func(j *Job) { j.Options.Emulate, j.Local.Outputs.Profile = true, "p" }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			j := good()
			tc.spoil(j)
			var je *runtime.JobError
			if err := j.Validate(); !errors.As(err, &je) || je.Field != tc.field {
				t.Fatalf("got %v, want a JobError on %s", err, tc.field)
			}
		})
	}
}

// TestSlots: one slot per device of the plan, in worker id order, each on
// its device's node, of the plan's device profile and needing its stage's
// peak memory.
func TestSlots(t *testing.T) {
	_, plan := smallPlan(t, "candle-uno", 6, 8)
	plan.DevicesPerNode = 2
	slots := Slots(plan)
	if len(slots) != runtime.Workers(plan) || len(slots) != 6 {
		t.Fatalf("%d slots for %d workers", len(slots), runtime.Workers(plan))
	}
	i := 0
	for st, s := range plan.Stages {
		for r, d := range s.Devices {
			if got := slots[i]; got != (Slot{Worker: i, Stage: st, Replica: r, Device: d, Node: d / 2, Profile: plan.Device.Name, Memory: s.PeakBytes}) {
				t.Errorf("slot %d: %+v", i, got)
			}
			i++
		}
	}
}

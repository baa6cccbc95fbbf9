package runtime

import (
	"errors"
	"testing"
	"time"

	planpkg "github.com/graphpipe/graphpipe/plan"
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
		{"Plan", func(j *Job) { // weight streaming, which the runtime does not do
			q := *plan
			q.Stages = append([]planpkg.PlanStage(nil), plan.Stages...)
			q.Stages[0].OptimizerState, q.Stages[0].StreamWeights = planpkg.StateHost, true
			j.Plan = &q
		}},
		{"Options.CheckpointEvery", func(j *Job) { j.Options.CheckpointEvery = 2 }},
		{"Options.CheckpointEvery", func(j *Job) { j.Options.CheckpointEvery, j.Config.CheckpointDir = -1, "ck" }},
		{"Options.OnNonFinite", func(j *Job) { j.Options.OnNonFinite = "retry" }},
		{"Options.Init", func(j *Job) { j.Options.Init = true }},
		{"Options.Init", func(j *Job) {
			j.Options.Init, j.Options.Emulate, j.Config.Resume = true, true, &Checkpoint{}
		}},
		{"Config.MaxSkips", func(j *Job) { j.Config.MaxSkips = -1 }},
		{"Config.JoinTimeout", func(j *Job) { j.Config.JoinTimeout = -1 }},
		{"Config.Resume", func(j *Job) { j.Config.Resume = &Checkpoint{Manifest: Manifest{Step: 3}} }},
		{"Config.Timings.HeartbeatEvery", func(j *Job) { j.Config.Timings.HeartbeatEvery = -1 }},
		{"Config.Timings.ConfirmTimeout", func(j *Job) { j.Config.Timings.ConfirmTimeout = -time.Second }},
		{"Config.Timings.HeartbeatTimeout", func(j *Job) { j.Config.Timings.HeartbeatTimeout = 900 * time.Millisecond }},
		{"Config.Timings.HeartbeatTimeout", func(j *Job) {
			j.Config.Timings = Timings{HeartbeatEvery: time.Second, HeartbeatTimeout: 1500 * time.Millisecond}
		}},
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

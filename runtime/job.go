package runtime

import (
	"fmt"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/stage"
)

// Job is one training run as one value. What every worker is sent: the
// model (Graph, its seed included), the Plan, the Steps and the Options
// (training, data spec, checkpoint interval, where it starts), less the
// Options fields marked json:"-", which belong to the coordinator or to a
// worker process. What stays with the coordinator: Local.
type Job struct {
	Run     string // the run's ID: every subject of the run is scoped by it
	Graph   *dag.Graph
	Plan    *plan.Plan
	Steps   int // the iterations the run ends after, counted from 0
	Options Options
	Local   Local
}

// Local is what of a job never leaves its coordinator.
type Local struct {
	// Restarts is how many more generations may start after one fails
	// (from the last checkpoint, or from the start).
	Restarts int
	// Outputs are the files written once the run has ended.
	Outputs Outputs
}

// Outputs are a finished run's files; an empty path writes nothing.
type Outputs struct {
	Dump     string // a directory: init, data, final parameters, losses (graphpipe train --dump's)
	Trace    string // the last iteration's measured timeline, Chrome trace JSON
	Timeline string // the same drawn as a chart (.svg or .png)
	Profile  string // each op's time per stage and pass, a pprof profile
	// DumpData is the training data a dump writes; nil: the model's
	// synthetic data.
	DumpData stage.Source
}

// JobError is a job refused before anything starts: Field names the Job
// field at fault (as "Options.CheckpointEvery" or "Local.Outputs.Dump").
type JobError struct {
	Op    string // what refused it: "job"
	Field string
	Msg   string
}

func (e *JobError) Error() string { return fmt.Sprintf("%s: %s: %s", e.Op, e.Field, e.Msg) }

func jobErr(field, format string, args ...any) *JobError {
	return &JobError{Op: "job", Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate is the one place a job is checked whole: every refusal is a
// *JobError naming the field.
func (j *Job) Validate() error {
	badID := CheckRunID(j.Run)
	switch {
	case j.Run == "":
		return jobErr("Run", "empty")
	case badID != nil:
		return jobErr("Run", "%q: %v", j.Run, badID)
	case j.Graph == nil:
		return jobErr("Graph", "no model")
	case j.Plan == nil:
		return jobErr("Plan", "no plan")
	}
	if h := dag.ModelHash(j.Graph); h != j.Plan.Model.SHA256 {
		return jobErr("Plan", "made for model %q with hash %.12s, this model's is %.12s", j.Plan.Model.Name, j.Plan.Model.SHA256, h)
	}
	if j.Steps < 1 {
		return jobErr("Steps", "must be positive, got %d", j.Steps)
	}
	if err := j.validateOptions(); err != nil {
		return err
	}
	return j.validateLocal()
}

func (j *Job) validateOptions() error {
	o := &j.Options
	switch {
	case o.CheckpointEvery < 0 || o.CheckpointEvery > 0 && o.CheckpointDir == "":
		return jobErr("Options.CheckpointEvery", "needs a checkpoint directory and a positive count, got %d", o.CheckpointEvery)
	case o.OnNonFinite != "" && o.OnNonFinite != NonFiniteStop && o.OnNonFinite != NonFiniteSkip:
		return jobErr("Options.OnNonFinite", "must be %q or %q, got %q", NonFiniteStop, NonFiniteSkip, o.OnNonFinite)
	case o.MaxSkips < 0:
		return jobErr("Options.MaxSkips", "must be at least 0, got %d", o.MaxSkips)
	case o.JoinTimeout < 0:
		return jobErr("Options.JoinTimeout", "must be at least 0, got %v", o.JoinTimeout)
	case o.Init && o.Resume == nil:
		return jobErr("Options.Init", "set without the initial values (Options.Resume)")
	case o.Init && o.Emulate:
		return jobErr("Options.Init", "an emulated run computes nothing to initialise")
	case o.Resume != nil && o.Resume.Manifest.Step >= j.Steps:
		return jobErr("Options.Resume", "the checkpoint is at step %d, past Steps %d", o.Resume.Manifest.Step, j.Steps)
	}
	return nil
}

func (j *Job) validateLocal() error {
	l := &j.Local
	switch {
	case l.Restarts < 0:
		return jobErr("Local.Restarts", "must be at least 0, got %d", l.Restarts)
	case j.Options.Emulate && l.Outputs.Dump != "":
		return jobErr("Local.Outputs.Dump", "an emulated run computes nothing to dump")
	case j.Options.Emulate && l.Outputs.Profile != "":
		return jobErr("Local.Outputs.Profile", "an emulated run computes nothing to profile")
	}
	return nil
}

// Workers is how many workers a generation of plan takes: one per device (a
// data-parallel stage runs as replicas).
func Workers(plan *plan.Plan) int { return layout(plan).total }

// CheckRunID refuses a run ID that cannot be part of a NATS subject. Every
// subject of a run starts graphpipe.RUN., and dots are allowed, so a run
// named alice.exp1 lives under graphpipe.alice.>, which a NATS permission
// can grant to one user alone.
func CheckRunID(id string) error {
	for _, tok := range strings.Split(id, ".") {
		if tok == "" {
			return fmt.Errorf("a run ID is dot-separated names, none of them empty")
		}
		for _, c := range tok {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q: a run ID holds letters, digits, '-', '_' and dots", c)
			}
		}
	}
	return nil
}

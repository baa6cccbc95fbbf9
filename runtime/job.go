package runtime

import (
	"errors"
	"fmt"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// Job is one training run as one value, passed down whole: what its
// coordinator and every worker share (Run, the model in Graph with its
// seed, the Plan, the Steps, and Options, which each worker is sent with
// its stage) and what stays in the process that holds it (Config: the
// coordinator's stop, callbacks and checkpoints, a worker's device, the
// timings and test hooks). A supervisor's job (runtime/supervise.Job) adds
// what only it uses: restarts and output files.
type Job struct {
	Run     string // the run's ID: every subject of the run is scoped by it
	Graph   *dag.Graph
	Plan    *plan.Plan
	Steps   int // the iterations the run ends after, counted from 0
	Options Options
	Config  Config
}

// JobError is a job refused before anything starts: Field names the Job
// field at fault (as "Options.CheckpointEvery" or "Config.JoinTimeout").
type JobError struct {
	Op    string // what refused it: "job"
	Field string
	Msg   string
	Err   error // the typed error it stands for, if any (a *plan.ModelMismatchError)
}

func (e *JobError) Error() string { return fmt.Sprintf("%s: %s: %s", e.Op, e.Field, e.Msg) }

func (e *JobError) Unwrap() error { return e.Err }

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
	var mm *plan.ModelMismatchError
	if errors.As(j.Plan.CheckModelHash("job", j.Graph), &mm) {
		return &JobError{Op: "job", Field: "Plan", Msg: mm.Reason(), Err: mm}
	}
	if j.Steps < 1 {
		return jobErr("Steps", "must be positive, got %d", j.Steps)
	}
	for _, st := range j.Plan.Stages {
		if st.StreamWeights && !j.Options.Emulate {
			return jobErr("Plan", "stage %d streams its weights from host memory, which the runtime does not do yet: search again for a run (graphpipe run plans without streaming)", st.ID)
		}
	}
	if err := j.validateOptions(); err != nil {
		return err
	}
	if err := j.validateTwoBW(); err != nil {
		return err
	}
	return j.validateConfig()
}

func (j *Job) validateOptions() error {
	o, c := &j.Options, &j.Config
	switch {
	case o.CheckpointEvery < 0 || o.CheckpointEvery > 0 && c.CheckpointDir == "":
		return jobErr("Options.CheckpointEvery", "needs a checkpoint directory and a positive count, got %d", o.CheckpointEvery)
	case o.OnNonFinite != "" && o.OnNonFinite != NonFiniteStop && o.OnNonFinite != NonFiniteSkip:
		return jobErr("Options.OnNonFinite", "must be %q or %q, got %q", NonFiniteStop, NonFiniteSkip, o.OnNonFinite)
	case o.Init && c.Resume == nil:
		return jobErr("Options.Init", "set without the initial values (Config.Resume)")
	case o.Init && o.Emulate:
		return jobErr("Options.Init", "an emulated run computes nothing to initialise")
	}
	return j.validateSelective()
}

func (j *Job) validateConfig() error {
	c := &j.Config
	switch {
	case c.MaxSkips < 0:
		return jobErr("Config.MaxSkips", "must be at least 0, got %d", c.MaxSkips)
	case c.JoinTimeout < 0:
		return jobErr("Config.JoinTimeout", "must be at least 0, got %v", c.JoinTimeout)
	case c.Resume != nil && c.Resume.Manifest.Step >= j.Steps:
		return jobErr("Config.Resume", "the checkpoint is at step %d, past Steps %d", c.Resume.Manifest.Step, j.Steps)
	}
	return c.Timings.check("Config.Timings.")
}

// From is the first iteration the job runs: its checkpoint's step when it
// resumes, else 0.
func (j *Job) From() int {
	if j.Config.Resume != nil {
		return j.Config.Resume.Manifest.Step
	}
	return 0
}

// gen is the job's generation: Config.Gen, at least 1.
func (j *Job) gen() uint32 { return max(j.Config.Gen, 1) }

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

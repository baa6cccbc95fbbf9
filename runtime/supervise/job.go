package supervise

import (
	"fmt"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
)

// Job is one training run as a Supervisor runs it: the runtime's Job (what
// the coordinator and every worker share, and this process's Config) and
// Local, what only the supervisor uses. JobError fields name runtime.Job's
// fields as they are promoted here ("Options.CheckpointEvery") and Local's
// under it ("Local.Restarts").
type Job struct {
	runtime.Job
	Local Local
}

// Local is what of a job never leaves its supervisor.
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

// Validate is the one place a job is checked whole (runtime.Job.Validate,
// then Local): every refusal is a *runtime.JobError naming the field.
func (j *Job) Validate() error {
	if err := j.Job.Validate(); err != nil {
		return err
	}
	l, emulated := &j.Local, j.Options.Emulate
	switch {
	case l.Restarts < 0:
		return jobErr("Local.Restarts", "must be at least 0, got %d", l.Restarts)
	case emulated && l.Outputs.Dump != "":
		return jobErr("Local.Outputs.Dump", "an emulated run computes nothing to dump")
	case emulated && l.Outputs.Profile != "":
		return jobErr("Local.Outputs.Profile", "an emulated run computes nothing to profile")
	}
	return nil
}

func jobErr(field, msg string, args ...any) *runtime.JobError {
	return &runtime.JobError{Op: "job", Field: field, Msg: fmt.Sprintf(msg, args...)}
}

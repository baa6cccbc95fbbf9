package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/graphpipe/graphpipe/plan"
)

// Launcher starts and ends the workers of a run's generations. The
// supervisor drives three: local worker processes (LocalLauncher), workers
// started elsewhere (ExternalLauncher) and agents taken from a pool
// (PoolLauncher). A launcher may be asked for any number of generations,
// each with its own plan and slots.
type Launcher interface {
	// Start brings up gen's workers, one per slot, each joining generation
	// gen.Gen of gen.Run. It calls gen.Lost when a worker is lost before
	// the generation ends; ctx ends with the generation.
	Start(ctx context.Context, gen *Generation) error
	// Stop ends gen's workers: at once when the generation failed,
	// otherwise once they have left (briefly waited for).
	Stop(gen *Generation, failed bool)
	// Close gives back what the launcher still holds once the run is over.
	Close() error
}

// Generation is one attempt at a job: a plan, the workers it takes (Slots)
// and the step it starts from. A restart is a new generation, whose plan
// and workers may differ from the last one's.
type Generation struct {
	Run   string
	Gen   uint32
	Plan  *plan.Plan
	Slots []Slot
	From  int // the step it starts at
	// Lost is how a launcher reports a worker lost mid-generation: the
	// generation fails with err.
	Lost func(err error)
}

// Slot is one worker of a generation: a replica of a stage, on one of the
// plan's devices, on one of its nodes (Device / DevicesPerNode).
type Slot struct {
	Worker  int `json:"worker"` // the worker id, the coordinator's numbering
	Stage   int `json:"stage"`
	Replica int `json:"replica"`
	Device  int `json:"device"`
	Node    int `json:"node"`
}

// Slots are plan's workers in worker id order.
func Slots(plan *plan.Plan) []Slot {
	var out []Slot
	per := max(plan.DevicesPerNode, 1)
	for s, st := range plan.Stages {
		for r, d := range st.Devices {
			out = append(out, Slot{Worker: len(out), Stage: s, Replica: r, Device: d, Node: d / per})
		}
	}
	return out
}

// Supervisor runs a job's generations with a launcher: the first from the
// job's start, each later one, after a failure, from the last checkpoint,
// up to Job.Local.Restarts of them. A failure no restart can mend (the
// data refused, a divergence, a stop asked for, ctx ended) ends it at once.
type Supervisor struct {
	Job      *Job
	T        Transport // the coordinator's connection
	Launcher Launcher
	// Log hears of each restart; nil: nothing said.
	Log io.Writer
	// Progress hears every iteration's loss (Coordinate's progress).
	Progress func(iter int64, loss float64)
	// Starting is told the step each generation starts from; Failed that
	// one has failed, before the error is returned or a restart is made.
	Starting func(from int)
	Failed   func()
}

// Run runs the job to its end and writes its outputs. It returns the result
// and the seconds from the first generation's start to the last one's end.
func (s *Supervisor) Run(ctx context.Context) (*Result, float64, error) {
	if err := s.Job.Validate(); err != nil {
		return nil, 0, err
	}
	defer s.Launcher.Close()
	j := s.Job
	o := j.Options
	var initial *Checkpoint // --init's values: what a restart with no checkpoint starts from
	if o.Init {
		initial = o.Resume
	}
	restarts := j.Local.Restarts
	start := time.Now()
	var res *Result
	for gen := uint32(1); ; gen++ {
		o.Gen = gen
		g := &Generation{Run: j.Run, Gen: gen, Plan: j.Plan, Slots: Slots(j.Plan), From: startStep(o)}
		if s.Starting != nil {
			s.Starting(g.From)
		}
		var err error
		if res, err = s.generation(ctx, g, o); err == nil {
			break
		}
		if IsDataError(err) || ctx.Err() != nil || restarts == 0 || Final(err) {
			return nil, 0, err // no restart reads other data
		}
		restarts--
		o.Resume = initial
		from := "step 0"
		if o.CheckpointDir != "" {
			if c, cerr := LoadCheckpoint(o.CheckpointDir, nil); cerr == nil {
				o.Resume, from = c, fmt.Sprintf("the checkpoint at step %d", c.Manifest.Step)
			}
		}
		if s.Log != nil {
			fmt.Fprintf(s.Log, "graphpipe: %v\ngraphpipe: restarting the workers as generation %d from %s (%d restarts left)\n", err, gen+1, from, restarts)
		}
	}
	secs := time.Since(start).Seconds()
	if err := j.Local.Outputs.write(j, res, initial); err != nil {
		return nil, 0, err
	}
	return res, secs, nil
}

// generation runs one generation to the end, or to the first failure,
// which it returns with its cause.
func (s *Supervisor) generation(ctx context.Context, g *Generation, o Options) (*Result, error) {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	g.Lost = fail
	if err := s.Launcher.Start(ctx, g); err != nil {
		return nil, err
	}
	defer func() { s.Launcher.Stop(g, context.Cause(ctx) != nil) }()
	res, err := Coordinate(ctx, s.Job.Graph, g.Plan, s.T, s.Job.Run, s.Job.Steps, o, s.Progress)
	if err != nil {
		if s.Failed != nil {
			s.Failed()
		}
		if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && !IsDataError(err) {
			err = cause
		}
		// the workers go at once, instead of waiting out the
		// coordinator's silence (4 s)
		fail(err)
		return nil, err
	}
	return res, nil
}

// Final says whether a generation's failure must not be met with a
// restart: a divergence (deterministic: it would diverge again) or a
// requested stop.
func Final(err error) bool {
	var se *StoppedError
	var ne *NonFiniteError
	return errors.As(err, &se) || errors.As(err, &ne)
}

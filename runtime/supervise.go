package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
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
	// Wait, when positive, bounds how long Start waits for its workers
	// (a restart's, when elastic); 0: the launcher's own limit.
	Wait time.Duration
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
// With Elastic, a later generation may run another plan (elastic.go); once
// Run returns, Job.Plan is the last generation's.
type Supervisor struct {
	Job      *Job
	T        wire.Transport // the coordinator's connection
	Launcher Launcher
	// Log hears of each restart; nil: nothing said.
	Log io.Writer
	// Progress hears every iteration's loss (Coordinate's progress).
	Progress func(iter int64, loss float64)
	// Starting is told the step each generation starts from; Failed that
	// one has failed, before the error is returned or a restart is made.
	Starting func(from int)
	Failed   func()
	// Elastic, when set, re-plans onto the devices left when no spare
	// comes, and grows back when they return.
	Elastic *Elastic
	// Replanned is told each change of plans (Elastic's), after the log.
	Replanned func(old, new *plan.Plan)

	first      *plan.Plan  // the job's plan
	pending    *recovering // the recovery under way
	recoveries []Recovery
	coordEnd   time.Time // when the last generation's coordinator returned a failure
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
	s.first = j.Plan
	start := time.Now()
	var res *Result
	for gen := uint32(1); ; gen++ {
		o.Gen = gen
		g := &Generation{Run: j.Run, Gen: gen, Plan: j.Plan, Slots: Slots(j.Plan), From: startStep(o)}
		if s.Starting != nil {
			s.Starting(g.From)
		}
		if s.pending != nil {
			s.pending.started = time.Now()
			if _, ok := s.capacity(); ok {
				g.Wait = s.Elastic.ReplaceWait + ConfirmTimeout // a spare that does not come is met by the next restart's re-plan
			}
		}
		var err error
		var grew bool
		if res, grew, err = s.generation(ctx, g, o); err == nil {
			break
		}
		ended := time.Now()
		if !grew && (IsDataError(err) || ctx.Err() != nil || restarts == 0 || Final(err)) {
			return nil, 0, err // no restart reads other data
		}
		if !grew {
			restarts--
		}
		o.Resume = initial
		from := "step 0"
		if o.CheckpointDir != "" {
			if c, cerr := LoadCheckpoint(o.CheckpointDir, nil); cerr == nil {
				o.Resume, from = c, fmt.Sprintf("the checkpoint at step %d", c.Manifest.Step)
			}
		}
		if s.Log != nil && !grew {
			fmt.Fprintf(s.Log, "graphpipe: %v\ngraphpipe: restarting the workers as generation %d from %s (%d restarts left)\n", err, gen+1, from, restarts)
		}
		if err := s.recover(ctx, gen, err, grew, ended, &o); err != nil {
			return nil, 0, err
		}
	}
	secs := time.Since(start).Seconds()
	res.Recoveries = s.recoveries
	if err := j.Local.Outputs.write(j, res, initial); err != nil {
		return nil, 0, err
	}
	return res, secs, nil
}

// recover chooses the next generation's plan after the last one ended with
// why (at ended): the same, or, when elastic, one for the devices there.
func (s *Supervisor) recover(ctx context.Context, gen uint32, why error, grew bool, ended time.Time, o *Options) error {
	j := s.Job
	r := &recovering{Recovery: Recovery{Step: startStep(*o), Gen: gen + 1, Reason: why.Error(), From: shapeOf(j.Plan)}, grow: grew}
	r.Seconds.Detect = detectSeconds(why)
	if grew {
		r.Reason = "more devices are there: growing back"
	}
	p, err := s.nextPlan(ctx, j.Plan, grew, r)
	if err != nil {
		return err
	}
	if !s.coordEnd.IsZero() {
		r.Seconds.Stop = ended.Sub(s.coordEnd).Seconds()
	}
	r.To = shapeOf(p)
	old := j.Plan
	if p != old {
		j.Plan = p
		o.Train.MicroBatch = int(p.MicroBatch)
	}
	s.replanned(r, old, p)
	s.pending = r
	return nil
}

// generation runs one generation to the end, or to the first failure,
// which it returns with its cause; grew says the generation stopped to
// grow back onto more workers.
func (s *Supervisor) generation(ctx context.Context, g *Generation, o Options) (*Result, bool, error) {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	g.Lost = fail
	gr := s.watchGrow(ctx, g, &o)
	s.coordEnd = time.Time{}
	if err := s.Launcher.Start(ctx, g); err != nil {
		return nil, false, err
	}
	defer func() { s.Launcher.Stop(g, context.Cause(ctx) != nil) }()
	first := true
	progress := func(iter int64, loss float64) {
		if first {
			first = false
			s.trainingAgain()
		}
		gr.checkpointed(int(iter), o.CheckpointEvery, s.Job.Steps)
		if s.Progress != nil {
			s.Progress(iter, loss)
		}
	}
	res, err := Coordinate(ctx, s.Job.Graph, g.Plan, s.T, s.Job.Run, s.Job.Steps, o, progress)
	if err != nil {
		s.coordEnd = time.Now()
		if gr.grew(err) {
			return nil, true, err
		}
		if s.Failed != nil {
			s.Failed()
		}
		if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && !IsDataError(err) {
			err = cause
		}
		// the workers go at once, instead of waiting out the
		// coordinator's silence (4 s)
		fail(err)
		return nil, false, err
	}
	return res, false, nil
}

// Final says whether a generation's failure must not be met with a
// restart: a divergence (deterministic: it would diverge again), a
// requested stop, or a pool whose hosts cannot hold the plan's nodes (the
// same agents would be refused again; the user must start others or plan
// for other nodes).
func Final(err error) bool {
	var se *StoppedError
	var ne *NonFiniteError
	var pe *PlacementError
	return errors.As(err, &se) || errors.As(err, &ne) || errors.As(err, &pe)
}

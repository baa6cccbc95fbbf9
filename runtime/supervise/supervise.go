package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

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

// Result is a supervised run's end: the last generation's result, and how
// the run went on after each generation that ended early.
type Result struct {
	*runtime.Result
	Recoveries []Recovery
}

// Run runs the job to its end and writes its outputs. It returns the result
// and the seconds from the first generation's start to the last one's end.
func (s *Supervisor) Run(ctx context.Context) (*Result, float64, error) {
	if err := s.Job.Validate(); err != nil {
		return nil, 0, err
	}
	var err error
	defer func() { endLauncher(s.Launcher, err) }()
	out, secs, err := s.run(ctx)
	return out, secs, err
}

// run is Run once the job is valid.
func (s *Supervisor) run(ctx context.Context) (*Result, float64, error) {
	run := s.Job.Job                // each generation's: its plan, generation, start
	var initial *runtime.Checkpoint // --init's values: what a restart with no checkpoint starts from
	if run.Options.Init {
		initial = run.Config.Resume
	}
	restarts := s.Job.Local.Restarts
	s.first = run.Plan
	start := time.Now()
	var res *runtime.Result
	for gen := uint32(1); ; gen++ {
		run.Config.Gen = gen
		g := s.next(&run)
		var err error
		var grew bool
		if res, grew, err = s.generation(ctx, g, run); err == nil {
			break
		}
		ended := time.Now()
		if !grew && (runtime.IsDataError(err) || ctx.Err() != nil || restarts == 0 || Final(err)) {
			return nil, 0, err // no restart reads other data
		}
		if !grew {
			restarts--
		}
		from := s.restartFrom(&run, initial)
		if s.Log != nil && !grew {
			fmt.Fprintf(s.Log, "graphpipe: %v\ngraphpipe: restarting the workers as generation %d from %s (%d restarts left)\n", err, gen+1, from, restarts)
		}
		if err := s.recover(ctx, &run, err, grew, ended); err != nil {
			return nil, 0, err
		}
	}
	secs := time.Since(start).Seconds()
	out := &Result{Result: res, Recoveries: s.recoveries}
	if err := s.Job.Local.Outputs.write(s.Job, res, initial); err != nil {
		return nil, 0, err
	}
	return out, secs, nil
}

// next is run's next generation, its start told to Starting; after a
// failure, the recovery under way is timed from here, and an elastic
// restart waits for its spare no longer than the re-plan would.
func (s *Supervisor) next(run *runtime.Job) *Generation {
	g := &Generation{Run: run.Run, Gen: run.Config.Gen, Plan: run.Plan, Slots: Slots(run.Plan), From: run.From()}
	if run.Options.Emulate { // any worker sleeps any device's times
		for i := range g.Slots {
			g.Slots[i].Profile, g.Slots[i].Memory = "", 0
		}
	}
	if s.Starting != nil {
		s.Starting(g.From)
	}
	if s.pending != nil {
		s.pending.started = time.Now()
		if _, ok := s.capacity(); ok {
			// a spare that does not come is met by the next restart's re-plan
			g.Wait = s.Elastic.ReplaceWait + run.Config.Timings.WithDefaults().ConfirmTimeout
		}
	}
	return g
}

// restartFrom sets where run's next generation starts: the newest whole
// checkpoint, or initial (--init's values, nil for the seeded ones) when
// there is none. It says which, for the log.
func (s *Supervisor) restartFrom(run *runtime.Job, initial *runtime.Checkpoint) string {
	run.Config.Resume = initial
	dir := run.Config.CheckpointDir
	if dir == "" {
		return "step 0"
	}
	c, err := runtime.LoadCheckpoint(dir, nil)
	if err != nil {
		return "step 0"
	}
	run.Config.Resume = c
	return fmt.Sprintf("the checkpoint at step %d", c.Manifest.Step)
}

// recover chooses the next generation's plan after the last one ended with
// why (at ended): the same, or, when elastic, one for the devices there.
// A new plan becomes run's and the job's.
func (s *Supervisor) recover(ctx context.Context, run *runtime.Job, why error, grew bool, ended time.Time) error {
	r := &recovering{Recovery: Recovery{Step: run.From(), Gen: run.Config.Gen + 1, Reason: why.Error(), From: shapeOf(run.Plan)}, grow: grew}
	r.Seconds.Detect = detectSeconds(why)
	if grew {
		r.Reason = "more devices are there: growing back"
	}
	p, err := s.nextPlan(ctx, run.Plan, grew, r)
	if err != nil {
		return err
	}
	if !s.coordEnd.IsZero() {
		r.Seconds.Stop = ended.Sub(s.coordEnd).Seconds()
	}
	r.To = shapeOf(p)
	old := run.Plan
	if p != old {
		run.Plan, s.Job.Plan = p, p
		run.Options.Train.MicroBatch = int(p.MicroBatch)
	}
	s.replanned(r, old, p)
	s.pending = r
	return nil
}

// generation runs one generation of run to the end, or to the first
// failure, which it returns with its cause; grew says the generation
// stopped to grow back onto more workers.
func (s *Supervisor) generation(ctx context.Context, g *Generation, run runtime.Job) (*runtime.Result, bool, error) {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	g.Lost = fail
	gr := s.watchGrow(ctx, g, &run)
	s.coordEnd = time.Time{}
	if err := s.Launcher.Start(ctx, g); err != nil {
		return nil, false, err
	}
	run.Config.Agents = g.Agents
	defer func() { s.Launcher.Stop(g, context.Cause(ctx) != nil) }()
	first := true
	progress := func(iter int64, loss float64) {
		if first {
			first = false
			s.trainingAgain()
		}
		gr.checkpointed(int(iter), run.Options.CheckpointEvery, run.Steps)
		if s.Progress != nil {
			s.Progress(iter, loss)
		}
	}
	res, err := runtime.Coordinate(ctx, &run, s.T, progress)
	if err != nil {
		s.coordEnd = time.Now()
		if gr.grew(err) {
			return nil, true, err
		}
		if s.Failed != nil {
			s.Failed()
		}
		if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && !runtime.IsDataError(err) {
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
// requested stop, a pool whose hosts cannot hold the plan's nodes (the
// same agents would be refused again; the user must start others or plan
// for other nodes), a pool whose agents are of another device than the
// plan's (DeviceError), a worker of a device kind its stage does not run
// on, or tasks whose environment is wrong (two claiming one rank).
func Final(err error) bool {
	var se *runtime.StoppedError
	var ne *runtime.NonFiniteError
	var pe *PlacementError
	var de *DeviceError
	var je *runtime.JobError
	var ee *EnvError
	return errors.As(err, &se) || errors.As(err, &ne) || errors.As(err, &pe) || errors.As(err, &de) || errors.As(err, &je) && je.Op == "join" || errors.As(err, &ee)
}

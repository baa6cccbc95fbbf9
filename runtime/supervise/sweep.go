package supervise

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/graphpipe/graphpipe/sweep"
)

// SweepRunner runs a sweep of many jobs on one cluster as its schedule
// says: the driver of a sweep.Progress, which decides; the runner owns the
// clock and the jobs. Each job starts as soon as the Progress lets it (its
// waits over, its devices free, the jobs planned before it on them
// started), runs in a goroutine of its own through Job, and its end or
// failure goes back to the Progress, which may re-plan the jobs not
// started. A job that fails skips the jobs that wait for it; the others
// run on.
type SweepRunner struct {
	Progress *sweep.Progress
	// Job runs one job on its slot's devices to its end: nil when it
	// trained its steps. It must return once ctx is done.
	Job func(ctx context.Context, slot sweep.Slot) error
	// Event, when set, is told of each start, end, failure, skip and
	// re-plan as it happens, from Run's goroutine.
	Event func(SweepEvent)

	now func() time.Time // the clock: time.Now unless a test sets it
}

// SweepEvent is one thing that happened in a sweep's run.
type SweepEvent struct {
	Kind string     // "start", "end", "fail", "skip" or "replan"
	Slot sweep.Slot // the job's slot as planned when it started (start), or as it ran
	At   float64    // seconds from the sweep's start
	Err  error      // fail: why
}

// SweepResult is how a sweep's run went.
type SweepResult struct {
	// Ran is each job's slot as it ran (Start, End measured from the
	// sweep's start; a job that never started has its last planned slot).
	Ran []sweep.Slot
	// States is where each job ended: sweep.Ended, Failed or Skipped.
	States []sweep.State
	// Errs is each job's error: nil but for the failed.
	Errs     []error
	Makespan float64 // the last end, measured
	Replans  int
}

// SweepFailedError is a sweep whose run ended with failed jobs (and the
// jobs skipped for them); the others trained.
type SweepFailedError struct {
	Failed, Skipped []int
	Errs            []error // of the failed, in Failed's order
}

func (e *SweepFailedError) Error() string {
	return fmt.Sprintf("%d job(s) failed, %d skipped: %v", len(e.Failed), len(e.Skipped), errors.Join(e.Errs...))
}

// ended is a job's goroutine's report.
type ended struct {
	job int
	err error
	at  float64
}

// Run carries the sweep out to its end. It returns the result, with a
// *SweepFailedError when some job failed, or ctx's error when ctx ended
// first (after the jobs running have returned; none starts after).
func (r *SweepRunner) Run(ctx context.Context) (*SweepResult, error) {
	clock := r.now
	if clock == nil {
		clock = time.Now
	}
	t0 := clock()
	since := func() float64 { return clock().Sub(t0).Seconds() }
	g := r.Progress
	done := make(chan ended)
	running := 0
	res := &SweepResult{Errs: make([]error, len(g.Plan().Slots))}
	for {
		if ctx.Err() == nil {
			for _, sl := range g.Next() {
				g.Start(sl.Job, since())
				r.event(SweepEvent{Kind: "start", Slot: sl, At: since()})
				running++
				go func() {
					err := r.Job(ctx, sl)
					done <- ended{sl.Job, err, since()}
				}()
			}
		}
		if running == 0 {
			break
		}
		e := <-done
		running--
		r.ended(e, res)
	}
	return r.result(res, ctx.Err())
}

// ended takes a job's end to the Progress and tells of it.
func (r *SweepRunner) ended(e ended, res *SweepResult) {
	g := r.Progress
	if e.err != nil {
		skipped := g.Fail(e.job, e.at)
		r.event(SweepEvent{Kind: "fail", Slot: g.Plan().Slots[e.job], At: e.at, Err: e.err})
		for _, k := range skipped {
			r.event(SweepEvent{Kind: "skip", Slot: g.Plan().Slots[k], At: e.at})
		}
		res.Errs[e.job] = e.err
		return
	}
	replanned := g.End(e.job, e.at)
	r.event(SweepEvent{Kind: "end", Slot: g.Plan().Slots[e.job], At: e.at})
	if replanned {
		r.event(SweepEvent{Kind: "replan", Slot: g.Plan().Slots[e.job], At: e.at})
	}
}

// result is the run's result once no job runs, and its error.
func (r *SweepRunner) result(res *SweepResult, ctxErr error) (*SweepResult, error) {
	g := r.Progress
	plan := g.Plan()
	res.Ran, res.Replans = plan.Slots, g.Replans()
	fe := &SweepFailedError{}
	for j, sl := range plan.Slots {
		st := g.State(j)
		res.States = append(res.States, st)
		switch st {
		case sweep.Ended:
			res.Makespan = max(res.Makespan, sl.End)
		case sweep.Failed:
			fe.Failed, fe.Errs = append(fe.Failed, j), append(fe.Errs, res.Errs[j])
			res.Makespan = max(res.Makespan, sl.End)
		case sweep.Skipped:
			fe.Skipped = append(fe.Skipped, j)
		}
	}
	if ctxErr != nil {
		return res, ctxErr
	}
	if len(fe.Failed) > 0 {
		return res, fe
	}
	return res, nil
}

func (r *SweepRunner) event(e SweepEvent) {
	if r.Event != nil {
		r.Event(e)
	}
}

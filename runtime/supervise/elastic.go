package supervise

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
)

// Elastic lets a supervisor go on with the devices it has: when a lost
// worker's replacement does not come within ReplaceWait, it searches a plan
// for the devices left (Replan) and resumes the last checkpoint under it;
// when more devices come back, it grows again at the next checkpoint, up to
// the job's first plan. It needs a launcher that can count its devices
// (Capacity).
type Elastic struct {
	// Replan searches a plan for this many devices: the job's model, global
	// batch, data order and (when forced) micro-batch. The runtime does not
	// plan: the caller gives it the planner.
	Replan func(devices int) (*plan.Plan, error)
	// ReplaceWait is how long a spare is waited for before re-planning.
	ReplaceWait time.Duration
}

// Capacity is a launcher that can say how many workers it could start now,
// those it holds included: a pool's live agents.
type Capacity interface {
	Capacity() int
}

// Recovery is how a run went on after a generation ended early: a lost
// worker replaced, a re-plan onto fewer devices, or a grow back onto more.
type Recovery struct {
	Step   int       `json:"step"`       // the step training resumed at
	Gen    uint32    `json:"generation"` // the generation that took over
	Reason string    `json:"reason"`
	From   PlanShape `json:"from"`
	To     PlanShape `json:"to"`
	// Seconds is the time from the loss to training again, per phase.
	Seconds Phases `json:"seconds"`
}

// Replanned says whether the recovery changed plans.
func (r *Recovery) Replanned() bool { return r.From != r.To }

// PlanShape is what a re-plan changes: devices, stages, the predicted
// throughput.
type PlanShape struct {
	Devices     int     `json:"devices"`
	Stages      int     `json:"stages"`
	SamplesPerS float64 `json:"predicted_samples_per_s"`
}

func shapeOf(p *plan.Plan) PlanShape {
	return PlanShape{Devices: runtime.Workers(p), Stages: len(p.Stages), SamplesPerS: p.Predicted.SamplesPerS}
}

func (s PlanShape) String() string {
	return fmt.Sprintf("%s, %s, %.4g samples/s predicted", count(s.Devices, "device"), count(s.Stages, "stage"), s.SamplesPerS)
}

// Phases are the seconds a recovery took, from the last sign of life of
// the worker lost to the first iteration trained after.
type Phases struct {
	// Detect: the lost worker's silence until it was declared lost (0:
	// its end was seen at once, as a process exit or its own report).
	Detect float64 `json:"detect"`
	// Stop: ending the failed generation's workers and coordinator.
	Stop float64 `json:"stop"`
	// Wait: waiting for a spare (up to the replace wait).
	Wait float64 `json:"wait"`
	// Replan: searching the new plan.
	Replan float64 `json:"replan"`
	// Resume: starting the next generation (workers placed and joined, the
	// checkpoint sent) up to its first iteration's end.
	Resume float64 `json:"resume"`
	Total  float64 `json:"total"`
}

func (p Phases) String() string {
	return fmt.Sprintf("detection %.2f s, stop %.2f s, wait for a spare %.2f s, re-plan %.2f s, resume %.2f s",
		p.Detect, p.Stop, p.Wait, p.Replan, p.Resume)
}

// recovering is the recovery under way: measured until the next
// generation's first iteration.
type recovering struct {
	Recovery
	why     string    // why the plan changed, for the log
	grow    bool      // the last generation stopped to grow back
	started time.Time // the next generation's start
}

// detectSeconds is the silence a failure was declared after.
func detectSeconds(err error) float64 {
	var se *runtime.SilentError
	if errors.As(err, &se) {
		return se.Silent.Seconds()
	}
	return 0
}

// every is the run's heartbeat interval, which a pool's capacity changes at.
func (s *Supervisor) every() time.Duration {
	return s.Job.Config.Timings.WithDefaults().HeartbeatEvery
}

// capacity is the launcher's device count, or false when it has none.
func (s *Supervisor) capacity() (Capacity, bool) {
	if s.Elastic == nil || s.Elastic.Replan == nil {
		return nil, false
	}
	c, ok := s.Launcher.(Capacity)
	return c, ok
}

// nextPlan is the plan the next generation runs after cur's ended with
// why: cur, once enough workers are there within ReplaceWait; otherwise,
// when elastic, a plan for the devices left. grow says the generation ended
// to grow back.
func (s *Supervisor) nextPlan(ctx context.Context, cur *plan.Plan, grow bool, r *recovering) (*plan.Plan, error) {
	c, ok := s.capacity()
	if !ok {
		return cur, nil
	}
	want := runtime.Workers(cur)
	if grow {
		want = runtime.Workers(s.first)
	}
	began := time.Now()
	have := waitCapacity(ctx, c, want, s.Elastic.ReplaceWait, s.every())
	r.Seconds.Wait = time.Since(began).Seconds()
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	switch {
	case have >= runtime.Workers(s.first):
		r.why = fmt.Sprintf("%s there: back to the first plan", count(have, "device"))
		return s.first, nil // the first plan: an uninterrupted run's
	case have >= want && !grow:
		return cur, nil
	case have < 1:
		return nil, fmt.Errorf("elastic: no device left within %v to re-plan for", s.Elastic.ReplaceWait)
	}
	r.why = fmt.Sprintf("no spare within %v: re-planning for the %s there", s.Elastic.ReplaceWait, count(have, "device"))
	if grow {
		r.why = fmt.Sprintf("%s there: growing back", count(have, "device"))
	}
	began = time.Now()
	p, err := s.Elastic.Replan(have)
	r.Seconds.Replan = time.Since(began).Seconds()
	if err != nil {
		return nil, fmt.Errorf("elastic: re-planning for %s: %w", count(have, "device"), err)
	}
	if runtime.Workers(p) > have {
		return nil, fmt.Errorf("elastic: the plan for %s takes %d workers", count(have, "device"), runtime.Workers(p))
	}
	return p, nil
}

// waitCapacity waits up to wait for c to count want workers, and returns
// the count it had last. It counts nothing in the first heartbeat and a
// quarter: a lost agent's adverts may have gone on for up to a heartbeat
// after the beats its loss was detected by, and it must not be counted.
func waitCapacity(ctx context.Context, c Capacity, want int, wait, every time.Duration) int {
	settle := time.NewTimer(every * 5 / 4)
	select {
	case <-ctx.Done():
	case <-settle.C:
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(every / 4)
	defer tick.Stop()
	for {
		have := c.Capacity()
		if have >= want {
			return have
		}
		select {
		case <-ctx.Done():
			return have
		case <-deadline.C:
			return c.Capacity()
		case <-tick.C:
		}
	}
}

// grower ends a generation that runs on fewer workers than the first plan
// at its next checkpoint, once the launcher counts more: the stop it
// closes is the generation's Config.Stop, the user's stop merged in.
type grower struct {
	mu      sync.Mutex // guards pending, asked and once
	pending bool       // more workers are there
	asked   bool       // the generation was stopped to grow
	stop    chan struct{}
	once    sync.Once
}

// watchGrow makes run's Config.Stop the generation's stop: the user's, or
// a grow.
func (s *Supervisor) watchGrow(ctx context.Context, g *Generation, run *runtime.Job) *grower {
	gr := &grower{stop: make(chan struct{})}
	user := run.Config.Stop
	run.Config.Stop = gr.stop
	go func() {
		select {
		case <-user:
			gr.once.Do(func() { close(gr.stop) })
		case <-ctx.Done():
		}
	}()
	c, ok := s.capacity()
	if !ok || run.Config.CheckpointDir == "" || run.Options.Emulate || runtime.Workers(g.Plan) >= runtime.Workers(s.first) {
		return gr
	}
	go func() {
		tick := time.NewTicker(s.every())
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if c.Capacity() > runtime.Workers(g.Plan) {
					gr.mu.Lock()
					gr.pending = true
					gr.mu.Unlock()
					return
				}
			}
		}
	}()
	return gr
}

// checkpointed is told each iteration n that ends: when n+1 is a
// checkpoint's step and more workers are there, the generation stops there
// (the stop finds the checkpoint written and writes none).
func (gr *grower) checkpointed(n, every, steps int) {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	if !gr.pending || gr.asked || every < 1 || (n+1)%every != 0 || n+1 >= steps {
		return
	}
	gr.asked = true
	gr.once.Do(func() { close(gr.stop) })
}

// grew says whether err is the stop a grow asked for.
func (gr *grower) grew(err error) bool {
	var se *runtime.StoppedError
	gr.mu.Lock()
	defer gr.mu.Unlock()
	return gr.asked && errors.As(err, &se)
}

// replanned logs a recovery that changed plans, and tells Replanned.
func (s *Supervisor) replanned(r *recovering, old, new *plan.Plan) {
	if !r.Replanned() {
		return
	}
	if s.Log != nil {
		fmt.Fprintf(s.Log, "graphpipe: re-planned at step %d (%s): %s -> %s (re-plan %.2f s)\n", r.Step, r.why, r.From, r.To, r.Seconds.Replan)
	}
	if s.Replanned != nil {
		s.Replanned(old, new)
	}
}

// trainingAgain closes the recovery under way at the next generation's
// first iteration: it logs the time per phase and keeps it.
func (s *Supervisor) trainingAgain() {
	r := s.pending
	if r == nil {
		return
	}
	s.pending = nil
	r.Seconds.Resume = time.Since(r.started).Seconds()
	p := &r.Seconds
	p.Total = p.Detect + p.Stop + p.Wait + p.Replan + p.Resume
	if s.Log != nil {
		what := "the loss"
		if r.grow {
			what = "the stop to grow"
		}
		fmt.Fprintf(s.Log, "graphpipe: training again at step %d, %.2f s after %s (%s)\n", r.Step, p.Total, what, p)
	}
	s.recoveries = append(s.recoveries, r.Recovery)
}

// count is n and word, plural when n is not 1.
func count(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

package microbatch

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Timing is what the simulator needs to know about a plan, per stage (each
// stage's devices run in lockstep, as one) and per edge.
type Timing struct {
	F, B, W   []float64 // per stage: seconds per micro-batch (B is the whole backward unless the schedule splits)
	Act, Grad []float64 // per edge: seconds to move one micro-batch's activations / gradients
	Flush     []float64 // per stage: gradient all-reduce and optimizer step after its last backward
	Devices   []int     // per stage: devices it runs on (nil: 1 each), weights the bubble fraction
	Static    []int64   // per stage: bytes per device held all iteration (weights, gradients, optimizer state)
	Stash     []int64   // per stage: bytes per device per micro-batch in flight
	// Limit, per stage, is the memory per device it keeps within, where
	// stages run on devices of different kinds (nil: the one limit a
	// caller passes, for every stage)
	Limit []int64
	// Post and Take, per edge (nil: free), are what one message costs the
	// stage that sends it (the send call: its clock moves on by Post after
	// the transfer starts) and the stage that takes it (its clock moves on
	// by Take, and no earlier than the data lands); both ways alike.
	Post, Take []float64
	// Fixed is what an iteration costs after its stages' actions (the
	// reports to the coordinator): added to Result.Iteration.
	Fixed float64
	// Hold, per edge (nil: none), is the most a message waits for its
	// sender's next computing action to end before it travels (on a host
	// whose cores are all busy, the message's delivery needs one): its
	// transfer takes the shorter of the two longer.
	Hold []float64
	// Begin, per stage (nil: none), is when it can begin its first action
	// (the go reaching it, the model inputs it reads made): its clock
	// starts there.
	Begin []float64
}

// Event is one compute action, or one transfer seen from one end: Kind Send
// on the sender's Stage, Kind Recv on the receiver's. In a simulation both
// ends of a transfer span the time it takes on its link; in a measured
// timeline (runtime) each spans its stage's call.
type Event struct {
	Stage      int
	Kind       Kind
	MB         int
	Edge       int // transfers only
	Dir        Dir // transfers only
	Start, End float64
}

// Result is a simulated iteration.
type Result struct {
	Iteration  float64   // seconds, first action to last flush, and Timing.Fixed
	Busy, Idle []float64 // per stage: compute seconds, and the rest of the iteration
	Bubble     float64   // idle device-time over all device-time
	InFlight   []int     // per stage: most micro-batches stashed at once
	PeakMemory []int64   // per stage, per device: Static + InFlight × Stash
	Events     []Event   // compute actions in the order they ran per stage, then sends, then receives
	// Span is how long the Events take where they cover more than one
	// iteration (a schedule without a flush is played for several: its
	// Iteration is the steady state's period); 0: Iteration (End).
	Span float64
}

// End is when the last event ends: Span, or the Iteration.
func (r *Result) End() float64 {
	if r.Span > 0 {
		return r.Span
	}
	return r.Iteration
}

// Compute reports whether the event is a forward, backward or weight gradient.
func (e Event) Compute() bool { return e.Kind != Send && e.Kind != Recv && e.Kind != AllReduce }

// DeadlockError reports the action every unfinished stage is blocked on.
type DeadlockError struct {
	Blocked map[int]Action
}

func (e *DeadlockError) Error() string {
	stages := make([]int, 0, len(e.Blocked))
	for s := range e.Blocked {
		stages = append(stages, s)
	}
	sort.Ints(stages)
	var parts []string
	for _, s := range stages {
		parts = append(parts, fmt.Sprintf("stage %d waits at %v", s, e.Blocked[s]))
	}
	return "schedule deadlocks: " + strings.Join(parts, "; ")
}

// Simulate runs one iteration of the schedule. Sends never block; a link
// carries one transfer at a time per direction, in the order they were sent.
func Simulate(sch *Schedule, t Timing) (*Result, error) { return simulate(sch, t, true) }

// Summarize is Simulate without Result.Events: what a planner comparing
// many candidates needs, in memory that does not grow with the events.
func Summarize(sch *Schedule, t Timing) (*Result, error) { return simulate(sch, t, false) }

func simulate(sch *Schedule, t Timing, events bool) (*Result, error) {
	if sch.NoFlush {
		return simulateNoFlush(sch, t, events)
	}
	if err := t.check(sch); err != nil {
		return nil, err
	}
	n := sch.Pipe.Stages
	links := make([]Link, 2*len(sch.Pipe.Edges))
	cur := make([]Cursor, n)
	for s := range cur {
		cur[s] = newCursor(s, sch.Lists[s], sch.Split, t, links)
	}
	box := newMailbox(sch.Pipe, events)
	r := &Result{Busy: make([]float64, n), Idle: make([]float64, n), InFlight: make([]int, n), PeakMemory: make([]int64, n)}
	var transfers, receives []Event
	if err := playIteration(cur, &box, 0, events, r, &transfers, &receives); err != nil {
		return nil, err
	}
	r.finish(t, cur, append(transfers, receives...))
	return r, nil
}

func (r *Result) finish(t Timing, cur []Cursor, transfers []Event) {
	var devTime, busyTime float64
	for s := range cur {
		_, end := cur[s].Finish()
		r.Iteration = max(r.Iteration, end)
		r.Busy[s], r.InFlight[s] = cur[s].Busy(), cur[s].InFlight()
	}
	r.Iteration += t.Fixed
	for s := range cur {
		d := 1.0
		if t.Devices != nil {
			d = float64(t.Devices[s])
		}
		r.Idle[s] = r.Iteration - r.Busy[s]
		devTime += d * r.Iteration
		busyTime += d * r.Busy[s]
		r.PeakMemory[s] = peakBytes(atInt(t.Static, s), atInt(t.Stash, s), r.InFlight[s])
	}
	if devTime > 0 {
		r.Bubble = 1 - busyTime/devTime
	}
	r.Events = append(r.Events, transfers...)
}

func at(v []float64, i int) float64 {
	if v == nil {
		return 0
	}
	return v[i]
}

// peakBytes is static + n·stash (both ≥ 0), or math.MaxInt64 where that
// overflows: a plan of absurd sizes reads as never fitting, not as fitting
// in negative bytes.
func peakBytes(static, stash int64, n int) int64 {
	if n > 0 && stash > (math.MaxInt64-static)/int64(n) {
		return math.MaxInt64
	}
	return static + int64(n)*stash
}

func atInt(v []int64, i int) int64 {
	if v == nil {
		return 0
	}
	return v[i]
}

func (t Timing) check(sch *Schedule) error {
	n, e := sch.Pipe.Stages, len(sch.Pipe.Edges)
	for _, v := range []struct {
		name string
		len  int
		want int
	}{
		{"F", len(t.F), n}, {"B", len(t.B), n}, {"Act", len(t.Act), e}, {"Grad", len(t.Grad), e},
	} {
		if v.len != v.want {
			return fmt.Errorf("timing: %s has %d entries, want %d", v.name, v.len, v.want)
		}
	}
	if sch.Split && len(t.W) != n {
		return fmt.Errorf("timing: W has %d entries, want %d", len(t.W), n)
	}
	for _, v := range []struct {
		name string
		len  int
		want int
	}{{"Post", len(t.Post), e}, {"Take", len(t.Take), e}, {"Hold", len(t.Hold), e}, {"Begin", len(t.Begin), n}} {
		if v.len != 0 && v.len != v.want {
			return fmt.Errorf("timing: %s has %d entries, want %d or none", v.name, v.len, v.want)
		}
	}
	if len(sch.Lists) != n {
		return fmt.Errorf("schedule: %d action lists for %d stages", len(sch.Lists), n)
	}
	return nil
}

// Unit is a timing where every compute action takes one step and transfers
// are free: the timing behind the step × stage grid.
func Unit(p Pipeline) Timing {
	ones := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	return Timing{F: ones(p.Stages), B: ones(p.Stages), W: ones(p.Stages), Act: make([]float64, len(p.Edges)), Grad: make([]float64, len(p.Edges))}
}

package microbatch

import (
	"fmt"
	"math"
)

// The interpreters as they were before the cursor (cursor.go): the
// simulator's loop and the zero-bubble playout, each with its own clock and
// link arithmetic, kept verbatim as the oracles that driving the cursor must
// reproduce bit for bit (cursor_test.go: TestCursorReproducesOldSimulator,
// TestCursorReproducesOldZeroBubble) and as the baseline of
// BenchmarkSimulate and BenchmarkZeroBubble.

func oldSimulate(sch *Schedule, t Timing, events bool) (*Result, error) {
	if err := t.check(sch); err != nil {
		return nil, err
	}
	n := sch.Pipe.Stages
	clock := make([]float64, n)
	pc := make([]int, n)
	mbs := sch.Pipe.MicroBatches
	// arrival[slot(edge, dir, mb)]: when the data lands; NaN until sent
	arrival := make([]float64, 2*len(sch.Pipe.Edges)*mbs)
	for i := range arrival {
		arrival[i] = math.NaN()
	}
	slot := func(a Action) int {
		d := 0
		if a.Dir == Grad {
			d = 1
		}
		return (a.Edge*2+d)*mbs + a.MB
	}
	linkFree := make([]float64, 2*len(sch.Pipe.Edges)) // per (edge, dir): when the link is free
	r := &Result{Busy: make([]float64, n), Idle: make([]float64, n), InFlight: make([]int, n), PeakMemory: make([]int64, n)}
	stashed := make([]int, n)
	var transfers, receives []Event
	var sent []float64 // per slot: when its transfer started (events only)
	if events {
		sent = make([]float64, len(arrival))
	}
	for progress := true; progress; {
		progress = false
		for s := 0; s < n; s++ {
			for pc[s] < len(sch.Lists[s]) {
				a := sch.Lists[s][pc[s]]
				if a.Kind == Recv {
					at := arrival[slot(a)]
					if math.IsNaN(at) {
						break
					}
					clock[s] = max(clock[s], at)
					if events {
						receives = append(receives, Event{Stage: s, Kind: Recv, MB: a.MB, Edge: a.Edge, Dir: a.Dir, Start: sent[slot(a)], End: at})
					}
				} else if a.Kind == Send {
					dur := t.Act[a.Edge]
					if a.Dir == Grad {
						dur = t.Grad[a.Edge]
					}
					link := slot(a) / mbs
					start := max(clock[s], linkFree[link])
					linkFree[link] = start + dur
					arrival[slot(a)] = start + dur
					if events {
						sent[slot(a)] = start
						transfers = append(transfers, Event{Stage: s, Kind: Send, MB: a.MB, Edge: a.Edge, Dir: a.Dir, Start: start, End: start + dur})
					}
				} else {
					dur := t.oldCompute(s, a.Kind)
					if events {
						r.Events = append(r.Events, Event{Stage: s, Kind: a.Kind, MB: a.MB, Start: clock[s], End: clock[s] + dur})
					}
					clock[s] += dur
					r.Busy[s] += dur
					stashed[s] += oldStashDelta(a.Kind, sch.Split)
					r.InFlight[s] = max(r.InFlight[s], stashed[s])
				}
				pc[s]++
				progress = true
			}
		}
	}
	blocked := map[int]Action{}
	for s := 0; s < n; s++ {
		if pc[s] < len(sch.Lists[s]) {
			blocked[s] = sch.Lists[s][pc[s]]
		}
	}
	if len(blocked) > 0 {
		return nil, &DeadlockError{blocked}
	}
	r.oldFinish(sch, t, clock, append(transfers, receives...))
	return r, nil
}

func oldStashDelta(k Kind, split bool) int {
	switch {
	case k == Forward:
		return 1
	case k == Weight, k == Backward && !split:
		return -1
	}
	return 0
}

func (t Timing) oldCompute(s int, k Kind) float64 {
	switch k {
	case Forward:
		return t.F[s]
	case Backward:
		return t.B[s]
	}
	return t.W[s]
}

func (r *Result) oldFinish(sch *Schedule, t Timing, clock []float64, transfers []Event) {
	var devTime, busyTime float64
	for s := range clock {
		clock[s] += at(t.Flush, s)
		r.Iteration = max(r.Iteration, clock[s])
	}
	for s := range clock {
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

func oldZeroBubble(p Pipeline, t Timing, warm []int) (*Schedule, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if err := p.checkWarm(warm); err != nil {
		return nil, err
	}
	sch := &Schedule{Name: "zb", Pipe: p, Split: true}
	if err := t.check(&Schedule{Pipe: p, Split: true, Lists: make([][]Action, p.Stages)}); err != nil {
		return nil, err
	}
	z := newOldZB(p, t, warm)
	if err := z.run(); err != nil {
		return nil, err
	}
	sch.Lists = z.lists
	return sch, nil
}

// oldZB is the state of ZeroBubble's playout.
type oldZB struct {
	p       Pipeline
	t       Timing
	in, out [][]int    // per stage: the edges into and out of it
	order   [][]Action // per stage: its F and B in 1F1B order
	next    []int      // per stage: index into order
	pending [][]int    // per stage: micro-batches whose W is due, oldest first
	held    []int      // per stage: micro-batches forwarded and not yet W'd
	limit   []int      // per stage: the most it may hold, 1F1B's warm-up
	clock   []float64  // per stage: when it is next free
	arrival []float64  // per (edge, dir, mb): when the data lands; NaN until sent
	link    []float64  // per (edge, dir): when the link is free
	lists   [][]Action
}

func newOldZB(p Pipeline, t Timing, warm []int) *oldZB {
	n, m := p.Stages, p.MicroBatches
	z := &oldZB{p: p, t: t, next: make([]int, n), pending: make([][]int, n), held: make([]int, n), limit: make([]int, n),
		clock: make([]float64, n), arrival: make([]float64, 2*len(p.Edges)*m), link: make([]float64, 2*len(p.Edges)),
		lists: make([][]Action, n)}
	for i := range z.arrival {
		z.arrival[i] = math.NaN()
	}
	for s := 0; s < n; s++ {
		z.order = append(z.order, oneFOneBOrder(m, warm[s]))
		z.limit[s] = min(m, warm[s])
		z.in, z.out = append(z.in, p.in(s)), append(z.out, p.out(s))
		z.lists[s] = make([]Action, 0, m*(3+2*len(z.in[s])+2*len(z.out[s])))
	}
	return z
}

func (z *oldZB) slot(e int, d Dir, mb int) int {
	k := 0
	if d == Grad {
		k = 1
	}
	return (e*2+k)*z.p.MicroBatches + mb
}

// ready is when the data of stage s's next F or B is all there: +Inf while
// some of it has not been sent, NaN when nothing is left in its order.
func (z *oldZB) ready(s int) float64 {
	if z.next[s] == len(z.order[s]) {
		return math.NaN()
	}
	a := z.order[s][z.next[s]]
	edges, dir := z.in[s], Act
	if a.Kind == Backward {
		edges, dir = z.out[s], Grad
	}
	at := 0.0
	for _, e := range edges {
		v := z.arrival[z.slot(e, dir, a.MB)]
		if math.IsNaN(v) {
			return math.Inf(1)
		}
		at = max(at, v)
	}
	return at
}

// when is the time stage s acts next: +Inf if it must wait for data not yet
// sent, NaN if it is done.
func (z *oldZB) when(s int) float64 {
	r := z.ready(s)
	switch {
	case math.IsNaN(r) && len(z.pending[s]) == 0:
		return math.NaN()
	case len(z.pending[s]) > 0:
		return z.clock[s]
	}
	return max(z.clock[s], r)
}

// run steps the stage that acts first (the lowest on ties) until every stage
// is done. A stage's next time changes only when it acts or a neighbour sends
// it data, so only those are recomputed.
func (z *oldZB) run() error {
	due := make([]float64, len(z.clock))
	for s := range due {
		due[s] = z.when(s)
	}
	for {
		s, at := -1, math.Inf(1)
		done := true
		for st, w := range due {
			if math.IsNaN(w) {
				continue
			}
			done = false
			if w < at {
				s, at = st, w
			}
		}
		if done {
			return nil
		}
		if s < 0 {
			return fmt.Errorf("zero-bubble schedule: every unfinished stage waits for data never sent")
		}
		z.clock[s] = at
		z.step(s)
		due[s] = z.when(s)
		for _, e := range z.in[s] {
			due[z.p.Edges[e][0]] = z.when(z.p.Edges[e][0])
		}
		for _, e := range z.out[s] {
			due[z.p.Edges[e][1]] = z.when(z.p.Edges[e][1])
		}
	}
}

// step runs stage s's next action at its clock.
func (z *oldZB) step(s int) {
	r := z.ready(s)
	if !math.IsNaN(r) && r <= z.clock[s] {
		a := z.order[s][z.next[s]]
		if a.Kind == Backward || z.held[s] < z.limit[s] || len(z.pending[s]) == 0 {
			z.next[s]++
			z.compute(s, a)
			return
		}
	}
	mb := z.pending[s][0]
	z.pending[s] = z.pending[s][1:]
	z.held[s]--
	z.lists[s] = append(z.lists[s], Action{Kind: Weight, MB: mb})
	z.clock[s] += z.t.W[s]
}

// compute runs a forward or input-gradient backward with its receives before
// and sends after.
func (z *oldZB) compute(s int, a Action) {
	in, out, dir := z.in[s], z.out[s], Act
	dur := z.t.F[s]
	if a.Kind == Backward {
		in, out, dir, dur = out, in, Grad, z.t.B[s]
	}
	for _, e := range in {
		z.lists[s] = append(z.lists[s], Action{Kind: Recv, MB: a.MB, Edge: e, Dir: dir})
	}
	z.lists[s] = append(z.lists[s], a)
	z.clock[s] += dur
	for _, e := range out {
		z.lists[s] = append(z.lists[s], Action{Kind: Send, MB: a.MB, Edge: e, Dir: dir})
		cost := z.t.Act[e]
		if dir == Grad {
			cost = z.t.Grad[e]
		}
		k := z.slot(e, dir, a.MB) / z.p.MicroBatches
		start := max(z.clock[s], z.link[k])
		z.link[k] = start + cost
		z.arrival[z.slot(e, dir, a.MB)] = start + cost
	}
	if a.Kind == Forward {
		z.held[s]++
	} else {
		z.pending[s] = append(z.pending[s], a.MB)
	}
}

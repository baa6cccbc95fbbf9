package microbatch

import (
	"fmt"
	"math"
)

// PipeDream-2BW (Narayanan et al., 2021) without a flush: 1F1B runs on
// across the boundary between iterations, each stage updating its weights
// once a batch's last backward on it is done, while the next batch's first
// forwards are already in flight. A Schedule with NoFlush set holds one
// iteration of the steady state: stage s's list, cut just after its last
// backward of the batch, is
//
//	F(w−1), B(0), F(w), B(1), …, F(M+w−2), B(M−1)
//
// for w its warm-up count and M the micro-batches per batch, where a
// micro-batch index j ≥ M is the next batch's j−M: the w−1 forwards a stage
// runs ahead of its update. The first iteration of a run runs those w−1
// forwards of its own batch first (IterationLists' first), the last one
// none of the next batch's (last); one iteration alone is 1F1B with the
// flush (Flushed).
//
// Every stage ends iteration t with the update W(t+1) = W(t) − lr·g(t),
// where g(t) is batch t's gradient taken at W(t−1): batch t's forwards and
// backwards read the version before the newest, and the forwards it runs
// ahead of the update read the newest. A stage thus holds two versions,
// never more, as long as what it runs ahead fits in one batch: w−1 ≤ M
// (TwoBWWarm refuses more: StalenessError). A stage without successors
// runs nothing ahead (w = 1): its backward follows its forward at once,
// and so the stage holding the loss accounts each batch's loss alone.

// StalenessError is a pipeline that cannot keep every stage's weights one
// step stale without a flush: stage Stage would run Warm−1 forwards of the
// next batch before its update, more than the MicroBatches a batch has, so
// some would read weights two updates old (a third version).
type StalenessError struct {
	Stage, Warm, MicroBatches int
}

func (e *StalenessError) Error() string {
	return fmt.Sprintf("schedule 2bw: stage %d runs %d forwards before its first backward, %d of them ahead into the next batch, "+
		"but a batch has %d micro-batches: its weights would be more than one update stale; 2bw needs at least %d micro-batches per batch here",
		e.Stage, e.Warm, e.Warm-1, e.MicroBatches, e.Warm-1)
}

// TwoBW is PipeDream-2BW's schedule on a stage DAG, every stage warmed up
// to its depth (1 + its longest path to a sink).
func TwoBW(p Pipeline) (*Schedule, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	depth, _ := p.Depth()
	warm := make([]int, p.Stages)
	for s := range warm {
		warm[s] = depth[s]
		if len(p.out(s)) == 0 {
			warm[s] = 1
		}
	}
	return TwoBWWarm(p, warm)
}

// TwoBWWarm is TwoBW where stage s runs warm[s] forwards before its first
// backward (the steady state's order, as 1F1B's with warm). A stage
// without successors must run 1; every stage no more than one batch ahead
// (a StalenessError).
func TwoBWWarm(p Pipeline, warm []int) (*Schedule, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if err := p.checkWarm(warm); err != nil {
		return nil, err
	}
	for s, w := range warm {
		if len(p.out(s)) == 0 && w != 1 {
			return nil, fmt.Errorf("schedule 2bw: stage %d has no successors and runs %d forwards before its first backward, want 1", s, w)
		}
		if w-1 > p.MicroBatches {
			return nil, &StalenessError{Stage: s, Warm: w, MicroBatches: p.MicroBatches}
		}
	}
	sch := &Schedule{Name: "2bw", Pipe: p, NoFlush: true}
	for s := 0; s < p.Stages; s++ {
		l := newLister(p, s)
		for _, a := range twoBWOrder(p.MicroBatches, warm[s]) {
			if a.Kind == Forward {
				l.forward(a.MB)
			} else {
				l.backward(a.MB)
			}
		}
		sch.Lists = append(sch.Lists, l.list)
	}
	return sch, nil
}

// twoBWOrder is a 2bw stage's forwards and backwards in one steady
// iteration: m micro-batches a batch, w forwarded before the first
// backward; indices from m on are the next batch's.
func twoBWOrder(m, w int) []Action {
	acts := []Action{{Kind: Forward, MB: w - 1}}
	for mb := 0; mb < m; mb++ {
		acts = append(acts, Action{Kind: Backward, MB: mb})
		if mb < m-1 {
			acts = append(acts, Action{Kind: Forward, MB: mb + w})
		}
	}
	return acts
}

// IterationLists are the action lists of one iteration of a schedule
// without a flush (the lists themselves for any other): the steady lists;
// in the first iteration of a run (first), the forwards the steady state
// ran ahead in the iteration before run first, as this batch's; in the
// last (last), none of the next batch's. Indices from Pipe.MicroBatches
// on are the next batch's.
func (sch *Schedule) IterationLists(first, last bool) [][]Action {
	if !sch.NoFlush {
		return sch.Lists
	}
	m := sch.Pipe.MicroBatches
	out := make([][]Action, len(sch.Lists))
	for s, list := range sch.Lists {
		var l []Action
		if first {
			for _, a := range list {
				if a.MB >= m {
					a.MB -= m
					l = append(l, a)
				}
			}
		}
		for _, a := range list {
			if !last || a.MB < m {
				l = append(l, a)
			}
		}
		out[s] = l
	}
	return out
}

// Ahead is how many forwards of the next batch each stage of a schedule
// without a flush runs before its update (its warm-up count less one);
// zero for every stage of any other schedule.
func (sch *Schedule) Ahead() []int {
	out := make([]int, len(sch.Lists))
	if !sch.NoFlush {
		return out
	}
	for s, list := range sch.Lists {
		for _, a := range list {
			if a.Kind == Forward && a.MB >= sch.Pipe.MicroBatches {
				out[s]++
			}
		}
	}
	return out
}

// Flushed is one iteration of a schedule without a flush alone, flushed:
// first and last at once, as a one-iteration run (and an evaluation, which
// runs every forward of a batch) runs it. Any other schedule is itself.
func (sch *Schedule) Flushed() *Schedule {
	if !sch.NoFlush {
		return sch
	}
	return &Schedule{Name: sch.Name, Pipe: sch.Pipe, Lists: sch.IterationLists(true, true)}
}

// unroll is k iterations of a schedule without a flush as one flushed
// schedule of k batches' micro-batches (iteration i's micro-batch j is
// i·M + j): what Check verifies across the iterations' boundaries.
func (sch *Schedule) unroll(k int) *Schedule {
	m := sch.Pipe.MicroBatches
	p := sch.Pipe
	p.MicroBatches = k * m
	out := &Schedule{Name: sch.Name, Pipe: p, Lists: make([][]Action, len(sch.Lists))}
	for i := 0; i < k; i++ {
		lists := sch.IterationLists(i == 0, i == k-1)
		for s, l := range lists {
			for _, a := range l {
				a.MB += i * m
				out.Lists[s] = append(out.Lists[s], a)
			}
		}
	}
	return out
}

// checkNoFlush is Check of a schedule without a flush: no split backward,
// indices within two batches, every list running no more than a batch
// ahead; then one iteration alone (Flushed) and three in a row (unroll)
// checked as flushed schedules are, which covers every pair of sends and
// receives across an iteration's boundary and the deadlocks.
func checkNoFlush(sch *Schedule, limit []int) error {
	if sch.Split {
		return fmt.Errorf("schedule %s: a schedule without a flush does not split the backward", sch.Name)
	}
	m := sch.Pipe.MicroBatches
	for s, list := range sch.Lists {
		for _, a := range list {
			ahead := a.Kind == Forward || (a.Kind == Send || a.Kind == Recv) && a.Dir == Act
			if a.MB < 0 || a.MB >= 2*m || a.MB >= m && !ahead {
				return &CheckError{s, fmt.Sprintf("action %v: out of range in a steady iteration of %d micro-batches", a, m)}
			}
		}
	}
	if err := Check(sch.Flushed(), limit); err != nil {
		return err
	}
	return Check(sch.unroll(3), limit)
}

// twoBWIters is how many iterations the simulator plays of a schedule
// without a flush: the first (its warm-up), three of the steady state, the
// last (its drain). The period is taken over the second and third steady
// ones, the first of them left to settle.
const twoBWIters = 5

// simulateNoFlush plays twoBWIters iterations of a schedule without a
// flush back to back, each stage starting the next iteration as soon as it
// has updated (its flush) after this one's last backward, the messages and
// links carried over: a run's workers do not wait for one another between
// iterations (package runtime). Result.Iteration is the steady state's
// period (Timing.Fixed, the workers' reports, is sent while they go on, and
// not added); Busy, Idle and Bubble are a steady iteration's; InFlight and
// PeakMemory the most held at once; Events every iteration's, micro-batch
// i·M + j for iteration i's j, over Result.Span.
func simulateNoFlush(sch *Schedule, t Timing, events bool) (*Result, error) {
	if err := t.check(sch); err != nil {
		return nil, err
	}
	n, m, k := sch.Pipe.Stages, sch.Pipe.MicroBatches, twoBWIters
	whole := sch.Pipe
	whole.MicroBatches = (k + 1) * m
	box := newMailbox(whole, events)
	links := make([]Link, 2*len(sch.Pipe.Edges))
	clock, held, peak := make([]float64, n), make([]int, n), make([]int, n)
	for s := range clock {
		clock[s] = at(t.Begin, s)
	}
	ends := make([]float64, k)
	r := &Result{Busy: make([]float64, n), Idle: make([]float64, n), InFlight: make([]int, n), PeakMemory: make([]int64, n)}
	var transfers, receives []Event
	for i := 0; i < k; i++ {
		lists := sch.IterationLists(i == 0, i == k-1)
		cur := make([]Cursor, n)
		for s := range cur {
			cur[s] = newCursor(s, lists[s], false, t, links)
			cur[s].clock, cur[s].held, cur[s].peak = clock[s], held[s], held[s]
		}
		err := playIteration(cur, &box, i*m, events, r, &transfers, &receives)
		if err != nil {
			return nil, err
		}
		for s := range cur {
			_, end := cur[s].Finish()
			clock[s], held[s], peak[s] = end, cur[s].held, max(peak[s], cur[s].peak)
			ends[i] = max(ends[i], end)
			if i == 2 {
				r.Busy[s] = cur[s].Busy()
			}
		}
	}
	r.Iteration = (ends[3] - ends[1]) / 2
	r.Span = ends[k-1] + t.Fixed
	var devTime, busyTime float64
	for s := 0; s < n; s++ {
		d := 1.0
		if t.Devices != nil {
			d = float64(t.Devices[s])
		}
		r.InFlight[s] = peak[s]
		r.Idle[s] = max(0, r.Iteration-r.Busy[s])
		devTime += d * r.Iteration
		busyTime += d * r.Busy[s]
		r.PeakMemory[s] = peakBytes(atInt(t.Static, s), atInt(t.Stash, s), r.InFlight[s])
	}
	if devTime > 0 {
		r.Bubble = math.Max(0, 1-busyTime/devTime)
	}
	r.Events = append(r.Events, append(transfers, receives...)...)
	return r, nil
}

// playIteration steps the cursors of one iteration until none can move,
// its micro-batch j posted and taken as base + j, and reports a deadlock.
func playIteration(cur []Cursor, box *mailbox, base int, events bool, r *Result, transfers, receives *[]Event) error {
	for progress := true; progress; {
		progress = false
		for s := range cur {
			c := &cur[s]
			for a, ok := c.Next(); ok; a, ok = c.Next() {
				mb := base + a.MB
				land := 0.0
				if a.Kind == Recv {
					if land = box.lands(a.Edge, a.Dir, mb); math.IsNaN(land) {
						break
					}
				}
				start, end := c.step(a, land)
				switch {
				case a.Kind == Send:
					box.put(a.Edge, a.Dir, mb, start, end)
					if events {
						*transfers = append(*transfers, Event{Stage: s, Kind: Send, MB: mb, Edge: a.Edge, Dir: a.Dir, Start: start, End: end})
					}
				case !events:
				case a.Kind == Recv:
					*receives = append(*receives, Event{Stage: s, Kind: Recv, MB: mb, Edge: a.Edge, Dir: a.Dir, Start: box.sent[box.slot(a.Edge, a.Dir, mb)], End: land})
				default:
					r.Events = append(r.Events, Event{Stage: s, Kind: a.Kind, MB: mb, Start: start, End: end})
				}
				progress = true
			}
		}
	}
	blocked := map[int]Action{}
	for s := range cur {
		if a, ok := cur[s].Next(); ok {
			blocked[s] = a
		}
	}
	if len(blocked) > 0 {
		return &DeadlockError{blocked}
	}
	return nil
}

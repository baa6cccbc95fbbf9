package sweep

import (
	"errors"
	"math"
	"slices"
)

// ErrTooLarge is Exact's answer to a problem it gave up on: more schedules
// to visit than its limit.
var ErrTooLarge = errors.New("sweep: too many schedules for an exact search")

// Exact is the shortest schedule of p, found by enumerating them: the
// oracle Solve is checked against on small sweeps. It places jobs in order
// of their starts, each at one of the moments a schedule that cannot be
// shifted earlier starts a job (0, a ready or free time, another job's end:
// every schedule shifts to one such without ending later), on each block
// and choice it may take, and cuts a branch that cannot end before the
// best found (starting from Solve's). It visits at most limit partial
// schedules, or returns ErrTooLarge.
func Exact(p Problem, limit int) (*Schedule, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	best, _ := Solve(p)
	e := &exact{p: &p, best: best, limit: limit, board: newBoard(&p),
		slots: make([]Slot, len(p.Jobs)), placed: make([]bool, len(p.Jobs)), tail: p.tails()}
	for _, job := range p.Jobs {
		e.work += leastWork(job)
	}
	for d := 0; d < p.Devices; d++ {
		e.work += p.free(d)
	}
	e.search(0, 0, -1, 0)
	if e.visits > limit {
		return nil, ErrTooLarge
	}
	return e.best, nil
}

// exact is Exact's search state.
type exact struct {
	p             *Problem
	best          *Schedule
	limit, visits int
	board         *board
	slots         []Slot
	placed        []bool
	tail          []float64 // per job: its shortest duration and the longest chain of shortest durations after it
	work          float64   // the least work left, as device-seconds, with the devices' busy time
}

// tails is, per job, the shortest time from its start to the end of the
// sweep: its shortest choice and the longest such chain of the jobs that
// wait for it.
func (p *Problem) tails() []float64 {
	alloc := make([]int, len(p.Jobs))
	for j := range p.Jobs {
		alloc[j] = fastest(p.Jobs[j])
	}
	return p.bottomLevels(alloc)
}

// search places the rest of the jobs, each starting no earlier than the
// last placed (lastStart, job lastJob on a tie), having placed n with the
// schedule ending at end.
func (e *exact) search(n int, lastStart float64, lastJob int, end float64) {
	if e.visits++; e.visits > e.limit {
		return
	}
	if n == len(e.p.Jobs) {
		if before(end, e.best.Makespan) {
			e.best = &Schedule{Slots: slices.Clone(e.slots), Makespan: end}
		}
		return
	}
	if !before(e.bound(lastStart, end), e.best.Makespan) {
		return
	}
	times := e.moments(lastStart)
	for j, job := range e.p.Jobs {
		if e.placed[j] || !e.waitsPlaced(j) {
			continue
		}
		ready := e.readyAt(j)
		for _, c := range job.Choices {
			for _, t := range times {
				if before(t, ready) || !before(lastStart, t) && j < lastJob && !before(t, lastStart) {
					continue // too early, or a tie already tried in the other order
				}
				for _, f := range e.p.blocks(c.Devices) {
					if !e.board.fits(f, c.Devices, t, t+c.Seconds) {
						continue
					}
					e.put(j, Slot{Job: j, Devices: c.Devices, First: f, Start: t, End: t + c.Seconds}, c, true)
					e.search(n+1, t, j, max(end, t+c.Seconds))
					e.put(j, e.slots[j], c, false)
				}
			}
		}
	}
}

// put places job j at slot sl (on), or takes it back (off).
func (e *exact) put(j int, sl Slot, c Choice, on bool) {
	least := leastWork(e.p.Jobs[j])
	if on {
		e.board.take(sl.First, sl.Devices, sl.Start, sl.End)
		e.slots[j], e.placed[j] = sl, true
		e.work += area(c) - least
		return
	}
	for d := sl.First; d < sl.First+sl.Devices; d++ {
		i := slices.IndexFunc(e.board.busy[d], func(x span) bool { return x.s == sl.Start && x.e == sl.End })
		e.board.busy[d] = slices.Delete(e.board.busy[d], i, i+1)
	}
	e.placed[j] = false
	e.work -= area(c) - least
}

// moments are the starts a job placed next may take: the last start, the
// ready and free times and the placed jobs' ends after it.
func (e *exact) moments(lastStart float64) []float64 {
	ts := []float64{lastStart}
	add := func(t float64) {
		if !before(t, lastStart) {
			ts = append(ts, t)
		}
	}
	for d := 0; d < e.p.Devices; d++ {
		add(e.p.free(d))
	}
	for j := range e.p.Jobs {
		add(e.p.ready(j))
		if e.placed[j] {
			add(e.slots[j].End)
		}
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

// waitsPlaced says whether every job j waits for is placed.
func (e *exact) waitsPlaced(j int) bool {
	for _, a := range e.p.Jobs[j].After {
		if !e.placed[a] {
			return false
		}
	}
	return true
}

// readyAt is the earliest job j may start given the jobs placed.
func (e *exact) readyAt(j int) float64 {
	r := e.p.ready(j)
	for _, a := range e.p.Jobs[j].After {
		r = max(r, e.slots[a].End)
	}
	return r
}

// bound is a time no completion of the partial schedule ends before: its
// end, each unplaced job's earliest start and shortest tail, and the least
// work spread over the devices.
func (e *exact) bound(lastStart, end float64) float64 {
	b := math.Max(end, e.work/float64(e.p.Devices))
	for j := range e.p.Jobs {
		if !e.placed[j] {
			b = math.Max(b, math.Max(lastStart, e.p.ready(j))+e.tail[j])
		}
	}
	return b
}

// leastWork is the fewest device-seconds job runs in.
func leastWork(job Job) float64 {
	least := math.Inf(1)
	for _, c := range job.Choices {
		least = math.Min(least, area(c))
	}
	return least
}

package sweep

import (
	"math"
	"slices"
)

// Slot is a job's place in a schedule: its devices (First up to
// First+Devices-1) from Start to End, in seconds from the sweep's start.
type Slot struct {
	Job        int
	Devices    int
	First      int
	Start, End float64
}

// DeviceIDs are the slot's devices.
func (s Slot) DeviceIDs() []int {
	ids := make([]int, s.Devices)
	for i := range ids {
		ids[i] = s.First + i
	}
	return ids
}

// overlaps says whether two slots share a device at some moment.
func (s Slot) overlaps(o Slot) bool {
	return s.First < o.First+o.Devices && o.First < s.First+s.Devices && before(s.Start, o.End) && before(o.Start, s.End)
}

// Schedule is every job's slot, in job order, and when the last one ends.
type Schedule struct {
	Slots    []Slot
	Makespan float64
}

// before says whether a is earlier than b by more than rounding: durations
// are summed along a schedule, and a job that starts as another ends must
// not be taken to overlap it.
func before(a, b float64) bool { return a < b-1e-9*(1+math.Abs(a)) }

// span is a time a device is taken, [s, e).
type span struct{ s, e float64 }

// board is the devices' timelines as a schedule is built: each device's
// taken spans, by start.
type board struct {
	p    *Problem
	busy [][]span
	// times are the moments a device frees up (the ends taken and the free
	// times), ascending and distinct: where a job placed later may start
	times []float64
	// firsts caches Problem.blocks by device count
	firsts map[int][]int
}

func newBoard(p *Problem) *board {
	b := &board{p: p, busy: make([][]span, p.Devices), firsts: map[int][]int{}}
	for d := 0; d < p.Devices; d++ {
		b.addTime(p.free(d))
	}
	return b
}

// addTime adds t to the moments devices free up.
func (b *board) addTime(t float64) {
	if i, found := slices.BinarySearch(b.times, t); !found {
		b.times = slices.Insert(b.times, i, t)
	}
}

// blocks is p.blocks(k), computed once.
func (b *board) blocks(k int) []int {
	f, ok := b.firsts[k]
	if !ok {
		f = b.p.blocks(k)
		b.firsts[k] = f
	}
	return f
}

// fits says whether devices first..first+k-1 are free from s to e.
func (b *board) fits(first, k int, s, e float64) bool {
	for d := first; d < first+k; d++ {
		if before(s, b.p.free(d)) {
			return false
		}
		for _, x := range b.busy[d] {
			if before(s, x.e) && before(x.s, e) {
				return false
			}
		}
	}
	return true
}

// take marks devices first..first+k-1 taken from s to e.
func (b *board) take(first, k int, s, e float64) {
	for d := first; d < first+k; d++ {
		i, _ := slices.BinarySearchFunc(b.busy[d], s, func(x span, t float64) int {
			switch {
			case x.s < t:
				return -1
			case x.s > t:
				return 1
			}
			return 0
		})
		b.busy[d] = slices.Insert(b.busy[d], i, span{s, e})
	}
	b.addTime(e)
}

// idleBefore is the time device d would stand idle just before t: from
// the last end before t (or when it is free) to t.
func (b *board) idleBefore(d int, t float64) float64 {
	last := b.p.free(d)
	for _, x := range b.busy[d] {
		if !before(t, x.e) {
			last = max(last, x.e)
		}
	}
	return max(0, t-last)
}

// earliest is where a job of k devices and dur seconds, ready at ready,
// starts soonest: the earliest moment some block of k devices is free for
// dur, and of the blocks free then, the one that leaves the least idle
// time behind it (then one aligned to k, then the lowest). The moments
// tried are ready and every time a device frees up after it: a job can
// always be moved earlier to one of them.
func (b *board) earliest(k int, ready, dur float64) (first int, start float64) {
	i, _ := slices.BinarySearch(b.times, ready)
	firsts := b.blocks(k)
	freeRun := make([]int, b.p.Devices+1) // freeRun[d+1]: devices free among 0..d
	for _, t := range append([]float64{ready}, b.times[i:]...) {
		for d := range b.busy {
			freeRun[d+1] = freeRun[d]
			if b.fits(d, 1, t, t+dur) {
				freeRun[d+1]++
			}
		}
		best, bestIdle := -1, 0.0
		for _, f := range firsts {
			if freeRun[f+k]-freeRun[f] != k {
				continue
			}
			idle := 0.0
			for d := f; d < f+k; d++ {
				idle += b.idleBefore(d, t)
			}
			if best < 0 || before(idle, bestIdle) || !before(bestIdle, idle) && f%k == 0 && best%k != 0 {
				best, bestIdle = f, idle
			}
		}
		if best >= 0 {
			return best, t
		}
	}
	panic("sweep: no block is ever free") // the last end frees every device
}

// place builds the schedule of the jobs in order (each after the jobs it
// waits for), job j on its choice alloc[j], each at its earliest.
func (p *Problem) place(order, alloc []int) *Schedule {
	b := newBoard(p)
	s := &Schedule{Slots: make([]Slot, len(p.Jobs))}
	for _, j := range order {
		c := p.Jobs[j].Choices[alloc[j]]
		r := p.ready(j)
		for _, a := range p.Jobs[j].After {
			r = max(r, s.Slots[a].End)
		}
		f, t := b.earliest(c.Devices, r, c.Seconds)
		b.take(f, c.Devices, t, t+c.Seconds)
		s.Slots[j] = Slot{Job: j, Devices: c.Devices, First: f, Start: t, End: t + c.Seconds}
		s.Makespan = max(s.Makespan, t+c.Seconds)
	}
	return s
}

// order is the jobs by priority, highest first, each after the jobs it
// waits for: of the jobs whose waits are placed, the highest next (the
// lower index on a tie).
func (p *Problem) order(prio []float64) []int {
	waits := make([]int, len(p.Jobs))
	next := make([][]int, len(p.Jobs))
	for j, job := range p.Jobs {
		waits[j] = len(job.After)
		for _, a := range job.After {
			next[a] = append(next[a], j)
		}
	}
	var ready, out []int
	for j := range p.Jobs {
		if waits[j] == 0 {
			ready = append(ready, j)
		}
	}
	for len(ready) > 0 {
		bi := 0
		for i, j := range ready {
			if prio[j] > prio[ready[bi]] || prio[j] == prio[ready[bi]] && j < ready[bi] {
				bi = i
			}
		}
		j := ready[bi]
		ready = slices.Delete(ready, bi, bi+1)
		out = append(out, j)
		for _, k := range next[j] {
			if waits[k]--; waits[k] == 0 {
				ready = append(ready, k)
			}
		}
	}
	return out
}

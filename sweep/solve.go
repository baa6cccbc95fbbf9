package sweep

import (
	"math"
	"math/rand/v2"
	"slices"
)

// placeBudget bounds the jobs Solve's local search places, over all the
// schedules it builds (each places every job under each priority): a
// sweep of hundreds of jobs must still plan in seconds.
const placeBudget = 120_000

// evalBudget is how many allotments the local search may try on p.
func (p *Problem) evalBudget() int { return min(maxEvals, max(50, placeBudget/(4*len(p.Jobs)))) }

// maxEvals bounds the allotments tried on a small sweep, whose kicks would
// otherwise run on long after they stop finding shorter schedules.
const maxEvals = 1500

// Solve schedules p: for each job a device count (one of its choices),
// its devices and its start, so that the last job ends as early as it can
// find, never two jobs on one device at once and each job after those it
// waits for. It is a heuristic (Exact is the oracle on small problems):
//
//  1. Allotment, as CPA (Rădulescu and van Gemund's critical path and area
//     rule): every job starts on its cheapest choice (least devices ×
//     seconds); while the critical path is longer than the work spread
//     over every device, the job on it that gains most time per device-
//     second added moves to its next choice. Every allotment on the way is
//     kept.
//  2. Each allotment is placed by list scheduling under several priorities
//     (longest path to the end, most work, most devices, file order): each
//     job in turn at the earliest moment a block of its devices is free,
//     idle gaps filled (backfilling).
//  3. From the best, one job at a time moves to each of its other choices
//     while that shortens the schedule (within a budget).
//
// The baselines (OneAtATime, EqualSplit) are candidates too, so Solve's
// makespan is never longer than theirs.
func Solve(p Problem) (*Schedule, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	best := OneAtATime(p)
	if s := EqualSplit(p); s.Makespan < best.Makespan {
		best = s
	}
	var bestAlloc []int
	allocSpan := math.Inf(1) // the best allotment's makespan
	try := func(alloc []int) *Schedule {
		s := p.bestPlacement(alloc)
		if before(s.Makespan, best.Makespan) {
			best = s
		}
		if before(s.Makespan, allocSpan) {
			bestAlloc, allocSpan = slices.Clone(alloc), s.Makespan
		}
		return s
	}
	for _, alloc := range p.allotments() {
		try(alloc)
	}
	p.improve(bestAlloc, try)
	return best, nil
}

// bestPlacement is the shortest of alloc's list schedules.
func (p *Problem) bestPlacement(alloc []int) *Schedule {
	var best *Schedule
	for _, prio := range p.priorities(alloc) {
		s := p.place(p.order(prio), alloc)
		if best == nil || before(s.Makespan, best.Makespan) {
			best = s
		}
	}
	return best
}

// priorities are the list schedules' orders for alloc: the longest path
// from a job to the end of the sweep, a job's work (devices × seconds), its
// devices, and the file's order.
func (p *Problem) priorities(alloc []int) [][]float64 {
	n := len(p.Jobs)
	bottom, area, devs, file := p.bottomLevels(alloc), make([]float64, n), make([]float64, n), make([]float64, n)
	for j := range p.Jobs {
		c := p.Jobs[j].Choices[alloc[j]]
		area[j], devs[j], file[j] = float64(c.Devices)*c.Seconds, float64(c.Devices)+c.Seconds*1e-12, float64(n-j)
	}
	return [][]float64{bottom, area, devs, file}
}

// bottomLevels is, for each job, the longest chain of durations from its
// start to the end of the last job that waits for it, through it.
func (p *Problem) bottomLevels(alloc []int) []float64 {
	order, _ := p.topo()
	bl := make([]float64, len(p.Jobs))
	for i := len(order) - 1; i >= 0; i-- {
		j := order[i]
		bl[j] += p.Jobs[j].Choices[alloc[j]].Seconds
		for _, a := range p.Jobs[j].After {
			bl[a] = max(bl[a], bl[j])
		}
	}
	return bl
}

// topLevels is, for each job, the earliest it could start with unlimited
// devices: its ready time and the chains before it.
func (p *Problem) topLevels(alloc []int) []float64 {
	order, _ := p.topo()
	tl := make([]float64, len(p.Jobs))
	for _, j := range order {
		tl[j] = max(tl[j], p.ready(j))
		for _, a := range p.Jobs[j].After {
			tl[j] = max(tl[j], tl[a]+p.Jobs[a].Choices[alloc[a]].Seconds)
		}
	}
	return tl
}

// allotments are CPA's allotments, from every job on its cheapest choice
// to where no job on the critical path can grow, and a few past the point
// where the critical path no longer exceeds the work per device.
func (p *Problem) allotments() [][]int {
	alloc := make([]int, len(p.Jobs))
	for j, job := range p.Jobs {
		for c := range job.Choices {
			if area(job.Choices[c]) < area(job.Choices[alloc[j]]) {
				alloc[j] = c
			}
		}
	}
	out := [][]int{append([]int(nil), alloc...)}
	past := 0
	for len(out) < 4*len(p.Jobs)*8 {
		if p.criticalPath(alloc) <= p.workPerDevice(alloc) {
			if past++; past > len(p.Jobs) {
				break
			}
		}
		j := p.growOnCriticalPath(alloc)
		if j < 0 {
			break
		}
		alloc[j]++
		out = append(out, append([]int(nil), alloc...))
	}
	return out
}

func area(c Choice) float64 { return float64(c.Devices) * c.Seconds }

// criticalPath is the longest chain of ready time and durations.
func (p *Problem) criticalPath(alloc []int) float64 {
	tl, bl := p.topLevels(alloc), p.bottomLevels(alloc)
	cp := 0.0
	for j := range p.Jobs {
		cp = max(cp, tl[j]+bl[j])
	}
	return cp
}

// workPerDevice is the jobs' device-seconds and the devices' busy time,
// spread over every device.
func (p *Problem) workPerDevice(alloc []int) float64 {
	w := 0.0
	for j, job := range p.Jobs {
		w += area(job.Choices[alloc[j]])
	}
	for d := 0; d < p.Devices; d++ {
		w += p.free(d)
	}
	return w / float64(p.Devices)
}

// growOnCriticalPath is the job on the critical path whose next choice
// saves the most seconds per device-second it adds, or -1 when none can
// grow.
func (p *Problem) growOnCriticalPath(alloc []int) int {
	tl, bl := p.topLevels(alloc), p.bottomLevels(alloc)
	cp := p.criticalPath(alloc)
	best, bestGain := -1, 0.0
	for j, job := range p.Jobs {
		if alloc[j]+1 >= len(job.Choices) || before(tl[j]+bl[j], cp) {
			continue
		}
		cur, next := job.Choices[alloc[j]], job.Choices[alloc[j]+1]
		gain := (cur.Seconds - next.Seconds) / math.Max(area(next)-area(cur), 1e-12*area(cur))
		if gain > bestGain {
			best, bestGain = j, gain
		}
	}
	return best
}

// improve searches the allotments around start (try builds each one's
// schedule and keeps the best): a descent that moves one job at a time to
// another of its choices while that shortens the schedule, then kicks
// (two jobs moved at random, from a seed of the problem's size, then the
// descent again) until kickPatience kicks in a row find nothing shorter or
// the budget is spent. The kicks get out of what no single move improves:
// two jobs that each must shrink for a third to fit beside them.
func (p *Problem) improve(start []int, try func([]int) *Schedule) {
	moves := 0
	for _, job := range p.Jobs {
		moves += len(job.Choices) - 1
	}
	if moves == 0 {
		return
	}
	evals, budget := 0, p.evalBudget()
	eval := func(alloc []int) float64 { evals++; return try(alloc).Makespan }
	descend := func(alloc []int) float64 {
		cur := eval(alloc)
		for improved := true; improved && evals < budget; {
			improved = false
			for j, job := range p.Jobs {
				for c := range job.Choices {
					if c == alloc[j] || evals >= budget {
						continue
					}
					old := alloc[j]
					if alloc[j] = c; p.tryMove(eval, alloc, &cur) {
						improved = true
					} else {
						alloc[j] = old
					}
				}
			}
		}
		return cur
	}
	best := slices.Clone(start)
	span := descend(best)
	r := rand.New(rand.NewPCG(uint64(len(p.Jobs)), uint64(p.Devices)))
	for dry := 0; dry < kickPatience && evals < budget; dry++ {
		alloc := slices.Clone(best)
		for range 2 {
			j := r.IntN(len(p.Jobs))
			alloc[j] = r.IntN(len(p.Jobs[j].Choices))
		}
		if m := descend(alloc); before(m, span) {
			best, span, dry = alloc, m, -1
		}
	}
}

// kickPatience is how many kicks in a row improve tries without finding a
// shorter schedule before it stops.
const kickPatience = 16

// tryMove says whether alloc's schedule is shorter than *cur, and if so
// makes it the current one.
func (p *Problem) tryMove(eval func([]int) float64, alloc []int, cur *float64) bool {
	if m := eval(alloc); before(m, *cur) {
		*cur = m
		return true
	}
	return false
}

// LowerBound is a time no schedule of p beats, the larger of two: the
// longest chain of the jobs' shortest durations after their ready times;
// and the least T at which the jobs fit in the devices' time, each on its
// least work among its choices that take at most T (with the devices'
// busy time): a schedule of makespan T runs every job on such a choice.
func LowerBound(p Problem) float64 {
	alloc := make([]int, len(p.Jobs))
	var times []float64
	for j, job := range p.Jobs {
		alloc[j] = fastest(job)
		for _, c := range job.Choices {
			times = append(times, c.Seconds)
		}
	}
	busy := 0.0
	for d := 0; d < p.Devices; d++ {
		busy += p.free(d)
	}
	slices.Sort(times)
	times = slices.Compact(times)
	n := float64(p.Devices)
	area := math.Inf(1)
	for i, t := range times { // the work is constant from times[i] to the next
		if w, ok := p.workWithin(t); ok {
			if at := math.Max(t, (w+busy)/n); i == len(times)-1 || at < times[i+1] {
				area = at
				break
			}
		}
	}
	return math.Max(p.criticalPath(alloc), area)
}

// workWithin is the jobs' least work, each on a choice of at most t
// seconds, and false when some job has none.
func (p *Problem) workWithin(t float64) (float64, bool) {
	w := 0.0
	for _, job := range p.Jobs {
		least := math.Inf(1)
		for _, c := range job.Choices {
			if c.Seconds <= t {
				least = math.Min(least, area(c))
			}
		}
		if math.IsInf(least, 1) {
			return 0, false
		}
		w += least
	}
	return w, true
}

package sweep

import (
	"fmt"
	"math"
	"slices"
)

// State is where a job of a sweep being run stands.
type State int

const (
	Pending State = iota // not started
	Running
	Ended
	Failed
	Skipped // it waits for a job that failed
)

func (s State) String() string {
	return [...]string{"pending", "running", "ended", "failed", "skipped"}[s]
}

// Progress is a schedule being carried out, the deterministic core of a
// sweep's run (the driver owns the clock and the jobs): it says which jobs
// may start, takes their starts and ends as they happen, and re-plans the
// jobs not started when a job's measured time drifts from its prediction
// (Saturn's introspection).
//
// The driver's duties, with now in seconds from the sweep's start:
//
//  1. Start every slot Next returns, calling Start(job, now) as it does.
//  2. Call End(job, now) when a job ends well, Fail(job, now) when it does
//     not (the jobs that wait for it are skipped); then Next again.
//  3. Stop once Done.
//
// A job starts when the jobs it waits for have ended, no running job holds
// its devices and every job planned before it on any of its devices has
// started: each device runs its jobs in the plan's order, as soon as it
// can (a job that ends early moves the rest earlier; none moves later).
//
// A job's prediction is its choice's seconds times the scale: the median,
// over the jobs ended, of measured over planned. When a job ends more
// than Drift away from its prediction (by ratio), every job not started is
// planned again (Solve) with that scale, from now and the running jobs'
// predicted ends, on any of its choices.
type Progress struct {
	p       Problem
	plan    *Schedule
	state   []State
	drift   float64
	ratios  []float64 // measured over planned, of the jobs ended
	replans int
}

// NewProgress starts carrying out s, a schedule of p (Check), re-planning
// when a job ends more than drift (a ratio, such as 0.1) off its
// prediction; drift 0 or less never re-plans.
func NewProgress(p Problem, s *Schedule, drift float64) (*Progress, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := s.Check(p); err != nil {
		return nil, fmt.Errorf("sweep: not a schedule of the problem: %w", err)
	}
	if math.IsNaN(drift) || math.IsInf(drift, 0) {
		return nil, problemErr(-1, "drift", "must be a finite ratio, got %g", drift)
	}
	plan := &Schedule{Slots: slices.Clone(s.Slots), Makespan: s.Makespan}
	return &Progress{p: p, plan: plan, state: make([]State, len(p.Jobs)), drift: drift}, nil
}

// Plan is the schedule as it stands: the jobs started at their starts,
// the ended at their ends, the rest where the last plan put them.
func (g *Progress) Plan() *Schedule {
	s := &Schedule{Slots: slices.Clone(g.plan.Slots)}
	for _, sl := range s.Slots {
		s.Makespan = max(s.Makespan, sl.End)
	}
	return s
}

// State is where job j stands.
func (g *Progress) State(j int) State { return g.state[j] }

// Replans is how many times the jobs not started were planned again.
func (g *Progress) Replans() int { return g.replans }

// Scale is the median of the ended jobs' measured over planned times (1
// before any has ended; never below minScale, so that a job measured to
// take no time leaves the rest a duration).
func (g *Progress) Scale() float64 {
	if len(g.ratios) == 0 {
		return 1
	}
	r := slices.Clone(g.ratios)
	slices.Sort(r)
	m := r[len(r)/2]
	if n := len(r); n%2 == 0 {
		m = (r[n/2-1] + r[n/2]) / 2
	}
	return math.Max(m, minScale)
}

// minScale is the least scale a prediction takes.
const minScale = 1e-6

// Done says whether no job is pending or running.
func (g *Progress) Done() bool {
	for _, s := range g.state {
		if s == Pending || s == Running {
			return false
		}
	}
	return true
}

// Next is the slots of the jobs that may start now, by planned start.
func (g *Progress) Next() []Slot {
	var out []Slot
	for j, sl := range g.plan.Slots {
		if g.state[j] == Pending && g.mayStart(j, sl) {
			out = append(out, sl)
		}
	}
	slices.SortStableFunc(out, func(a, b Slot) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	return out
}

// mayStart says whether pending job j, planned at sl, may start now.
func (g *Progress) mayStart(j int, sl Slot) bool {
	for _, a := range g.p.Jobs[j].After {
		if g.state[a] != Ended {
			return false
		}
	}
	for i, o := range g.plan.Slots {
		if i == j || !sharesDevice(sl, o) {
			continue
		}
		switch g.state[i] {
		case Running:
			return false
		case Pending:
			if o.Start < sl.Start || o.Start == sl.Start && i < j {
				return false // planned before it on a device of its
			}
		}
	}
	return true
}

// sharesDevice says whether two slots' blocks meet, whenever they run.
func sharesDevice(a, b Slot) bool {
	return a.First < b.First+b.Devices && b.First < a.First+a.Devices
}

// Start records that job j started at now, on its planned devices.
func (g *Progress) Start(j int, now float64) {
	sl := &g.plan.Slots[j]
	sl.Start, sl.End = now, now+g.predicted(j, sl.Devices)
	g.state[j] = Running
}

// predicted is job j's predicted seconds on devices devices: its choice's,
// times the scale.
func (g *Progress) predicted(j, devices int) float64 {
	return g.choice(j, devices).Seconds * g.Scale()
}

// choice is job j's choice on devices devices.
func (g *Progress) choice(j, devices int) Choice {
	i := slices.IndexFunc(g.p.Jobs[j].Choices, func(c Choice) bool { return c.Devices == devices })
	return g.p.Jobs[j].Choices[i]
}

// End records that job j ended well at now, and says whether the jobs not
// started were planned again.
func (g *Progress) End(j int, now float64) bool {
	sl := &g.plan.Slots[j]
	want := sl.End - sl.Start
	took := now - sl.Start
	sl.End = now
	g.state[j] = Ended
	g.ratios = append(g.ratios, took/g.choice(j, sl.Devices).Seconds)
	if g.drift <= 0 || want <= 0 || math.Abs(took/want-1) <= g.drift || !g.anyPending() {
		return false
	}
	g.replan(now)
	return true
}

// Fail records that job j failed at now; the jobs that wait for it, and
// those that wait for them, are skipped, and returned.
func (g *Progress) Fail(j int, now float64) []int {
	g.plan.Slots[j].End = now
	g.state[j] = Failed
	var skipped []int
	for changed := true; changed; {
		changed = false
		for k, job := range g.p.Jobs {
			if g.state[k] != Pending {
				continue
			}
			for _, a := range job.After {
				if s := g.state[a]; s == Failed || s == Skipped {
					g.state[k], changed = Skipped, true
					skipped = append(skipped, k)
					break
				}
			}
		}
	}
	return skipped
}

func (g *Progress) anyPending() bool { return slices.Contains(g.state, Pending) }

// replan plans the pending jobs again from now, every choice's time scaled
// by the measured scale, around the running jobs' predicted ends.
func (g *Progress) replan(now float64) {
	scale := g.Scale()
	var pending []int
	index := make([]int, len(g.p.Jobs)) // a pending job's index in the sub-problem
	for j, s := range g.state {
		index[j] = -1
		if s == Pending {
			index[j] = len(pending)
			pending = append(pending, j)
		}
	}
	sub := Problem{Devices: g.p.Devices, PerNode: g.p.PerNode, Free: make([]float64, g.p.Devices), Ready: make([]float64, len(pending))}
	for d := range sub.Free {
		sub.Free[d] = now
	}
	for j, s := range g.state {
		if s != Running {
			continue
		}
		sl := &g.plan.Slots[j]
		sl.End = math.Max(now, sl.Start+g.predicted(j, sl.Devices))
		for d := sl.First; d < sl.First+sl.Devices; d++ {
			sub.Free[d] = sl.End
		}
	}
	for k, j := range pending {
		job := Job{Name: g.p.Jobs[j].Name}
		for _, c := range g.p.Jobs[j].Choices {
			job.Choices = append(job.Choices, Choice{c.Devices, c.Seconds * scale})
		}
		sub.Ready[k] = now
		for _, a := range g.p.Jobs[j].After {
			if index[a] >= 0 {
				job.After = append(job.After, index[a])
			} else if g.state[a] == Running {
				sub.Ready[k] = math.Max(sub.Ready[k], g.plan.Slots[a].End)
			}
		}
		sub.Jobs = append(sub.Jobs, job)
	}
	s, err := Solve(sub)
	if err != nil {
		panic(fmt.Sprintf("sweep: re-planning a valid sweep: %v", err)) // scaled choices of a valid problem are valid
	}
	for k, j := range pending {
		sl := s.Slots[k]
		sl.Job = j
		g.plan.Slots[j] = sl
	}
	g.replans++
}

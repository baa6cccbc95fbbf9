package sweep

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// MaxDevices is the most devices a problem may have (plan.MaxDevices).
const MaxDevices = 4096

// Choice is one way to run a job: on Devices devices, taking Seconds from
// its start to its end (its steps times the planner's iteration time there).
type Choice struct {
	Devices int
	Seconds float64
}

// Job is one job of a sweep as the scheduler sees it: the device counts it
// may run on and the jobs it waits for.
type Job struct {
	Name string
	// Choices, by devices ascending: each count the planner found a plan
	// for (a count no faster than a smaller one is no choice: Prune).
	Choices []Choice
	// After are the indices of the jobs it starts after.
	After []int
}

// Problem is a sweep to schedule: jobs on Devices identical devices,
// PerNode to a node.
type Problem struct {
	Devices int
	// PerNode is the devices of a node (1..Devices): a job on fewer lies
	// within one node, a job on as many or more starts at a node's first
	// device, so that its plan's nodes are the cluster's.
	PerNode int
	Jobs    []Job
	// Free, when set (one entry per device), is when each device is free:
	// no job starts on it before (a re-plan's devices still busy).
	Free []float64
	// Ready, when set (one entry per job), is the earliest each job may
	// start (a re-plan's now, or the end of a job it waits for that is
	// still running).
	Ready []float64
}

// ProblemError is one thing wrong with a problem: the job (-1: the problem
// as a whole) and the field.
type ProblemError struct {
	Job   int
	Field string
	Msg   string
}

func (e *ProblemError) Error() string {
	if e.Job < 0 {
		return "sweep: " + e.Field + ": " + e.Msg
	}
	return fmt.Sprintf("sweep: job %d: %s: %s", e.Job, e.Field, e.Msg)
}

func problemErr(job int, field, format string, args ...any) error {
	return &ProblemError{job, field, fmt.Sprintf(format, args...)}
}

// Validate refuses a problem that no schedule can be made of: no devices,
// a job with no choice or a choice outside the devices, a duration that is
// not positive and finite, an After that names no job or forms a cycle,
// and Free and Ready of the wrong length or not finite.
func (p *Problem) Validate() error {
	switch {
	case p.Devices < 1 || p.Devices > MaxDevices:
		return problemErr(-1, "Devices", "must be between 1 and %d, got %d", MaxDevices, p.Devices)
	case p.PerNode < 1 || p.PerNode > p.Devices:
		return problemErr(-1, "PerNode", "must be between 1 and the %d devices, got %d", p.Devices, p.PerNode)
	case len(p.Jobs) == 0:
		return problemErr(-1, "Jobs", "no job to schedule")
	case p.Free != nil && len(p.Free) != p.Devices:
		return problemErr(-1, "Free", "%d entries for %d devices", len(p.Free), p.Devices)
	case p.Ready != nil && len(p.Ready) != len(p.Jobs):
		return problemErr(-1, "Ready", "%d entries for %d jobs", len(p.Ready), len(p.Jobs))
	}
	for _, t := range append(slices.Clone(p.Free), p.Ready...) {
		if !(t >= 0) || math.IsInf(t, 0) {
			return problemErr(-1, "Free, Ready", "a time must be finite, not negative, got %g", t)
		}
	}
	for j := range p.Jobs {
		if err := p.validateJob(j); err != nil {
			return err
		}
	}
	if _, err := p.topo(); err != nil {
		return err
	}
	return nil
}

// validateJob checks job j's choices and After.
func (p *Problem) validateJob(j int) error {
	job := p.Jobs[j]
	if len(job.Choices) == 0 {
		return problemErr(j, "Choices", "job %q has no device count it runs on", job.Name)
	}
	for i, c := range job.Choices {
		switch {
		case c.Devices < 1 || c.Devices > p.Devices:
			return problemErr(j, "Choices", "%d devices, outside 1..%d", c.Devices, p.Devices)
		case i > 0 && c.Devices <= job.Choices[i-1].Devices:
			return problemErr(j, "Choices", "device counts must ascend: %d after %d", c.Devices, job.Choices[i-1].Devices)
		case !(c.Seconds > 0) || math.IsInf(c.Seconds, 0):
			return problemErr(j, "Choices", "on %d devices: a duration must be positive and finite, got %g", c.Devices, c.Seconds)
		}
	}
	for _, a := range job.After {
		if a < 0 || a >= len(p.Jobs) || a == j {
			return problemErr(j, "After", "job %d is no other job", a)
		}
	}
	return nil
}

// topo is the jobs in an order where each comes after those it waits for
// (by index among the ready), or an error naming a job on a cycle.
func (p *Problem) topo() ([]int, error) {
	indeg := make([]int, len(p.Jobs))
	next := make([][]int, len(p.Jobs))
	for j, job := range p.Jobs {
		for _, a := range job.After {
			indeg[j]++
			next[a] = append(next[a], j)
		}
	}
	var order, ready []int
	for j := range p.Jobs {
		if indeg[j] == 0 {
			ready = append(ready, j)
		}
	}
	for len(ready) > 0 {
		slices.Sort(ready)
		j := ready[0]
		ready = ready[1:]
		order = append(order, j)
		for _, k := range next[j] {
			if indeg[k]--; indeg[k] == 0 {
				ready = append(ready, k)
			}
		}
	}
	if len(order) < len(p.Jobs) {
		for j := range p.Jobs {
			if indeg[j] > 0 {
				return nil, problemErr(j, "After", "job %q waits for itself through a cycle", p.Jobs[j].Name)
			}
		}
	}
	return order, nil
}

// free is when device d is free.
func (p *Problem) free(d int) float64 {
	if p.Free == nil {
		return 0
	}
	return p.Free[d]
}

// ready is the earliest job j may start, its After aside.
func (p *Problem) ready(j int) float64 {
	if p.Ready == nil {
		return 0
	}
	return p.Ready[j]
}

// blocks is the first devices a job on k devices may take: k consecutive
// devices within one node when k is at most a node's, or from a node's
// first device on.
func (p *Problem) blocks(k int) []int {
	var firsts []int
	for f := 0; f+k <= p.Devices; f++ {
		if k <= p.PerNode && f/p.PerNode == (f+k-1)/p.PerNode || k > p.PerNode && f%p.PerNode == 0 {
			firsts = append(firsts, f)
		}
	}
	return firsts
}

// Counts is the device counts worth planning a job for on devices devices,
// perNode to a node: the powers of two up to devices, the multiples of a
// node that divide the devices, and all of them; none for devices outside
// 1..MaxDevices, which no problem has (Validate).
func Counts(devices, perNode int) []int {
	if devices < 1 || devices > MaxDevices {
		return nil
	}
	var ks []int
	for k := 1; k <= devices; k *= 2 {
		ks = append(ks, k)
	}
	for k := perNode; perNode > 0 && k <= devices; k += perNode {
		if devices%k == 0 {
			ks = append(ks, k)
		}
	}
	ks = append(ks, devices)
	slices.Sort(ks)
	return slices.Compact(ks)
}

// Prune keeps, by devices ascending, each choice faster than every choice
// on fewer devices: a job never gains from devices that do not speed it up.
func Prune(cs []Choice) []Choice {
	cs = slices.Clone(cs)
	slices.SortStableFunc(cs, func(a, b Choice) int {
		if a.Devices != b.Devices {
			return a.Devices - b.Devices
		}
		return cmp.Compare(a.Seconds, b.Seconds)
	})
	var out []Choice
	for _, c := range cs {
		if len(out) == 0 || c.Devices > out[len(out)-1].Devices && c.Seconds < out[len(out)-1].Seconds {
			out = append(out, c)
		}
	}
	return out
}

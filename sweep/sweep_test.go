package sweep

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// scaling is a job whose time on k devices follows Amdahl's law with
// serial fraction f: base × (f + (1-f)/k), for each k of ks.
func scaling(name string, base, f float64, ks ...int) Job {
	j := Job{Name: name}
	for _, k := range ks {
		j.Choices = append(j.Choices, Choice{k, base * (f + (1-f)/float64(k))})
	}
	return j
}

// random is a problem of n jobs on devices devices, perNode to a node,
// each job scaling by a serial fraction of its own over the counts the
// planner would try, some of them waiting for earlier ones.
func random(r *rand.Rand, n, devices, perNode int, waits bool) Problem {
	p := Problem{Devices: devices, PerNode: perNode}
	for j := 0; j < n; j++ {
		job := scaling(fmt.Sprint("j", j), 10+90*r.Float64(), 0.5*r.Float64(), Counts(devices, perNode)...)
		if min := 1 << r.IntN(2); min > 1 { // some jobs need more than one device (memory)
			job.Choices = slices.DeleteFunc(job.Choices, func(c Choice) bool { return c.Devices < min })
		}
		if waits && j > 0 && r.IntN(3) == 0 {
			job.After = []int{r.IntN(j)}
		}
		p.Jobs = append(p.Jobs, job)
	}
	return p
}

func TestValidate(t *testing.T) {
	ok := func() Problem {
		return Problem{Devices: 4, PerNode: 2, Jobs: []Job{scaling("a", 10, 0.1, 1, 2, 4), scaling("b", 10, 0.1, 1, 2)}}
	}
	cases := []struct {
		name  string
		edit  func(*Problem)
		job   int
		field string
	}{
		{"no devices", func(p *Problem) { p.Devices = 0 }, -1, "Devices"},
		{"per node", func(p *Problem) { p.PerNode = 8 }, -1, "PerNode"},
		{"no jobs", func(p *Problem) { p.Jobs = nil }, -1, "Jobs"},
		{"free", func(p *Problem) { p.Free = []float64{0} }, -1, "Free"},
		{"ready", func(p *Problem) { p.Ready = []float64{0, math.NaN()} }, -1, "Free, Ready"},
		{"no choice", func(p *Problem) { p.Jobs[1].Choices = nil }, 1, "Choices"},
		{"too many devices", func(p *Problem) { p.Jobs[1].Choices[1].Devices = 5 }, 1, "Choices"},
		{"not ascending", func(p *Problem) { p.Jobs[0].Choices[1].Devices = 1 }, 0, "Choices"},
		{"no time", func(p *Problem) { p.Jobs[0].Choices[0].Seconds = 0 }, 0, "Choices"},
		{"after nobody", func(p *Problem) { p.Jobs[0].After = []int{2} }, 0, "After"},
		{"after itself", func(p *Problem) { p.Jobs[0].After = []int{0} }, 0, "After"},
		{"cycle", func(p *Problem) { p.Jobs[0].After, p.Jobs[1].After = []int{1}, []int{0} }, 0, "After"},
	}
	good := ok()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := ok()
			c.edit(&p)
			var pe *ProblemError
			if err := p.Validate(); !errors.As(err, &pe) || pe.Job != c.job || pe.Field != c.field {
				t.Fatalf("%v: want job %d field %s", err, c.job, c.field)
			}
		})
	}
}

func TestCountsAndBlocks(t *testing.T) {
	for _, c := range []struct {
		devices, perNode int
		want             []int
	}{{32, 4, []int{1, 2, 4, 8, 12, 16, 20, 24, 28, 32}[:0]}, {4, 4, []int{1, 2, 4}}, {12, 4, []int{1, 2, 4, 8, 12}}, {3, 1, []int{1, 2, 3}}} {
		if c.devices == 32 {
			c.want = []int{1, 2, 4, 8, 16, 32}
		}
		if got := Counts(c.devices, c.perNode); !slices.Equal(got, c.want) {
			t.Errorf("Counts(%d, %d) = %v, want %v", c.devices, c.perNode, got, c.want)
		}
	}
	// outside 1..MaxDevices, none: doubling a count near 2^63 once
	// overflowed to 0 and went on for ever
	done := make(chan []int)
	go func() { done <- Counts(math.MaxInt, 4) }()
	select {
	case got := <-done:
		if got != nil {
			t.Errorf("Counts(MaxInt, 4) = %d counts, want none", len(got))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Counts(MaxInt, 4) did not return")
	}
	if got := Counts(MaxDevices+1, 4); got != nil {
		t.Errorf("Counts(%d, 4) = %v, want none", MaxDevices+1, got)
	}
	p := Problem{Devices: 12, PerNode: 4}
	for k, want := range map[int][]int{1: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 3: {0, 1, 4, 5, 8, 9}, 4: {0, 4, 8}, 8: {0, 4}, 12: {0}} {
		if got := p.blocks(k); !slices.Equal(got, want) {
			t.Errorf("blocks(%d) = %v, want %v", k, got, want)
		}
	}
}

func TestPrune(t *testing.T) {
	got := Prune([]Choice{{8, 3}, {1, 10}, {2, 6}, {4, 6}, {2, 5}, {16, 3.5}})
	if want := []Choice{{1, 10}, {2, 5}, {8, 3}}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// TestBaselinesByHand: two jobs on 4 devices, one that scales perfectly
// (40 s on 1, 10 on 4) and one that does not (10 s on any count): one at a
// time takes 10 + 10; equal split puts each on 2 (20 and 10); the best
// puts the second on 1 device beside the first on 3... which is no
// choice, so beside it on 2 (20) or after it (20): 20 either way.
func TestBaselinesByHand(t *testing.T) {
	p := Problem{Devices: 4, PerNode: 4, Jobs: []Job{
		{Name: "scales", Choices: []Choice{{1, 40}, {2, 20}, {4, 10}}},
		{Name: "flat", Choices: []Choice{{1, 10}}},
	}}
	if s := OneAtATime(p); s.Makespan != 20 || s.Slots[1].Start != 10 {
		t.Errorf("one at a time: %+v", s)
	}
	if s := EqualSplit(p); s.Makespan != 20 || s.Slots[0].Devices != 2 || s.Slots[1].Start != 0 {
		t.Errorf("equal split: %+v", s)
	}
	p.Jobs = append(p.Jobs, Job{Name: "flat2", Choices: []Choice{{1, 10}}}, Job{Name: "flat3", Choices: []Choice{{1, 10}}, After: []int{1}})
	s, err := Solve(p)
	if err != nil {
		t.Fatal(err)
	}
	// scales on 2 devices for 20 s beside flat then flat3 on one and
	// flat2 on the other: 20 s, against 40 one at a time
	if err := s.Check(p); err != nil || s.Makespan != 20 || OneAtATime(p).Makespan != 40 {
		t.Fatalf("%v: %+v", err, s)
	}
}

// TestSolveAgainstExact: on small sweeps (2 to 5 jobs, 4 devices, waits
// among them, some with busy devices and late jobs) the heuristic's
// schedule is valid and within 10% of the
// shortest, which the enumeration finds; the lower bound is below both.
func TestSolveAgainstExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 51))
	worst, sum, n := 1.0, 0.0, 0
	for trial := 0; trial < 60; trial++ {
		p := random(r, 2+trial%4, 4, 2+2*(trial%2), trial%3 == 0)
		if trial%5 == 4 { // a re-plan's: devices busy for a while, jobs ready later
			p.Free, p.Ready = make([]float64, p.Devices), make([]float64, len(p.Jobs))
			for d := range p.Free {
				p.Free[d] = float64(r.IntN(3) * 10)
			}
			for j := range p.Ready {
				p.Ready[j] = float64(r.IntN(2) * 15)
			}
		}
		h, err := Solve(p)
		if err != nil {
			t.Fatal(err)
		}
		x, err := Exact(p, 2_000_000)
		if errors.Is(err, ErrTooLarge) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*Schedule{h, x} {
			if err := s.Check(p); err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
		}
		lb := LowerBound(p)
		if before(h.Makespan, x.Makespan) || before(x.Makespan, lb) {
			t.Fatalf("trial %d: heuristic %g, exact %g, bound %g", trial, h.Makespan, x.Makespan, lb)
		}
		ratio := h.Makespan / x.Makespan
		worst, sum, n = max(worst, ratio), sum+ratio, n+1
	}
	t.Logf("%d sweeps solved exactly: heuristic / exact mean %.4f, worst %.4f", n, sum/float64(n), worst)
	if n < 40 || worst > 1.10 {
		t.Fatalf("%d sweeps solved exactly, worst heuristic / exact %.4f", n, worst)
	}
}

// TestExactFindsTheOptimum: a sweep whose best schedule list scheduling
// misses at first: Exact finds the known optimum, 10 s.
func TestExactFindsTheOptimum(t *testing.T) {
	p := Problem{Devices: 2, PerNode: 2, Jobs: []Job{
		{Name: "a", Choices: []Choice{{1, 6}}}, {Name: "b", Choices: []Choice{{1, 4}}},
		{Name: "c", Choices: []Choice{{1, 4}}}, {Name: "d", Choices: []Choice{{1, 6}}},
	}}
	x, err := Exact(p, 1_000_000)
	if err != nil || x.Makespan != 10 {
		t.Fatalf("%v: %+v", err, x)
	}
}

// TestSolveAtScale: larger sweeps (8 to 64 jobs on 32 and 128 devices),
// where Exact cannot finish: valid schedules, never after the baselines,
// never holding more devices than there are, and within 25% of the lower
// bound (which no schedule beats: the factor overstates the gap to the
// optimum).
func TestSolveAtScale(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 7))
	for _, c := range []struct{ jobs, devices, trials int }{{8, 32, 3}, {16, 32, 3}, {32, 32, 2}, {64, 128, 1}} {
		worst := 1.0
		for trial := 0; trial < c.trials; trial++ {
			p := random(r, c.jobs, c.devices, 4, trial == 1)
			s, err := Solve(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(p); err != nil {
				t.Fatal(err)
			}
			if s.Peak() > p.Devices || before(OneAtATime(p).Makespan, s.Makespan) || before(EqualSplit(p).Makespan, s.Makespan) {
				t.Fatalf("%d jobs: peak %d, makespan %g against %g and %g", c.jobs, s.Peak(), s.Makespan, OneAtATime(p).Makespan, EqualSplit(p).Makespan)
			}
			worst = max(worst, s.Makespan/LowerBound(p))
		}
		t.Logf("%d jobs on %d devices: heuristic / lower bound at worst %.3f", c.jobs, c.devices, worst)
		if worst > 1.25 {
			t.Errorf("%d jobs on %d devices: %.3f × the lower bound", c.jobs, c.devices, worst)
		}
	}
}

// TestPeak counts the devices held at once.
func TestPeak(t *testing.T) {
	s := &Schedule{Slots: []Slot{{0, 2, 0, 0, 5}, {1, 2, 2, 1, 3}, {2, 4, 0, 5, 6}}}
	if s.Peak() != 4 {
		t.Fatalf("peak %d", s.Peak())
	}
}

func TestCheckRefuses(t *testing.T) {
	p := Problem{Devices: 4, PerNode: 2, Jobs: []Job{scaling("a", 10, 0, 1, 2), scaling("b", 10, 0, 1, 2)}}
	p.Jobs[1].After = []int{0}
	good := &Schedule{Slots: []Slot{{0, 2, 0, 0, 5}, {1, 2, 0, 5, 10}}, Makespan: 10}
	if err := good.Check(p); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		s    *Schedule
		says string
	}{
		{"overlap", &Schedule{Slots: []Slot{{0, 2, 0, 0, 5}, {1, 1, 1, 4, 14}}, Makespan: 14}, "before job"},
		{"duration", &Schedule{Slots: []Slot{{0, 2, 0, 0, 4}, {1, 2, 0, 5, 10}}, Makespan: 10}, "takes 4 s"},
		{"block", &Schedule{Slots: []Slot{{0, 2, 1, 0, 5}, {1, 2, 0, 5, 10}}, Makespan: 10}, "no block"},
		{"choice", &Schedule{Slots: []Slot{{0, 4, 0, 0, 5}, {1, 2, 0, 5, 10}}, Makespan: 10}, "no choice"},
		{"makespan", &Schedule{Slots: []Slot{{0, 2, 0, 0, 5}, {1, 2, 0, 5, 10}}, Makespan: 9}, "makespan"},
	} {
		if err := c.s.Check(p); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %q", c.name, err, c.says)
		}
	}
	p.Jobs[1].After = nil
	shared := &Schedule{Slots: []Slot{{0, 2, 0, 0, 5}, {1, 1, 1, 4, 14}}, Makespan: 14}
	if err := shared.Check(p); err == nil || !strings.Contains(err.Error(), "share a device") {
		t.Errorf("shared: %v", err)
	}
}

package sweep

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// run carries s out as a driver would, each job taking its planned time
// (its choice's seconds) times factor(j), and returns the progress and
// each job's slot as it ran.
func run(t *testing.T, p Problem, s *Schedule, drift float64, factor func(j int) float64) (*Progress, []Slot) {
	t.Helper()
	g, err := NewProgress(p, s, drift)
	if err != nil {
		t.Fatal(err)
	}
	ran := make([]Slot, len(p.Jobs))
	now := 0.0
	for !g.Done() {
		for _, sl := range g.Next() {
			g.Start(sl.Job, now)
			took := g.choice(sl.Job, sl.Devices).Seconds * factor(sl.Job)
			ran[sl.Job] = Slot{Job: sl.Job, Devices: sl.Devices, First: sl.First, Start: now, End: now + took}
		}
		next, job := math.Inf(1), -1
		for j, sl := range ran {
			if g.State(j) == Running && sl.End < next {
				next, job = sl.End, j
			}
		}
		if job < 0 {
			t.Fatalf("nothing runs and nothing starts at %g s: %v", now, g.state)
		}
		now = next
		g.End(job, now)
	}
	return g, ran
}

// valid checks that jobs as they ran never shared a device and each
// started after the jobs it waits for.
func valid(t *testing.T, p Problem, ran []Slot) {
	t.Helper()
	for i, a := range ran {
		for _, b := range ran[i+1:] {
			if a.overlaps(b) {
				t.Fatalf("jobs %d and %d ran on one device at once: %+v %+v", a.Job, b.Job, a, b)
			}
		}
		for _, w := range p.Jobs[i].After {
			if before(a.Start, ran[w].End) {
				t.Fatalf("job %d started before job %d it waits for ended", i, w)
			}
		}
	}
}

// TestProgressAsPlanned: jobs that take their predicted time run as
// planned, start for start.
func TestProgressAsPlanned(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 51))
	for trial := 0; trial < 20; trial++ {
		p := random(r, 3+trial%6, 8, 4, trial%2 == 0)
		s, _ := Solve(p)
		g, ran := run(t, p, s, 0.1, func(int) float64 { return 1 })
		for j, sl := range ran {
			if math.Abs(sl.Start-s.Slots[j].Start) > 1e-9*(1+sl.Start) || sl.First != s.Slots[j].First {
				t.Fatalf("trial %d: job %d ran %+v, planned %+v", trial, j, sl, s.Slots[j])
			}
		}
		if g.Replans() != 0 || math.Abs(g.Plan().Makespan-s.Makespan) > 1e-9*s.Makespan {
			t.Fatalf("trial %d: %d re-plans, makespan %g of %g", trial, g.Replans(), g.Plan().Makespan, s.Makespan)
		}
	}
}

// TestProgressDrift: jobs that take their own multiples of the prediction
// never share a device nor start before their waits, whether the rest is
// re-planned or not; when every job runs twice as long, the first end
// re-plans the rest at scale 2, and the sweep ends within 5% of twice the
// plan, while without re-planning it ends no earlier.
func TestProgressDrift(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 51))
	for trial := 0; trial < 20; trial++ {
		p := random(r, 3+trial%6, 8, 4, trial%2 == 0)
		s, _ := Solve(p)
		factors := make([]float64, len(p.Jobs))
		for j := range factors {
			factors[j] = 0.5 + 1.5*r.Float64()
		}
		for _, drift := range []float64{0, 0.1} {
			_, ran := run(t, p, s, drift, func(j int) float64 { return factors[j] })
			valid(t, p, ran)
		}
	}
	p := random(r, 8, 8, 4, false)
	s, _ := Solve(p)
	twice := func(int) float64 { return 2 }
	g, ran := run(t, p, s, 0.1, twice)
	valid(t, p, ran)
	if g.Replans() < 1 || g.Scale() != 2 || g.Plan().Makespan > 2.05*s.Makespan {
		t.Fatalf("%d re-plans, scale %g, makespan %g against %g planned", g.Replans(), g.Scale(), g.Plan().Makespan, s.Makespan)
	}
	still, _ := run(t, p, s, 0, twice)
	if still.Replans() != 0 || before(still.Plan().Makespan, g.Plan().Makespan) {
		t.Fatalf("without re-planning: %d re-plans, makespan %g", still.Replans(), still.Plan().Makespan)
	}
}

// TestProgressFail: a job that fails skips the jobs that wait for it, and
// those that wait for them; the others run.
func TestProgressFail(t *testing.T) {
	p := Problem{Devices: 2, PerNode: 2, Jobs: []Job{
		{Name: "a", Choices: []Choice{{1, 5}}}, {Name: "b", Choices: []Choice{{1, 5}}, After: []int{0}},
		{Name: "c", Choices: []Choice{{1, 5}}, After: []int{1}}, {Name: "d", Choices: []Choice{{1, 5}}},
	}}
	s, _ := Solve(p)
	g, _ := NewProgress(p, s, 0.1)
	next := g.Next()
	if len(next) != 2 || next[0].Job != 0 || next[1].Job != 3 {
		t.Fatalf("first: %+v", next)
	}
	g.Start(0, 0)
	g.Start(3, 0)
	if skipped := g.Fail(0, 1); !slices.Equal(skipped, []int{1, 2}) {
		t.Fatalf("skipped %v", skipped)
	}
	g.End(3, 5)
	if !g.Done() || g.State(1) != Skipped || g.State(0) != Failed || g.State(3) != Ended || len(g.Next()) != 0 {
		t.Fatalf("states %v", g.state)
	}
}

func TestNewProgressRefuses(t *testing.T) {
	p := Problem{Devices: 2, PerNode: 2, Jobs: []Job{{Name: "a", Choices: []Choice{{1, 5}}}}}
	if _, err := NewProgress(p, &Schedule{Slots: []Slot{{0, 1, 0, 0, 4}}, Makespan: 4}, 0.1); err == nil {
		t.Fatal("a schedule of another problem was taken")
	}
	if _, err := NewProgress(p, &Schedule{Slots: []Slot{{0, 1, 0, 0, 5}}, Makespan: 5}, math.NaN()); err == nil {
		t.Fatal("drift NaN was taken")
	}
}

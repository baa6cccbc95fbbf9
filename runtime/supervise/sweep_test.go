package supervise

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/sweep"
)

// sweepOf is a sweep of jobs of the given seconds on one device or two,
// job 3 waiting for job 0, on 4 devices, and its schedule.
func sweepOf(t *testing.T, secs ...float64) (sweep.Problem, *sweep.Schedule) {
	t.Helper()
	p := sweep.Problem{Devices: 4, PerNode: 4}
	for i, s := range secs {
		p.Jobs = append(p.Jobs, sweep.Job{Name: string(rune('a' + i)), Choices: []sweep.Choice{{Devices: 1, Seconds: s}, {Devices: 2, Seconds: s * 0.6}}})
	}
	p.Jobs[3].After = []int{0}
	s, err := sweep.Solve(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

// TestSweepRunner: jobs that sleep their planned time run as the schedule
// says: never two on a device at once, each after its waits, every start
// and end told, the measured makespan near the planned one: well below
// the jobs' 1 s one after another, whatever the machine's load.
func TestSweepRunner(t *testing.T) {
	p, s := sweepOf(t, 0.3, 0.2, 0.25, 0.15, 0.1)
	g, err := sweep.NewProgress(p, s, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []int // devices held now, to catch two jobs on one
	var kinds []string
	r := &SweepRunner{Progress: g,
		Job: func(ctx context.Context, sl sweep.Slot) error {
			mu.Lock()
			for _, d := range sl.DeviceIDs() {
				if slices.Contains(held, d) {
					mu.Unlock()
					return errors.New("device taken")
				}
			}
			held = append(held, sl.DeviceIDs()...)
			mu.Unlock()
			time.Sleep(time.Duration(float64(time.Second) * (sl.End - sl.Start)))
			mu.Lock()
			held = slices.DeleteFunc(held, func(d int) bool { return slices.Contains(sl.DeviceIDs(), d) })
			mu.Unlock()
			return nil
		},
		Event: func(e SweepEvent) { kinds = append(kinds, e.Kind) }}
	res, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k != "start" })); n != 5 {
		t.Fatalf("%d starts: %v", n, kinds)
	}
	if res.Ran[3].Start < res.Ran[0].End {
		t.Fatalf("job d started at %g before job a ended at %g", res.Ran[3].Start, res.Ran[0].End)
	}
	if res.Makespan < s.Makespan || res.Makespan > s.Makespan+0.4 {
		t.Fatalf("measured makespan %g, planned %g", res.Makespan, s.Makespan)
	}
}

// TestSweepRunnerFailure: a job that fails skips the job waiting for it;
// the others run, and the error names both.
func TestSweepRunnerFailure(t *testing.T) {
	p, s := sweepOf(t, 0.01, 0.01, 0.01, 0.01, 0.01)
	g, _ := sweep.NewProgress(p, s, 0)
	var ran []int
	var mu sync.Mutex
	r := &SweepRunner{Progress: g, Job: func(ctx context.Context, sl sweep.Slot) error {
		mu.Lock()
		ran = append(ran, sl.Job)
		mu.Unlock()
		if sl.Job == 0 {
			return errors.New("lost")
		}
		return nil
	}}
	res, err := r.Run(context.Background())
	var fe *SweepFailedError
	if !errors.As(err, &fe) || !slices.Equal(fe.Failed, []int{0}) || !slices.Equal(fe.Skipped, []int{3}) || fe.Errs[0].Error() != "lost" {
		t.Fatalf("%v", err)
	}
	slices.Sort(ran)
	if !slices.Equal(ran, []int{0, 1, 2, 4}) || res.States[3] != sweep.Skipped || res.States[1] != sweep.Ended {
		t.Fatalf("ran %v, states %v", ran, res.States)
	}
}

// TestSweepRunnerCancel: once ctx ends, the running jobs are waited for
// and no other starts.
func TestSweepRunnerCancel(t *testing.T) {
	p, s := sweepOf(t, 0.01, 0.01, 0.01, 0.01, 0.01)
	p.Devices, p.PerNode = 1, 1
	for j := range p.Jobs {
		p.Jobs[j].Choices = p.Jobs[j].Choices[:1]
	}
	s, _ = sweep.Solve(p)
	g, _ := sweep.NewProgress(p, s, 0)
	ctx, cancel := context.WithCancel(context.Background())
	starts := 0
	r := &SweepRunner{Progress: g, Job: func(ctx context.Context, sl sweep.Slot) error {
		starts++
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}}
	if _, err := r.Run(ctx); !errors.Is(err, context.Canceled) || starts != 1 {
		t.Fatalf("%v after %d starts", err, starts)
	}
}

package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

func shortHeartbeats(t *testing.T) {
	every, timeout := heartbeatEvery(), heartbeatTimeout()
	setTimings(func() { HeartbeatEvery, HeartbeatTimeout = 100*time.Millisecond, time.Second })
	t.Cleanup(func() { setTimings(func() { HeartbeatEvery, HeartbeatTimeout = every, timeout }) })
}

// setTimings changes the package's timings under timingMu: goroutines of an
// earlier test's run may still read them.
func setTimings(f func()) {
	timingMu.Lock()
	defer timingMu.Unlock()
	f()
}

func heartbeatSetup(t *testing.T) (wire.Transport, *plan.Plan, func() (*Result, error), context.CancelFunc, chan error) {
	g, plan := smallPlan(t, "case-study", 3, 4)
	m := wire.NewMemory(1, wire.Faults{}, 1<<20)
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	errs := make(chan error, len(plan.Stages))
	coordCtx, killCoordinator := context.WithCancel(ctx)
	run := func() (*Result, error) {
		return Coordinate(coordCtx, g, plan, m, "hb", 1000, Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}}, nil)
	}
	for range plan.Stages {
		go func() { errs <- Serve(ctx, m, "hb") }()
	}
	return m, plan, run, killCoordinator, errs
}

// TestWorkersLeaveWhenTheCoordinatorDies: once the coordinator is silent for
// the heartbeat timeout, every worker stops and says why.
func TestWorkersLeaveWhenTheCoordinatorDies(t *testing.T) {
	shortHeartbeats(t)
	_, plan, run, kill, errs := heartbeatSetup(t)
	done := make(chan struct{})
	go func() { run(); close(done) }()
	time.Sleep(500 * time.Millisecond) // let it train a little
	kill()
	<-done
	killed := time.Now()
	for range plan.Stages {
		err := <-errs
		if err == nil || !strings.Contains(err.Error(), "coordinator") || !strings.Contains(err.Error(), "silent") {
			t.Fatalf("a worker ended with %v", err)
		}
	}
	if d := time.Since(killed); d > 3*time.Second {
		t.Errorf("workers took %v to leave", d)
	}
}

// TestCoordinatorNamesASilentWorker: a worker that stops (its context ends,
// as a killed process's would) is named within the heartbeat timeout.
func TestCoordinatorNamesASilentWorker(t *testing.T) {
	shortHeartbeats(t)
	m, plan, _, _, _ := heartbeatSetup(t)
	_ = plan
	// a fresh run in which one worker dies after joining
	e, _ := models.Lookup("case-study")
	g, _ := e.Build(e.Small)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	doomed, die := context.WithCancel(ctx)
	go Serve(ctx, m, "hb2")
	go Serve(ctx, m, "hb2")
	go Serve(doomed, m, "hb2")
	time.AfterFunc(700*time.Millisecond, die)
	start := time.Now()
	_, err := Coordinate(ctx, g, plan, m, "hb2", 1000, Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}}, nil)
	if err == nil || !strings.Contains(err.Error(), "has been silent") || !strings.Contains(err.Error(), "worker ") {
		t.Fatalf("got %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("took %v: %v", time.Since(start), err)
	}
}

// TestCoordinatorNamesAHungWorker: a worker stuck computing (alive, still
// beating) is named with the action it hangs in.
func TestCoordinatorNamesAHungWorker(t *testing.T) {
	shortHeartbeats(t)
	hang, _ := hangTimeouts()
	setTimings(func() { HangTimeout = time.Second })
	defer setTimings(func() { HangTimeout = hang })
	t.Setenv(KillEnv, "1:1:1:hang-before-step")
	m, plan, run, _, _ := heartbeatSetup(t)
	_ = m
	start := time.Now()
	_, err := run()
	if err == nil || !strings.Contains(err.Error(), "worker 1 (stage") || !strings.Contains(err.Error(), "hangs") {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v to notice", d)
	}
	_ = plan
}

// TestFirstIterationMayTakeLonger: an action running past HangTimeout is a
// hang once an iteration has finished, not during the first (which pays for
// compiling kernels and loading libraries), up to WarmupHangTimeout.
func TestFirstIterationMayTakeLonger(t *testing.T) {
	w := &Worker{plan: &plan.Plan{Stages: []plan.PlanStage{{}}}}
	w.busy("iteration 0 action 0B")
	w.busySince = time.Now().Add(-2 * HangTimeout)
	if h := w.hang(); h != "" {
		t.Fatalf("first iteration, %v in: called hung (%s)", 2*HangTimeout, h)
	}
	w.busySince = time.Now().Add(-WarmupHangTimeout - time.Second)
	if h := w.hang(); h == "" {
		t.Fatalf("first iteration, past WarmupHangTimeout: not called hung")
	}
	w.warm = true
	w.busySince = time.Now().Add(-2 * HangTimeout)
	if h := w.hang(); !strings.Contains(h, "0B") {
		t.Fatalf("after an iteration, %v in: got %q, want a hang naming the action", 2*HangTimeout, h)
	}
}

// TestALateWorkerDoesNotStrandTheFirst: a worker assigned its stage while
// the others are still starting (slow processes on a loaded machine) hears
// the coordinator's heartbeats meanwhile, and the run trains once the last
// one joins, twice the heartbeat timeout later.
func TestALateWorkerDoesNotStrandTheFirst(t *testing.T) {
	shortHeartbeats(t)
	g, plan := smallPlan(t, "case-study", 3, 4)
	m := wire.NewMemory(1, wire.Faults{}, 1<<20)
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, len(plan.Stages))
	go func() { errs <- Serve(ctx, m, "late") }()
	go func() {
		time.Sleep(2 * HeartbeatTimeout)
		for range plan.Stages[1:] {
			go func() { errs <- Serve(ctx, m, "late") }()
		}
	}()
	res, err := Coordinate(ctx, g, plan, m, "late", 2, Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Losses) != 2 {
		t.Fatalf("%d iterations, want 2", len(res.Losses))
	}
	for range plan.Stages {
		if err := <-errs; err != nil {
			t.Fatalf("a worker ended with %v", err)
		}
	}
}

// TestWatchForgivesItsOwnStall: a watcher whose ticks stop for longer than
// the heartbeat timeout (its own process stalled) does not call a peer
// silent on waking, before the beats sent meanwhile can be read; a peer
// that stays silent for the timeout after that is called silent.
func TestWatchForgivesItsOwnStall(t *testing.T) {
	t0 := time.Unix(1000, 0)
	last := t0 // the peer's last beat, never renewed
	ticks := make(chan time.Time)
	var fired error
	var firedAt time.Time
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		watchTicks(ctx, ticks, t0, func(err error) { fired = err; cancel(err) }, func(now, awake time.Time) error {
			if q := quietFor(last, awake, now); q > HeartbeatTimeout {
				firedAt = now
				return fmt.Errorf("silent for %v", q)
			}
			return nil
		})
		close(done)
	}()
	step := HeartbeatEvery / 2
	now := t0
	for i := 0; i < 3; i++ { // on time: 1.5 beats of silence, not yet a failure
		now = now.Add(step)
		ticks <- now
	}
	now = now.Add(3 * HeartbeatTimeout) // the process stalls past the timeout
	woke := now
	for ctx.Err() == nil && now.Sub(woke) < 3*HeartbeatTimeout {
		now = now.Add(step)
		select {
		case ticks <- now:
		case <-done:
		}
	}
	<-done
	if fired == nil {
		t.Fatal("a peer silent for the timeout after the stall was never called silent")
	}
	if since := firedAt.Sub(woke); since < HeartbeatTimeout {
		t.Fatalf("called silent %v after waking (%v), before a heartbeat timeout (%v) had passed awake", since, fired, HeartbeatTimeout)
	}
}

// TestJoinTimeout: a coordinator whose workers do not all join within its
// JoinTimeout says how many did and stops; the one that joined leaves.
func TestJoinTimeout(t *testing.T) {
	shortHeartbeats(t)
	g, plan := smallPlan(t, "case-study", 3, 4)
	m := wire.NewMemory(1, wire.Faults{}, 1<<20)
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	go func() { errs <- Serve(ctx, m, "few") }()
	start := time.Now()
	o := Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}, JoinTimeout: 300 * time.Millisecond}
	_, err := Coordinate(ctx, g, plan, m, "few", 2, o, nil)
	want := fmt.Sprintf("waiting for workers: 1 of %d joined: not all joined within 300ms", len(plan.Stages))
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	select {
	case err := <-errs:
		if err == nil {
			t.Error("the worker that joined ended without an error")
		}
	case <-time.After(10 * time.Second):
		t.Error("the worker that joined is still waiting")
	}
}

package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// shortTimings are the timings of the tests that wait for silence: a beat
// every 100 ms, silent after 1 s. The coordinator's reach its workers.
func shortTimings() Timings {
	return Timings{HeartbeatEvery: 100 * time.Millisecond, HeartbeatTimeout: time.Second}
}

// heartbeatSetup is a run of case-study over the in-memory transport whose
// coordinator (run, its Config c) starts when called, and whose workers
// (their Config w) have joined.
func heartbeatSetup(t *testing.T, c, w Config) (wire.Transport, *plan.Plan, func() (*Result, error), context.CancelFunc, chan error) {
	g, plan := smallPlan(t, "case-study", 3, 4)
	m := wire.NewMemory(1, wire.Faults{}, 1<<20)
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	errs := make(chan error, len(plan.Stages))
	coordCtx, killCoordinator := context.WithCancel(ctx)
	run := func() (*Result, error) {
		job := &Job{Run: "hb", Graph: g, Plan: plan, Steps: 1000, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}}, Config: c}
		return Coordinate(coordCtx, job, m, nil)
	}
	for range plan.Stages {
		go func() { errs <- Serve(ctx, m, Join{Run: "hb", Config: w}) }()
	}
	return m, plan, run, killCoordinator, errs
}

// TestWorkersLeaveWhenTheCoordinatorDies: once the coordinator is silent for
// the heartbeat timeout, every worker stops and says why. The timeout is
// the coordinator's (1 s), sent to the workers with their stages: with
// their own (the default, 4 s) they would take longer than the test allows.
func TestWorkersLeaveWhenTheCoordinatorDies(t *testing.T) {
	_, plan, run, kill, errs := heartbeatSetup(t, Config{Timings: shortTimings()}, Config{})
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
	m, plan, _, _, _ := heartbeatSetup(t, Config{}, Config{})
	_ = plan
	// a fresh run in which one worker dies after joining
	e, _ := models.Lookup("case-study")
	g, _ := e.Build(e.Small)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	doomed, die := context.WithCancel(ctx)
	go Serve(ctx, m, Join{Run: "hb2"})
	go Serve(ctx, m, Join{Run: "hb2"})
	go Serve(doomed, m, Join{Run: "hb2"})
	time.AfterFunc(700*time.Millisecond, die)
	start := time.Now()
	job := &Job{Run: "hb2", Graph: g, Plan: plan, Steps: 1000, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}},
		Config: Config{Timings: shortTimings()}}
	_, err := Coordinate(ctx, job, m, nil)
	if err == nil || !strings.Contains(err.Error(), "has been silent") || !strings.Contains(err.Error(), "worker ") {
		t.Fatalf("got %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("took %v: %v", time.Since(start), err)
	}
}

// TestCoordinatorNamesAHungWorker: a worker stuck computing (alive, still
// beating) is named with the action it hangs in, past the coordinator's
// hang timeout (1 s, sent with its stage; its process's KillPoints make it
// hang).
func TestCoordinatorNamesAHungWorker(t *testing.T) {
	tm := shortTimings()
	tm.HangTimeout = time.Second
	m, plan, run, _, _ := heartbeatSetup(t, Config{Timings: tm}, Config{KillPoints: "1:1:1:hang-before-step"})
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

// TestFirstIterationMayTakeLonger: an action running past the hang timeout
// is a hang once an iteration has finished, not during the first (which
// pays for compiling kernels and loading libraries), up to the warm-up's.
func TestFirstIterationMayTakeLonger(t *testing.T) {
	tm := Timings{}.WithDefaults()
	w := newWatch(tm, plan.PlanStage{})
	w.busy("iteration 0 action 0B")
	w.since = time.Now().Add(-2 * tm.HangTimeout)
	if h := w.hang(); h != "" {
		t.Fatalf("first iteration, %v in: called hung (%s)", 2*tm.HangTimeout, h)
	}
	w.since = time.Now().Add(-tm.WarmupHangTimeout - time.Second)
	if h := w.hang(); h == "" {
		t.Fatalf("first iteration, past WarmupHangTimeout: not called hung")
	}
	w.warmed()
	w.since = time.Now().Add(-2 * tm.HangTimeout)
	if h := w.hang(); !strings.Contains(h, "0B") {
		t.Fatalf("after an iteration, %v in: got %q, want a hang naming the action", 2*tm.HangTimeout, h)
	}
}

// TestALateWorkerDoesNotStrandTheFirst: a worker assigned its stage while
// the others are still starting (slow processes on a loaded machine) hears
// the coordinator's heartbeats meanwhile, and the run trains once the last
// one joins, twice the heartbeat timeout later.
func TestALateWorkerDoesNotStrandTheFirst(t *testing.T) {
	tm := shortTimings()
	g, plan := smallPlan(t, "case-study", 3, 4)
	m := wire.NewMemory(1, wire.Faults{}, 1<<20)
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, len(plan.Stages))
	go func() { errs <- Serve(ctx, m, Join{Run: "late"}) }()
	go func() {
		time.Sleep(2 * tm.HeartbeatTimeout)
		for range plan.Stages[1:] {
			go func() { errs <- Serve(ctx, m, Join{Run: "late"}) }()
		}
	}()
	job := &Job{Run: "late", Graph: g, Plan: plan, Steps: 2, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}}, Config: Config{Timings: tm}}
	res, err := Coordinate(ctx, job, m, nil)
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
	tm := Timings{}.WithDefaults()
	t0 := time.Unix(1000, 0)
	last := t0 // the peer's last beat, never renewed
	ticks := make(chan time.Time)
	var fired error
	var firedAt time.Time
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		tm.watchTicks(ctx, ticks, t0, func(err error) { fired = err; cancel(err) }, func(now, awake time.Time) error {
			if q := quietFor(last, awake, now); q > tm.HeartbeatTimeout {
				firedAt = now
				return fmt.Errorf("silent for %v", q)
			}
			return nil
		})
		close(done)
	}()
	step := tm.HeartbeatEvery / 2
	now := t0
	for i := 0; i < 3; i++ { // on time: 1.5 beats of silence, not yet a failure
		now = now.Add(step)
		ticks <- now
	}
	now = now.Add(3 * tm.HeartbeatTimeout) // the process stalls past the timeout
	woke := now
	for ctx.Err() == nil && now.Sub(woke) < 3*tm.HeartbeatTimeout {
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
	if since := firedAt.Sub(woke); since < tm.HeartbeatTimeout {
		t.Fatalf("called silent %v after waking (%v), before a heartbeat timeout (%v) had passed awake", since, fired, tm.HeartbeatTimeout)
	}
}

// TestJoinTimeout: a coordinator whose workers do not all join within its
// JoinTimeout says how many did and stops; the one that joined leaves.
func TestJoinTimeout(t *testing.T) {
	g, plan := smallPlan(t, "case-study", 3, 4)
	m := wire.NewMemory(1, wire.Faults{}, 1<<20)
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	go func() { errs <- Serve(ctx, m, Join{Run: "few"}) }()
	start := time.Now()
	job := &Job{Run: "few", Graph: g, Plan: plan, Steps: 2, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}},
		Config: Config{JoinTimeout: 300 * time.Millisecond, Timings: shortTimings()}}
	_, err := Coordinate(ctx, job, m, nil)
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

// TestLeftWorkersAreNotSilent: a worker that has handed over all it owed
// and left (its parameters at the end, its state at a stop) is not taken
// for silent while the coordinator still reads the others' (a stream of
// gigabytes takes longer than a heartbeat timeout); one that has not left
// is.
func TestLeftWorkersAreNotSilent(t *testing.T) {
	tr := wire.NewMemory(1, wire.Faults{}, 1<<20)
	tm := Timings{HeartbeatEvery: 20 * time.Millisecond, HeartbeatTimeout: 100 * time.Millisecond}
	for _, tc := range []struct {
		left   bool
		silent bool
	}{{true, false}, {false, true}} {
		ctx, cancel := context.WithCancelCause(context.Background())
		name := func(id int) string { return fmt.Sprintf("worker %d", id) }
		// worker 0 beats on; worker 1 has gone quiet
		beating, stop := context.WithCancel(ctx)
		go tm.Beat(beating, tr, workerBeats("r", 1), func() []byte { return workerBeat(0) })
		if err := tm.watchWorkers(ctx, tr, "r", 1, 2, name, func(id int) bool { return id == 1 && tc.left }, cancel); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
		var se *SilentError
		silent := errors.As(context.Cause(ctx), &se)
		if silent != tc.silent || silent && se.Who != "worker 1" {
			t.Errorf("left %v: silent %v (%v), want %v", tc.left, silent, context.Cause(ctx), tc.silent)
		}
		stop()
		cancel(nil)
	}
}

// muteBeats is a transport that loses the coordinator's heartbeats while
// mute is set, as a coordinator stalled by a long checkpoint would.
type muteBeats struct {
	wire.Transport
	subject string
	mute    atomic.Bool
}

func (m *muteBeats) Publish(subject string, data []byte) error {
	if subject == m.subject && m.mute.Load() {
		return nil
	}
	return m.Transport.Publish(subject, data)
}

// TestWorkersKeepTheRunsHeartbeatTimeout: the coordinator's heartbeat
// timeout (--heartbeat-timeout) reaches its workers with their stages: a
// coordinator silent for 1 s, longer than the workers' own timeout (300
// ms) but within the run's (5 s), loses none of them.
func TestWorkersKeepTheRunsHeartbeatTimeout(t *testing.T) {
	g, plan := smallPlan(t, "case-study", 3, 4)
	m := &muteBeats{Transport: wire.NewMemory(1, wire.Faults{}, 1<<20), subject: CoordinatorBeats("patient")}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	own := Config{Timings: Timings{HeartbeatEvery: 50 * time.Millisecond, HeartbeatTimeout: 300 * time.Millisecond}}
	errs := make(chan error, len(plan.Stages))
	for range plan.Stages {
		go func() { errs <- Serve(ctx, m, Join{Run: "patient", Config: own}) }()
	}
	job := &Job{Run: "patient", Graph: g, Plan: plan, Steps: 40, Options: Options{Train: stage.TrainOptions{Optimizer: "sgd", LR: 0.01}},
		Config: Config{Timings: Timings{HeartbeatEvery: 50 * time.Millisecond, HeartbeatTimeout: 5 * time.Second}}}
	muted := false
	_, err := Coordinate(ctx, job, m, func(n int64, _ float64) {
		if n == 5 && !muted {
			muted = true
			m.mute.Store(true)
			time.Sleep(time.Second)
			m.mute.Store(false)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for range plan.Stages {
		if err := <-errs; err != nil {
			t.Fatalf("a worker left: %v", err)
		}
	}
}

package supervise

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
)

// sweepTask starts task rank of r's sweep as a goroutine, as host; its
// Serve's error comes on the channel.
func (r *taskRun) sweepTask(rank int, host, model string) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	k := &SweepTask{Env: r.env(rank), Run: r.run, Model: model, Started: time.Now(), JoinTimeout: 30 * time.Second, Timings: shortTimings(),
		Agent: &Agent{Pool: r.run, Host: host, Profile: "cpu", Config: runtime.Config{Timings: shortTimings()}}}
	done := make(chan error, 1)
	tr := dialServer(r.t, r.srv, host)
	go func() { done <- k.Serve(ctx, tr) }()
	return done
}

// lockedLog is a log written and read by several goroutines.
type lockedLog struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// poolAgents counts the agents heard on r's pool within wait.
func (r *taskRun) poolAgents(wait time.Duration) int {
	var mu sync.Mutex
	seen := map[string]bool{}
	unsub, err := dialServer(r.t, r.srv, "listener").Subscribe(poolAdverts(r.run), func(b []byte) {
		var ad Advert
		if json.Unmarshal(b, &ad) == nil {
			mu.Lock()
			seen[ad.Agent] = true
			mu.Unlock()
		}
	})
	if err != nil {
		r.t.Fatal(err)
	}
	defer unsub()
	time.Sleep(wait)
	mu.Lock()
	defer mu.Unlock()
	return len(seen)
}

// TestSweepTasks: task 0 of a sweep waits for its other tasks, each an
// agent of the pool named after the launch; it refuses a task of another
// launch; its End has them leave, well (nil) or, when the sweep failed,
// with a *RunFailedError.
func TestSweepTasks(t *testing.T) {
	for _, failed := range []bool{false, true} {
		name := "well"
		if failed {
			name = "failed"
		}
		t.Run(name, func(t *testing.T) {
			r := newTaskRun(t, 3)
			one := r.sweepTask(1, "h1", "m")
			var log lockedLog
			s, err := NewSweepTasks(dialServer(t, r.srv, "task 0"), r.run, TaskConfig{Env: r.env(0), Model: "m", JoinTimeout: 30 * time.Second, Timings: shortTimings(), Log: &log})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			awaited := make(chan error, 1)
			go func() { awaited <- s.Await(ctx) }()
			select {
			case err := <-awaited:
				t.Fatalf("task 0 did not wait for task 2: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			two := r.sweepTask(2, "h2", "m")
			if err := <-awaited; err != nil {
				t.Fatal(err)
			}
			if n := r.poolAgents(300 * time.Millisecond); n != 2 {
				t.Fatalf("%d agents in pool %s, want the 2 tasks'", n, r.run)
			}
			e := r.env(1)
			e.Tasks = 4
			intruder := &SweepTask{Env: e, Run: r.run, Model: "m", Timings: shortTimings(), Agent: &Agent{Pool: r.run, Host: "h9", Profile: "cpu"}}
			var re *RefusedError
			if err := intruder.Serve(ctx, dialServer(t, r.srv, "intruder")); !errors.As(err, &re) || !strings.Contains(err.Error(), "it is one of 4 tasks") {
				t.Fatalf("a task of another launch: %v, want refused", err)
			}
			var end error
			if failed {
				end = errors.New("job \"a\" failed")
			}
			s.End(end)
			for rank, done := range []<-chan error{one, two} {
				err := <-done
				var fe *RunFailedError
				switch {
				case !failed && err != nil:
					t.Fatalf("task %d: %v", rank+1, err)
				case failed && (!errors.As(err, &fe) || fe.Why != `job "a" failed`):
					t.Fatalf("task %d of a failed sweep: %v", rank+1, err)
				}
			}
			if strings.Contains(log.String(), "is gone") {
				t.Fatalf("task 0 took a task that left at the end for lost:\n%s", log.String())
			}
		})
	}
}

// TestSweepTaskSilence: a task whose task 0 is never heard leaves after
// the join timeout; one whose task 0 falls silent, after the heartbeat
// timeout, and task 0 (had it lived) would have said it is gone.
func TestSweepTaskSilence(t *testing.T) {
	r := newTaskRun(t, 2)
	k := &SweepTask{Env: r.env(1), Run: r.run, JoinTimeout: 300 * time.Millisecond, Timings: shortTimings(), Agent: &Agent{Pool: r.run, Host: "h1", Profile: "cpu"}}
	var se *runtime.SilentError
	if err := k.Serve(context.Background(), dialServer(t, r.srv, "task 1")); !errors.As(err, &se) || k.Joined() {
		t.Fatalf("no task 0: %v, want silent", err)
	}
	done := r.sweepTask(1, "h1", "")
	var log lockedLog
	s, err := NewSweepTasks(dialServer(t, r.srv, "task 0"), r.run, TaskConfig{Env: r.env(0), JoinTimeout: 30 * time.Second, Timings: shortTimings(), Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Await(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.stopBeat() // task 0 falls silent
	if err := <-done; !errors.As(err, &se) || !strings.Contains(err.Error(), "task 0 of sweep "+r.run) {
		t.Fatalf("task 0 silent: %v", err)
	}
	defer s.End(nil)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), "task 1 (RANK 1, host h1, pid "); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("task 0 did not say task 1 is gone:\n%s", log.String())
		}
	}
}

// TestSweepTaskLostJustBeforeTheEnd: a task that fell silent since task
// 0's last look (here: no look comes before the end, the heartbeat being
// an hour) is said to be gone as the sweep ends, as it would have been a
// heartbeat later; in a Slurm test its job had restarted on another agent
// and finished in between, and nothing said the task was lost.
func TestSweepTaskLostJustBeforeTheEnd(t *testing.T) {
	r := newTaskRun(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := &SweepTask{Env: r.env(1), Run: r.run, Started: time.Now(), JoinTimeout: 30 * time.Second, Timings: shortTimings(),
		Agent: &Agent{Pool: r.run, Host: "h1", Profile: "cpu", Config: runtime.Config{Timings: shortTimings()}}}
	tr := dialServer(t, r.srv, "h1")
	done := make(chan error, 1)
	go func() { done <- k.Serve(ctx, tr) }()
	tm := shortTimings()
	tm.HeartbeatEvery, tm.HeartbeatTimeout = time.Hour, 300*time.Millisecond
	var log lockedLog
	s, err := NewSweepTasks(dialServer(t, r.srv, "task 0"), r.run, TaskConfig{Env: r.env(0), JoinTimeout: 30 * time.Second, Timings: tm, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Await(ctx); err != nil {
		t.Fatal(err)
	}
	tr.Close() // killed: no advert more, no goodbye
	<-done
	time.Sleep(2 * tm.HeartbeatTimeout)
	s.End(nil)
	if !strings.Contains(log.String(), "task 1 (RANK 1, host h1, pid ") || !strings.Contains(log.String(), "is gone") {
		t.Fatalf("task 0 did not say task 1 is gone:\n%s", log.String())
	}
}

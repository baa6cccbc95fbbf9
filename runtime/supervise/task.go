package supervise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// Task is one of the tasks of a run an environment started, other than
// task 0 (which coordinates, with a TaskLauncher): it says it is there
// every heartbeat, joins each generation task 0 orders as the plan device
// it names, and ends when task 0 says the run is over, or when task 0 has
// been silent too long: an error, unless the last generation it served
// ended well (task 0 has ended the run, and its word was lost).
type Task struct {
	Env  *TaskEnv
	Run  string
	Host string // "": os.Hostname
	Kind string // the device profile it computes as ("": not said)
	// Model is a digest of the model and plan it was given, and Started
	// when its process started: task 0 refuses a task of another launch
	// by them ("" and zero: not said).
	Model   string
	Started time.Time
	// Config is its worker's (runtime.Join.Config): Device, Precision,
	// KillPoints, Bulk; JoinTimeout bounds the wait for task 0's first
	// order (0: for ever), Timings the adverts' heartbeat until an order
	// brings the run's.
	Config runtime.Config
	// Log hears what it joins; nil: nothing said.
	Log func(format string, args ...any)

	mu sync.Mutex // guards ad
	ad TaskAdvert
}

// taskState is what the task's loop keeps between events.
type taskState struct {
	serving context.CancelCauseFunc // nil while not serving
	gen     uint32                  // the newest generation joined
	heard   time.Time               // task 0's last word (an order, a heartbeat)
	ordered bool                    // an order came: silence is timed by the run's heartbeat timeout
	trained bool                    // the last generation served ended well
	tm      runtime.Timings
}

type served struct {
	gen uint32
	err error
}

// Serve runs the task until task 0 ends the run (nil; a *RunFailedError
// when the run failed), ctx ends, or task 0 is silent: before its first
// order for Config.JoinTimeout, then for the run's heartbeat timeout
// while the task serves no generation.
func (k *Task) Serve(ctx context.Context, t wire.Transport) error {
	if k.Log == nil {
		k.Log = func(string, ...any) {}
	}
	if k.Host == "" {
		k.Host, _ = os.Hostname()
	}
	k.mu.Lock()
	k.ad = TaskAdvert{Rank: k.Env.Rank, Node: k.Env.Node, Local: k.Env.Local, Host: k.Host, PID: os.Getpid(),
		Device: runtime.DeviceLabel(k.Config.Device), Visible: k.Env.Visible, GPU: k.Env.GPU,
		Tasks: k.Env.Tasks, Model: k.Model, Started: k.Started}
	k.mu.Unlock()
	orders := make(chan TaskOrder, 64)
	unsub, err := t.Subscribe(tasksOrders(k.Run), func(b []byte) {
		var o TaskOrder
		if json.Unmarshal(b, &o) == nil {
			select {
			case orders <- o:
			default: // said again at the next heartbeat
			}
		}
	})
	if err != nil {
		return err
	}
	defer unsub()
	st := &taskState{heard: time.Now(), tm: k.Config.Timings.WithDefaults()}
	var mu sync.Mutex // guards st.heard against the heartbeat subscription
	unbeat, err := t.Subscribe(runtime.CoordinatorBeats(k.Run), func([]byte) {
		mu.Lock()
		st.heard = time.Now()
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	defer unbeat()
	beatCtx, stopBeat := context.WithCancel(ctx)
	defer func() {
		stopBeat()
		k.mu.Lock()
		k.ad.Left = true
		k.mu.Unlock()
		t.Publish(tasksAdverts(k.Run), k.advert()) // its last word, which task 0 waits for
	}()
	go k.Config.Timings.Beat(beatCtx, t, tasksAdverts(k.Run), k.advert)
	k.Log("task %d of %d (%s %d) on host %s, node %d, computing on %s: waiting for task 0's orders (run %s)",
		k.Env.Rank, k.Env.Tasks, k.Env.RankVar, k.Env.Rank, k.Host, k.Env.Node, k.ad.Device, k.Run)
	done := make(chan served, 1)
	tick := time.NewTicker(st.tm.HeartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			k.endServing(st, done, context.Cause(ctx))
			return context.Cause(ctx)
		case o := <-orders:
			mu.Lock()
			st.heard = time.Now()
			mu.Unlock()
			if end, err := k.order(ctx, t, st, o, done); end {
				return err
			}
		case s := <-done:
			st.serving, st.trained = nil, s.err == nil
			if s.err != nil {
				k.Log("generation %d failed here: %v; waiting for task 0's next order", s.gen, s.err)
			}
		case <-tick.C:
			mu.Lock()
			quiet := time.Since(st.heard)
			mu.Unlock()
			if err := st.silent(quiet, k); st.serving == nil && err != nil {
				if st.trained {
					return nil // the run ended well; task 0's word that it is over was lost
				}
				return err
			}
		}
	}
}

// silent is the error of a task that heard nothing from task 0 for quiet,
// nil while that is not too long.
func (st *taskState) silent(quiet time.Duration, k *Task) error {
	limit := st.tm.HeartbeatTimeout
	if !st.ordered {
		if limit = k.Config.JoinTimeout; limit <= 0 {
			return nil
		}
	}
	if quiet <= limit {
		return nil
	}
	return &runtime.SilentError{Who: fmt.Sprintf("task 0 of run %s (the coordinator)", k.Run), Silent: quiet}
}

// order acts on one of task 0's orders; end says the task is done, with
// err.
func (k *Task) order(ctx context.Context, t wire.Transport, st *taskState, o TaskOrder, done chan served) (end bool, err error) {
	if o.Refuse != nil {
		k.mu.Lock()
		me := o.Refuse.names(k.ad)
		k.mu.Unlock()
		if !me {
			return false, nil // another task's
		}
		k.endServing(st, done, errors.New("refused by task 0"))
		return true, &RefusedError{Run: k.Run, RankVar: k.Env.RankVar, Rank: k.Env.Rank, Why: o.Refuse.Why}
	}
	if o.Timings != nil {
		st.tm, st.ordered = o.Timings.WithDefaults(), true
	}
	switch {
	case o.End:
		k.endServing(st, done, errors.New("the run is over"))
		if o.Failed != "" {
			return true, &RunFailedError{Run: k.Run, Why: o.Failed}
		}
		return true, nil
	case o.Stop:
		if st.serving != nil && st.gen == o.Gen {
			st.serving(errors.New("task 0 ended the generation"))
		}
		return false, nil
	case o.Gen <= st.gen:
		return false, nil // said again, or an old one
	}
	k.endServing(st, done, errors.New("a new generation started"))
	st.gen = o.Gen
	k.setGen(o.Gen)
	d, ok := o.Devices[k.Env.Rank]
	if !ok {
		k.Log("generation %d runs no stage on this task (%s %d): leaving", o.Gen, k.Env.RankVar, k.Env.Rank)
		return true, nil
	}
	sctx, cancel := context.WithCancelCause(ctx)
	st.serving = cancel
	k.Log("joining generation %d of run %s as device %d of the plan", o.Gen, k.Run, d)
	go func() {
		err := runtime.Serve(sctx, t, runtime.Join{Run: k.Run, Gen: o.Gen, Config: k.Config, Log: k.Log, Host: k.Host, PlanDevice: &d, Kind: k.Kind})
		cancel(nil)
		done <- served{o.Gen, err}
	}()
	return false, nil
}

// endServing ends the generation served, if any, and waits for it.
func (k *Task) endServing(st *taskState, done chan served, why error) {
	if st.serving == nil {
		return
	}
	st.serving(why)
	s := <-done
	st.serving = nil
	if s.err != nil && !errors.Is(s.err, context.Canceled) {
		k.Log("generation %d ended here: %v", s.gen, s.err)
	}
}

func (k *Task) advert() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, _ := json.Marshal(k.ad)
	return b
}

// Joined says the task has joined a generation of the run: from then on
// a stop is task 0's to order (the tasks' signals are its), before then
// nothing is lost by leaving.
func (k *Task) Joined() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ad.Gen > 0
}

func (k *Task) setGen(gen uint32) {
	k.mu.Lock()
	k.ad.Gen = gen
	k.mu.Unlock()
}

package supervise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// A sweep whose tasks an environment started ('srun graphpipe sweep SWEEP
// --run'): task 0 plans the sweep and runs it over a pool named after the
// launch, whose agents are the other tasks (SweepTask) and a worker
// process of its own. Task 0 (SweepTasks) waits for every task, refuses
// tasks of another launch, beats for them until the sweep is over and
// then tells them how it ended, as a run's tasks are told: on the
// subjects of a run's tasks (tasksAdverts, tasksOrders, CoordinatorBeats),
// the launch's key their run. A task lost mid-sweep is a lost agent of the
// pool: the job on it restarts (its --restarts) on the agents left.

// SweepTasks is task 0's side of a sweep's tasks.
type SweepTasks struct {
	l        *TaskLauncher
	stopBeat context.CancelFunc
	over     chan struct{} // closed by End: the watch of lost tasks returns
	watched  chan struct{} // closed when the watch has returned
}

// NewSweepTasks starts listening to the adverts of run's tasks over t, and
// beating task 0's heartbeat for them until End. c.Worker and c.Replace
// are not used: a lost task is not started again.
func NewSweepTasks(t wire.Transport, run string, c TaskConfig) (*SweepTasks, error) {
	l, err := NewTaskLauncher(t, run, c)
	if err != nil {
		return nil, err
	}
	l.cfg.Replace = false
	// beating goes on past a stopped sweep (its jobs checkpoint on the
	// tasks' agents) until End
	ctx, cancel := context.WithCancel(context.Background())
	go l.cfg.Timings.Beat(ctx, t, runtime.CoordinatorBeats(run), func() []byte { return []byte{} })
	return &SweepTasks{l: l, stopBeat: cancel, over: make(chan struct{}), watched: make(chan struct{})}, nil
}

// Await waits until every other task is there, up to the join timeout
// (an error naming the ranks missing), c.Stop (a *runtime.StoppedError) or
// ctx. From then on a task that claims the rank of a live one is of a
// later launch, and refused; a task that falls silent is said to be lost,
// once.
func (s *SweepTasks) Await(ctx context.Context) error {
	if _, _, err := s.l.await(ctx, &Generation{}); err != nil {
		return err
	}
	s.l.mu.Lock()
	s.l.began = time.Now()
	s.l.mu.Unlock()
	go s.watch()
	return nil
}

// watch says once of each task that it is lost: silent for the heartbeat
// timeout, or left, before the sweep is over. It looks every heartbeat
// and once more as the sweep ends: a task lost since the last look (a job
// it held may have restarted elsewhere and finished meanwhile) is said
// too.
func (s *SweepTasks) watch() {
	defer close(s.watched)
	tick := time.NewTicker(s.l.cfg.Timings.HeartbeatEvery)
	defer tick.Stop()
	said := map[int]bool{}
	for {
		s.sayLost(said)
		select {
		case <-tick.C:
		case <-s.over:
			s.sayLost(said)
			return
		}
	}
}

// sayLost says of each task not in said that is lost now, and adds it.
func (s *SweepTasks) sayLost(said map[int]bool) {
	l := s.l
	l.mu.Lock()
	var lost []seenTask
	for rank, st := range l.seen {
		if !said[rank] && (st.ad.Left || time.Since(st.last) > l.cfg.Timings.HeartbeatTimeout) {
			said[rank] = true
			lost = append(lost, st)
		}
	}
	l.mu.Unlock()
	for _, st := range lost {
		l.say("task %d (%s %d, host %s, pid %d) is gone: its agent is lost to the sweep, and a job on it restarts on the agents left (--restarts)\n",
			st.ad.Rank, l.cfg.Env.RankVar, st.ad.Rank, st.ad.Host, st.ad.PID)
	}
}

// End tells the tasks the sweep is over, failed with err or well (nil),
// until each has said it leaves or fallen silent (TaskLauncher.End), then
// stops beating.
func (s *SweepTasks) End(err error) {
	s.l.mu.Lock()
	began := !s.l.began.IsZero()
	s.l.mu.Unlock()
	close(s.over) // the tasks leaving now are not lost
	if began {
		<-s.watched
	}
	s.l.End(err)
	s.stopBeat()
}

// SweepTask is a task of a sweep other than task 0: it serves as Agent,
// an agent of the sweep's pool on task 0's server, and says it is there
// every heartbeat, until task 0 says the sweep is over (nil; a
// *RunFailedError when it failed), refuses it (*RefusedError: it is of
// another launch), ctx ends, its agent fails, or task 0 is silent: for
// JoinTimeout (0: for ever) before it is first heard, then for the
// heartbeat timeout.
type SweepTask struct {
	Env   *TaskEnv
	Run   string // the launch's key, which names the pool too
	Agent *Agent // its Pool is Run's
	// Model and Started say which launch the task is of (TaskAdvert).
	Model   string
	Started time.Time
	// JoinTimeout bounds the wait for task 0's first heartbeat.
	JoinTimeout time.Duration
	// Timings are the sweep's (every task is given the same command): the
	// adverts' heartbeat and task 0's silence.
	Timings runtime.Timings
	Log     func(format string, args ...any) // nil: nothing said

	heard atomic.Int64 // task 0's last heartbeat or order, in Unix nanoseconds; 0: never
	mu    sync.Mutex   // guards ad
	ad    TaskAdvert
}

// Joined says task 0 has been heard: from then on a stop is task 0's to
// order (its agent may hold a job's stage), before then nothing is lost by
// leaving.
func (k *SweepTask) Joined() bool { return k.heard.Load() != 0 }

// Serve runs the task until the sweep is over for it.
func (k *SweepTask) Serve(ctx context.Context, t wire.Transport) error {
	if k.Log == nil {
		k.Log = func(string, ...any) {}
	}
	if k.Agent.Host == "" {
		k.Agent.Host, _ = os.Hostname()
	}
	k.mu.Lock()
	k.ad = TaskAdvert{Rank: k.Env.Rank, Node: k.Env.Node, Local: k.Env.Local, Host: k.Agent.Host, PID: os.Getpid(),
		Device: runtime.DeviceLabel(k.Agent.Config.Device), Visible: k.Env.Visible, GPU: k.Env.GPU,
		Tasks: k.Env.Tasks, Model: k.Model, Started: k.Started}
	k.mu.Unlock()
	orders, unsub, err := k.listen(t)
	if err != nil {
		return err
	}
	defer unsub()
	actx, stopAgent := context.WithCancelCause(ctx)
	agentDone := make(chan error, 1)
	go func() { agentDone <- k.Agent.Serve(actx, t) }()
	beatCtx, stopBeat := context.WithCancel(ctx)
	go k.Timings.Beat(beatCtx, t, tasksAdverts(k.Run), k.advert)
	k.Log("task %d of %d (%s %d) on host %s, node %d: serving as an agent of pool %s; waiting for task 0's sweep",
		k.Env.Rank, k.Env.Tasks, k.Env.RankVar, k.Env.Rank, k.Agent.Host, k.Env.Node, k.Run)
	err, agentEnded := k.loop(ctx, orders, agentDone)
	stopAgent(errors.New("the sweep is over"))
	if !agentEnded {
		<-agentDone
	}
	stopBeat()
	k.mu.Lock()
	k.ad.Left = true
	k.mu.Unlock()
	t.Publish(tasksAdverts(k.Run), k.advert()) // its last word, which task 0 waits for
	return err
}

// listen subscribes to task 0's orders and heartbeats.
func (k *SweepTask) listen(t wire.Transport) (<-chan TaskOrder, func(), error) {
	orders := make(chan TaskOrder, 64)
	unsub, err := t.Subscribe(tasksOrders(k.Run), func(b []byte) {
		var o TaskOrder
		if json.Unmarshal(b, &o) == nil {
			k.heard.Store(time.Now().UnixNano())
			select {
			case orders <- o:
			default: // an end is said again at the next heartbeat
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	unbeat, err := t.Subscribe(runtime.CoordinatorBeats(k.Run), func([]byte) { k.heard.Store(time.Now().UnixNano()) })
	if err != nil {
		unsub()
		return nil, nil, err
	}
	return orders, func() { unbeat(); unsub() }, nil
}

// loop waits for the end: an order, the agent's failure, ctx, or task 0's
// silence. agentEnded says the agent has returned.
func (k *SweepTask) loop(ctx context.Context, orders <-chan TaskOrder, agentDone <-chan error) (err error, agentEnded bool) {
	tm := k.Timings.WithDefaults()
	tick := time.NewTicker(tm.HeartbeatEvery)
	defer tick.Stop()
	began := time.Now()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx), false
		case err := <-agentDone:
			if err == nil {
				err = errors.New("the agent stopped")
			}
			return fmt.Errorf("task %d's agent of pool %s: %w", k.Env.Rank, k.Run, err), true
		case o := <-orders:
			if end, err := k.order(o); end {
				return err, false
			}
		case <-tick.C:
			if err := k.silent(tm, began); err != nil {
				return err, false
			}
		}
	}
}

// order acts on one of task 0's orders: end says the task is done, with
// err.
func (k *SweepTask) order(o TaskOrder) (end bool, err error) {
	switch {
	case o.Refuse != nil:
		k.mu.Lock()
		me := o.Refuse.names(k.ad)
		k.mu.Unlock()
		if !me {
			return false, nil // another task's
		}
		return true, &RefusedError{Run: k.Run, RankVar: k.Env.RankVar, Rank: k.Env.Rank, Why: o.Refuse.Why}
	case o.End && o.Failed != "":
		return true, &RunFailedError{Run: k.Run, Why: o.Failed}
	case o.End:
		k.Log("task 0 says the sweep is over: leaving")
		return true, nil
	}
	return false, nil
}

// silent is the error of a task that has heard nothing from task 0 for too
// long: JoinTimeout since it began, before task 0 was first heard; the
// heartbeat timeout since task 0 was last heard, after.
func (k *SweepTask) silent(tm runtime.Timings, began time.Time) error {
	last := k.heard.Load()
	quiet, limit := time.Since(began), k.JoinTimeout
	if last != 0 {
		quiet, limit = time.Since(time.Unix(0, last)), tm.HeartbeatTimeout
	}
	if limit <= 0 || quiet <= limit {
		return nil
	}
	return &runtime.SilentError{Who: fmt.Sprintf("task 0 of sweep %s (the coordinator)", k.Run), Silent: quiet}
}

func (k *SweepTask) advert() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, _ := json.Marshal(k.ad)
	return b
}

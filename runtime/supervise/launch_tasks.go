package supervise

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// TaskLauncher is task 0's launcher when an environment started the run's
// tasks (srun, torchrun, a Kubernetes Indexed Job): each generation's
// workers are the tasks (Task), each the plan device its node and local
// rank make, ordered to join it, and a worker process for task 0's own
// device. A task lost for good is replaced by a worker process for its
// device (Slurm: srun within the allocation, TaskConfig.Worker with
// Replace) or, where the environment starts its tasks again (torchrun,
// Kubernetes), waited for.
type TaskLauncher struct {
	cfg TaskConfig
	t   wire.Transport
	run string

	unsub func()
	mu    sync.Mutex // guards seen, aside, conflict, began and refused
	seen  map[int]seenTask
	// aside is the tasks a failed generation found quiet, and when: lost
	// until heard again (Stop)
	aside  map[int]time.Time
	change chan struct{} // a new advert came (buffered, 1)
	// conflict is two live tasks claiming one rank, "" if none.
	conflict string
	// began is when the first generation was ordered (zero: not yet): a
	// task started after it that claims the rank of a live task is of
	// another launch, and refused.
	began time.Time
	// refused is the tasks refused so far, by host and pid: each is said
	// once.
	refused map[string]bool

	procs  []*exec.Cmd
	exited <-chan struct{}
}

type seenTask struct {
	ad   TaskAdvert
	last time.Time
	// prev is the task of this rank it displaced (another process: one
	// started again in its place, or a second claiming its rank)
	prev *TaskAdvert
}

// TaskConfig is how a TaskLauncher finds and starts its workers.
type TaskConfig struct {
	Env *TaskEnv // task 0's
	// Worker is the command of a worker process (graphpipe worker
	// --plan-device D --gen G) for task 0's own device (w.Own), or, with
	// Replace, for a task lost for good.
	// The command ends with ctx (exec.CommandContext), its Cancel, when
	// set, being how to end it (srun's SIGTERM ends its step's task).
	Worker func(ctx context.Context, w TaskWorker) (*exec.Cmd, error)
	// Replace says a lost task's device is given a worker process of
	// Worker's within the allocation; false: the environment starts the
	// task again, and a generation waits for it.
	Replace bool
	// Model is the digest of the model and plan task 0 was given (""
	// for none): a task that says another is of another launch, and
	// refused.
	Model string
	// JoinTimeout > 0 bounds the wait for the tasks; 0 waits for ever.
	JoinTimeout time.Duration
	// Stop, once closed, ends the wait for the tasks with a
	// *runtime.StoppedError (Early), as it ends the coordinator's wait for
	// its workers (runtime.Config.Stop): a run that has not begun stops at
	// the first signal.
	Stop <-chan struct{}
	// Timings are the run's: a task is lost when silent for its
	// HeartbeatTimeout.
	Timings runtime.Timings
	Log     io.Writer // what it orders and replaces; nil: nothing said
}

// TaskWorker is one worker process a TaskLauncher starts.
type TaskWorker struct {
	Run     string
	Gen     uint32
	Device  int    // the plan's
	Rank    int    // the task it stands in for
	Own     bool   // task 0's own device
	Node    int    // the task's node (TaskEnv.Hosts names it, where known)
	Host    string // the task's host, "" when not known (task 0's own)
	Visible string // the task's CUDA_VISIBLE_DEVICES
	GPU     int    // the task's GPU ordinal (after Visible), -1 for none
}

// NewTaskLauncher starts listening to the adverts of run's tasks over t.
func NewTaskLauncher(t wire.Transport, run string, c TaskConfig) (*TaskLauncher, error) {
	c.Timings = c.Timings.WithDefaults()
	l := &TaskLauncher{cfg: c, t: t, run: run, seen: map[int]seenTask{}, aside: map[int]time.Time{}, refused: map[string]bool{}, change: make(chan struct{}, 1)}
	unsub, err := t.Subscribe(tasksAdverts(run), l.heard)
	if err != nil {
		return nil, err
	}
	l.unsub = unsub
	return l, nil
}

// heard takes a task's advert: a task of another launch is refused, and
// the run goes on; one of this launch is seen.
func (l *TaskLauncher) heard(b []byte) {
	var ad TaskAdvert
	if json.Unmarshal(b, &ad) != nil || ad.Rank <= 0 {
		return
	}
	if why := l.foreign(ad); why != "" {
		l.refuse(ad, why)
		return
	}
	if ad.Rank >= l.cfg.Env.Tasks {
		return
	}
	now := time.Now()
	l.mu.Lock()
	s, ok := l.seen[ad.Rank]
	if why := l.intruder(s, ok, ad, now); why != "" {
		l.mu.Unlock()
		l.refuse(ad, why)
		return
	}
	next := seenTask{ad: ad, last: now, prev: s.prev}
	if ok && !sameTask(s.ad, ad) {
		// another process of this rank: one started again in the place of
		// a task lost, unless the one it displaced speaks again
		if p := s.prev; p != nil && sameTask(*p, ad) && now.Sub(s.last) < l.cfg.Timings.HeartbeatTimeout && l.conflict == "" {
			l.conflict = fmt.Sprintf("two tasks claim rank %d: host %s pid %d and host %s pid %d", ad.Rank, s.ad.Host, s.ad.PID, ad.Host, ad.PID)
		}
		next.prev = &s.ad
	}
	l.seen[ad.Rank] = next
	l.mu.Unlock()
	select {
	case l.change <- struct{}{}:
	default:
	}
}

// foreign says why the task that advertises ad is of another launch than
// task 0's, "" when it may be of this one: it counts another number of
// tasks, or was given another model or plan.
func (l *TaskLauncher) foreign(ad TaskAdvert) string {
	e := l.cfg.Env
	switch {
	case ad.Tasks != 0 && ad.Tasks != e.Tasks:
		return fmt.Sprintf("it is one of %d tasks (%s), and this run's are %d: it is of another launch", ad.Tasks, e.TasksVar, e.Tasks)
	case ad.Model != "" && l.cfg.Model != "" && ad.Model != l.cfg.Model:
		return fmt.Sprintf("it was given another model or plan (digest %.12s) than task 0 (%.12s): it is of another launch", ad.Model, l.cfg.Model)
	}
	return ""
}

// intruder says why a task that claims the rank of s (seen when ok), a
// live task of the run, is refused: it started after the run began, so
// it is of a launch started later (a second job, by mistake, in the same
// directory and on the same port), which must not end the running one. A
// task started before (two tasks of one launch claiming one rank: a wrong
// environment) is left to the conflict it makes, which ends the run.
// Guarded by l.mu.
func (l *TaskLauncher) intruder(s seenTask, ok bool, ad TaskAdvert, now time.Time) string {
	if !ok || sameTask(s.ad, ad) || l.began.IsZero() || ad.Started.IsZero() || !ad.Started.After(l.began) ||
		s.ad.Left || now.Sub(s.last) > l.cfg.Timings.HeartbeatTimeout {
		return ""
	}
	return fmt.Sprintf("%s %d is task %d's (host %s, pid %d), which serves the run; this task started after the run began: is it of a second launch, in the same directory and on the same address and port?",
		l.cfg.Env.RankVar, ad.Rank, ad.Rank, s.ad.Host, s.ad.PID)
}

// refuse tells the task that advertises ad to leave, every time it is
// heard until it does, and says so once.
func (l *TaskLauncher) refuse(ad TaskAdvert, why string) {
	who := fmt.Sprintf("%s/%d/%d", ad.Host, ad.PID, ad.Started.UnixNano())
	l.mu.Lock()
	said := l.refused[who]
	l.refused[who] = true
	l.mu.Unlock()
	if !said {
		l.say("refused a task claiming %s %d (host %s, pid %d): %s; the run goes on\n", l.cfg.Env.RankVar, ad.Rank, ad.Host, ad.PID, why)
	}
	l.publish(l.run, TaskOrder{Refuse: &TaskRefusal{Rank: ad.Rank, Host: ad.Host, PID: ad.PID, Started: ad.Started, Why: why}})
}

// Start orders gen's tasks to join it, once every task has been heard (up
// to the join timeout), starts task 0's own worker and, where it may, one
// for each task lost for good.
func (l *TaskLauncher) Start(ctx context.Context, gen *Generation) error {
	tm := l.cfg.Timings
	go tm.Beat(ctx, l.t, runtime.CoordinatorBeats(gen.Run), func() []byte { return []byte{} })
	tasks, lost, err := l.await(ctx, gen)
	if err != nil {
		return err
	}
	order := TaskOrder{Gen: gen.Gen, Devices: map[int]int{}, Timings: &tm}
	var workers []TaskWorker
	used := map[int]bool{}
	for _, s := range gen.Slots {
		used[s.Device] = true
	}
	for rank := range l.cfg.Env.Tasks {
		ad := tasks[rank]
		d, err := PlanDevice(gen.Plan, ad.Node, ad.Local)
		if err != nil {
			return envErr(l.cfg.Env.RankVar, "task %d (node %d, local rank %d): %v", rank, ad.Node, ad.Local, err)
		}
		switch {
		case !used[d]:
		case rank == 0:
			workers = append(workers, TaskWorker{Run: gen.Run, Gen: gen.Gen, Device: d, Own: true, Visible: ad.Visible, GPU: ad.GPU})
		case !lost[rank]:
			order.Devices[rank] = d
		default:
			w := TaskWorker{Run: gen.Run, Gen: gen.Gen, Device: d, Rank: rank, Node: ad.Node, Host: ad.Host, Visible: ad.Visible, GPU: ad.GPU}
			l.say("task %d (%s %d, host %s, pid %d) is gone: device %d of the plan gets a worker started in its place\n", rank, l.cfg.Env.RankVar, rank, ad.Host, ad.PID, d)
			workers = append(workers, w)
		}
	}
	if err := l.startWorkers(ctx, gen, workers); err != nil {
		return err
	}
	l.mu.Lock()
	if l.began.IsZero() {
		l.began = time.Now()
	}
	l.mu.Unlock()
	l.publish(gen.Run, order)
	go l.watch(ctx, gen, order)
	return nil
}

// await waits until every task other than 0 has been heard and, unless
// lost tasks are replaced, is live. It returns every task's advert by rank
// (task 0's made from its environment), and which of them are lost.
func (l *TaskLauncher) await(ctx context.Context, gen *Generation) (map[int]TaskAdvert, map[int]bool, error) {
	deadline, wait, stop := joinDeadline(l.cfg.JoinTimeout, gen)
	defer stop()
	tick := time.NewTicker(l.cfg.Timings.HeartbeatEvery)
	defer tick.Stop()
	said, began := false, time.Now()
	for {
		tasks, lost, missing, err := l.tasks()
		if err != nil {
			return nil, nil, err
		}
		if len(missing) == 0 {
			return tasks, lost, nil
		}
		if !said && time.Since(began) > l.cfg.Timings.HeartbeatTimeout {
			l.say("waiting for %s %s of %d to be there\n", l.cfg.Env.RankVar, ranksWord(missing), l.cfg.Env.Tasks)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, nil, context.Cause(ctx)
		case <-l.cfg.Stop:
			return nil, nil, &runtime.StoppedError{Step: gen.From, Early: true}
		case <-deadline:
			return nil, nil, fmt.Errorf("%s %s of %d not there within %v", l.cfg.Env.RankVar, ranksWord(missing), l.cfg.Env.Tasks, wait)
		case <-l.change:
		case <-tick.C:
		}
	}
}

// tasks is every task's advert (task 0's made from its environment), the
// lost ones (heard once, silent for the heartbeat timeout since), and the
// ranks still waited for: never heard, or lost where lost tasks are not
// replaced. Two live tasks of one rank are an *EnvError.
func (l *TaskLauncher) tasks() (ads map[int]TaskAdvert, lost map[int]bool, missing []int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.cfg.Env
	if l.conflict != "" {
		return nil, nil, nil, envErr(e.RankVar, "%s", l.conflict)
	}
	ads = map[int]TaskAdvert{0: {Rank: 0, Node: e.Node, Local: e.Local, Visible: e.Visible, GPU: e.GPU}}
	lost = map[int]bool{}
	for rank := 1; rank < e.Tasks; rank++ {
		s, ok := l.seen[rank]
		at, aside := l.aside[rank]
		gone := ok && (s.ad.Left || time.Since(s.last) > l.cfg.Timings.HeartbeatTimeout || aside && !s.last.After(at))
		if !ok || gone && !l.cfg.Replace {
			missing = append(missing, rank)
			continue
		}
		ads[rank], lost[rank] = s.ad, gone
	}
	return ads, lost, missing, nil
}

// startWorkers starts ws's processes and watches them: one that exits
// with an error fails the generation (gen.Lost).
func (l *TaskLauncher) startWorkers(ctx context.Context, gen *Generation, ws []TaskWorker) error {
	l.procs = nil
	for _, w := range ws {
		c, err := l.cfg.Worker(ctx, w)
		if err == nil {
			err = c.Start()
		}
		if err != nil {
			for _, p := range l.procs {
				p.Process.Kill()
				p.Wait()
			}
			l.procs = nil
			return fmt.Errorf("starting the worker of device %d: %w", w.Device, err)
		}
		l.procs = append(l.procs, c)
	}
	l.exited = watchProcesses(l.procs, gen.Lost)
	return nil
}

// publish says order to every task.
func (l *TaskLauncher) publish(run string, o TaskOrder) {
	b, _ := json.Marshal(o)
	l.t.Publish(tasksOrders(run), b)
}

// watch says order again every beat until each task it names serves its
// generation, and fails the generation (gen.Lost) once one of them has
// been silent for the heartbeat timeout, or two claim one rank.
func (l *TaskLauncher) watch(ctx context.Context, gen *Generation, order TaskOrder) {
	tm := l.cfg.Timings
	tick := time.NewTicker(tm.HeartbeatEvery / 2)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		late := false
		l.mu.Lock()
		conflict := l.conflict
		for rank, d := range order.Devices {
			s := l.seen[rank]
			late = late || s.ad.Gen < gen.Gen
			if quiet := time.Since(s.last); quiet > tm.HeartbeatTimeout && gen.Lost != nil {
				l.mu.Unlock()
				gen.Lost(&runtime.SilentError{Who: fmt.Sprintf("task %d (%s %d, host %s, pid %d), device %d of the plan,", rank, l.cfg.Env.RankVar, rank, s.ad.Host, s.ad.PID, d), Silent: quiet})
				return
			}
		}
		l.mu.Unlock()
		if conflict != "" && gen.Lost != nil {
			gen.Lost(envErr(l.cfg.Env.RankVar, "%s", conflict))
			return
		}
		if late && n%2 == 1 {
			l.publish(gen.Run, order)
		}
	}
}

// Stop tells a failed generation's tasks to leave it, and ends the worker
// processes it started: at once when the generation failed, otherwise
// once they have left (briefly waited for). A task of a failed generation
// not heard for two heartbeats is taken for lost until it is heard again:
// it is likely the one lost, whose worker's silence the coordinator can
// notice up to a beat before its adverts have been silent for the
// heartbeat timeout; ordered to join the next generation, it would fail
// that one too.
func (l *TaskLauncher) Stop(gen *Generation, failed bool) {
	if failed {
		l.setAside()
		l.publish(gen.Run, TaskOrder{Gen: gen.Gen, Stop: true})
		for _, p := range l.procs {
			end(p)
		}
	}
	if l.exited == nil {
		return
	}
	select {
	case <-l.exited:
	case <-time.After(5 * time.Second):
		for _, p := range l.procs {
			p.Process.Kill()
		}
		<-l.exited
	}
	l.procs, l.exited = nil, nil
}

// sameTask says a and b are one process.
func sameTask(a, b TaskAdvert) bool { return a.PID == b.PID && a.Host == b.Host }

// setAside takes the tasks quiet for two heartbeats for lost until heard
// again.
func (l *TaskLauncher) setAside() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for rank, s := range l.seen {
		if now.Sub(s.last) > 2*l.cfg.Timings.HeartbeatEvery {
			l.aside[rank] = now
		}
	}
}

// end ends a worker process: as its Cancel says, else by SIGKILL.
func end(p *exec.Cmd) {
	if p.Cancel != nil {
		p.Cancel()
		return
	}
	p.Process.Kill()
}

// Close tells the tasks the run is over, as a run that ended well.
func (l *TaskLauncher) Close() error { return l.End(nil) }

// End tells the tasks the run is over, and how: failed with err, or
// well (nil), again every beat until each one heard has said it leaves
// or has been quiet for two beats (for at most the heartbeat timeout):
// once End returns, task 0 may shut its server down without a task
// missing the word. It stops listening.
func (l *TaskLauncher) End(err error) error {
	tm := l.cfg.Timings
	deadline := time.After(tm.HeartbeatTimeout)
	tick := time.NewTicker(tm.HeartbeatEvery)
	defer tick.Stop()
	last := TaskOrder{End: true}
	if err != nil {
		last.Failed = err.Error()
	}
	l.publish(l.run, last)
	for l.staying() {
		select {
		case <-deadline:
		case <-tick.C:
			l.publish(l.run, last)
			continue
		case <-l.change:
			continue
		}
		break
	}
	if l.unsub != nil {
		l.unsub()
		l.unsub = nil
	}
	return nil
}

// staying says some task heard within two beats has not said it leaves.
func (l *TaskLauncher) staying() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.seen {
		if !s.ad.Left && time.Since(s.last) < 2*l.cfg.Timings.HeartbeatEvery {
			return true
		}
	}
	return false
}

func (l *TaskLauncher) say(format string, args ...any) {
	if l.cfg.Log != nil {
		fmt.Fprintf(l.cfg.Log, "graphpipe: "+format, args...)
	}
}

// ranksWord is ranks as "1, 2 and 5".
func ranksWord(ranks []int) string {
	sort.Ints(ranks)
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprint(r)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

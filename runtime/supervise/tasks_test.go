package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// TestCheckPlanOnTasks: a plan runs on the tasks when they are one per
// device, on as many nodes, as many on each; otherwise the *EnvError names
// the variable that says how many.
func TestCheckPlanOnTasks(t *testing.T) {
	_, p := smallPlan(t, "mlp", 3, 8) // 3 devices, 4 a node: one node
	tasks := func(n, nodes, per int) *TaskEnv {
		return &TaskEnv{Tasks: n, Nodes: nodes, PerNode: per, TasksVar: "SLURM_NTASKS", PerNodeVar: "SLURM_STEP_TASKS_PER_NODE"}
	}
	for _, tc := range []struct {
		name string
		env  *TaskEnv
		want string // "" for none
	}{
		{"one task per device", tasks(3, 1, 3), ""},
		{"a task too many", tasks(4, 1, 4), "SLURM_NTASKS: 4 tasks, but the plan runs on 3 devices"},
		{"other nodes", tasks(3, 3, 1), "SLURM_STEP_TASKS_PER_NODE: 1 tasks on each of 3 nodes, but the plan puts its 3 devices on 1 nodes (node 0: 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPlanOnTasks(p, tc.env)
			var ee *EnvError
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (!errors.As(err, &ee) || !strings.HasPrefix(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	for local := range 3 {
		if d, err := PlanDevice(p, 0, local); err != nil || d != local {
			t.Errorf("local rank %d: device %d, %v", local, d, err)
		}
	}
	if _, err := PlanDevice(p, 0, 3); err == nil {
		t.Error("local rank 3 of a node of 3 devices has a device")
	}
	if _, err := PlanDevice(p, 1, 0); err == nil {
		t.Error("node 1 of a plan of one node has a device")
	}
}

// taskRun is a run on tasks here: task 0's launcher, whose own device and
// replacements are worker processes (this test binary), and tasks 1 to
// n-1 as goroutines, each stoppable.
type taskRun struct {
	t     *testing.T
	srv   *wire.Embedded
	run   string
	n     int
	log   bytes.Buffer
	mu    sync.Mutex // guards stops
	stops map[int]context.CancelFunc
}

func newTaskRun(t *testing.T, n int) *taskRun {
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return &taskRun{t: t, srv: srv, run: strings.ReplaceAll(t.Name(), "/", "-"), n: n, stops: map[int]context.CancelFunc{}}
}

func (r *taskRun) env(rank int) *TaskEnv {
	return &TaskEnv{Source: "test", RankVar: "RANK", TasksVar: "WORLD_SIZE", PerNodeVar: "LOCAL_WORLD_SIZE",
		Rank: rank, Tasks: r.n, Local: rank, Nodes: 1, PerNode: r.n, GPU: -1, Key: r.run}
}

// task starts task rank as host.
func (r *taskRun) task(rank int, host string) {
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	r.mu.Lock()
	r.stops[rank] = cancel
	r.mu.Unlock()
	k := &Task{Env: r.env(rank), Run: r.run, Host: host, Config: runtime.Config{Timings: shortTimings(), JoinTimeout: 30 * time.Second}}
	go k.Serve(ctx, dialServer(r.t, r.srv, fmt.Sprint("task ", rank)))
}

// stop stops task rank, as if killed.
func (r *taskRun) stop(rank int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stops[rank]()
}

func (r *taskRun) launcher(tr wire.Transport) *TaskLauncher { return r.launcherReplacing(tr, true) }

// launcherReplacing is task 0's launcher, which starts a worker in the
// place of a lost task when replace, and otherwise waits for it.
func (r *taskRun) launcherReplacing(tr wire.Transport, replace bool) *TaskLauncher {
	dir := r.t.TempDir()
	l, err := NewTaskLauncher(tr, r.run, TaskConfig{Env: r.env(0), Replace: replace, JoinTimeout: 30 * time.Second, Timings: shortTimings(), Log: SyncWriter(&r.log),
		Worker: func(ctx context.Context, w TaskWorker) (*exec.Cmd, error) {
			self, err := os.Executable()
			if err != nil {
				return nil, err
			}
			c := exec.CommandContext(ctx, self, "worker", "--nats", r.srv.URL(), "--run", w.Run, "--gen", fmt.Sprint(w.Gen), "--plan-device", fmt.Sprint(w.Device))
			c.Env, c.Stderr = append(os.Environ(), TokenEnv+"="+r.srv.Token, testWorkerEnv+"="+dir), os.Stderr
			return c, nil
		}})
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// TestTasksReplaceALostTask: a task lost mid-run (stopped after step 3 of
// 8) fails its generation; the next starts a worker in its place, the
// other task and task 0's own worker rejoin, and the run resumes from the
// last checkpoint and ends with the parameters of a run in one process,
// bit for bit.
func TestTasksReplaceALostTask(t *testing.T) {
	r := newTaskRun(t, 3)
	g, p := smallPlan(t, "mlp", 3, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o := runtime.Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 0.01}, CheckpointEvery: 1}
	want, err := runtime.RunLocal(ctx, &runtime.Job{Run: "ref", Graph: g, Plan: p, Steps: 8, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	r.task(1, "h1")
	r.task(2, "h2")
	tr := dialServer(t, r.srv, "coordinator")
	job := &Job{Job: runtime.Job{Run: r.run, Graph: g, Plan: p, Steps: 8, Options: o,
		Config: runtime.Config{CheckpointDir: t.TempDir(), Timings: shortTimings(), JoinTimeout: 60 * time.Second}}, Local: Local{Restarts: 1}}
	var once sync.Once
	sup := &Supervisor{Job: job, T: tr, Launcher: r.launcher(tr), Log: SyncWriter(&r.log), Progress: func(iter int64, _ float64) {
		if iter == 2 {
			once.Do(func() { r.stop(2) })
		}
	}}
	res, _, err := sup.Run(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, r.log.String())
	}
	equalParams(t, res.Params, want.Params, 0)
	log := r.log.String()
	if len(res.Recoveries) != 1 || !strings.Contains(log, "task 2 (RANK 2, host h2, pid") || !strings.Contains(log, "device 2 of the plan gets a worker started in its place") ||
		!strings.Contains(log, "as generation 2 from the checkpoint at step") {
		t.Fatalf("%d recoveries; log:\n%s", len(res.Recoveries), log)
	}
}

// TestTasksWaitForATaskStartedAgain: where the environment starts a lost
// task again (torchrun, Kubernetes), the next generation waits for it, takes
// the new process for the rank (no conflict with the one it replaces) and
// ends bit-identical to a run in one process.
func TestTasksWaitForATaskStartedAgain(t *testing.T) {
	r := newTaskRun(t, 3)
	g, p := smallPlan(t, "mlp", 3, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o := runtime.Options{Train: stage.TrainOptions{Optimizer: "adam", LR: 0.01}, CheckpointEvery: 1}
	want, err := runtime.RunLocal(ctx, &runtime.Job{Run: "ref", Graph: g, Plan: p, Steps: 8, Options: o}, wire.NewMemory(1, wire.Faults{}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	r.task(1, "h1")
	r.task(2, "h2")
	tr := dialServer(t, r.srv, "coordinator")
	job := &Job{Job: runtime.Job{Run: r.run, Graph: g, Plan: p, Steps: 8, Options: o,
		Config: runtime.Config{CheckpointDir: t.TempDir(), Timings: shortTimings(), JoinTimeout: 60 * time.Second}}, Local: Local{Restarts: 1}}
	var once sync.Once
	sup := &Supervisor{Job: job, T: tr, Launcher: r.launcherReplacing(tr, false), Log: SyncWriter(&r.log), Progress: func(iter int64, _ float64) {
		if iter == 2 {
			once.Do(func() {
				r.stop(2)
				time.AfterFunc(300*time.Millisecond, func() { r.task(2, "h2-again") })
			})
		}
	}}
	res, _, err := sup.Run(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, r.log.String())
	}
	equalParams(t, res.Params, want.Params, 0)
	id := -1
	for _, s := range Slots(p) {
		if s.Device == 2 {
			id = s.Worker
		}
	}
	if len(res.Recoveries) != 1 || res.Joined[id].Host != "h2-again" || strings.Contains(r.log.String(), "is gone") {
		t.Fatalf("%d recoveries, device 2 on %s; log:\n%s", len(res.Recoveries), res.Joined[id].Host, r.log.String())
	}
}

// TestTasksTwoClaimOneRank: two live tasks of one rank fail the
// generation (its start, or, when the second is heard after the start,
// gen.Lost) with an *EnvError naming the rank's variable and both tasks;
// no restart meets it (Final).
func TestTasksTwoClaimOneRank(t *testing.T) {
	r := newTaskRun(t, 3)
	_, p := smallPlan(t, "mlp", 3, 8)
	r.task(1, "h1")
	r.task(2, "h2")
	r.task(2, "h3")
	tr := dialServer(t, r.srv, "coordinator")
	l := r.launcher(tr)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lost := make(chan error, 4)
	gen := &Generation{Run: r.run, Gen: 1, Plan: p, Slots: Slots(p), Lost: func(err error) { lost <- err }}
	err := l.Start(ctx, gen)
	if err == nil {
		select {
		case err = <-lost:
		case <-time.After(10 * time.Second):
		}
		l.Stop(gen, true)
	}
	var ee *EnvError
	if !errors.As(err, &ee) || ee.Var != "RANK" || !strings.Contains(err.Error(), "two tasks claim rank 2: host h") || !Final(err) {
		t.Fatalf("got %v, want an EnvError: two tasks claim rank 2", err)
	}
}

// TestTasksRefuseIntruders: once a generation is ordered, a task that
// started after it and claims a live task's rank, or one of another model
// or number of tasks, is refused (its Serve returns a *RefusedError) and
// the generation goes on (gen.Lost is not called).
func TestTasksRefuseIntruders(t *testing.T) {
	r := newTaskRun(t, 3)
	_, p := smallPlan(t, "mlp", 3, 8)
	r.task(1, "h1")
	r.task(2, "h2")
	tr := dialServer(t, r.srv, "coordinator")
	l := r.launcher(tr)
	l.cfg.Model = "m"
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lost := make(chan error, 4)
	gen := &Generation{Run: r.run, Gen: 1, Plan: p, Slots: Slots(p), Lost: func(err error) { lost <- err }}
	if err := l.Start(ctx, gen); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(gen, true)
	for _, tc := range []struct {
		name       string
		rank, n    int
		model, why string
	}{
		{"a later task of a held rank", 2, 3, "m", "RANK 2 is task 2's (host h2, pid "},
		{"another model's", 1, 3, "x", "it was given another model or plan"},
		{"another number of tasks'", 3, 4, "m", "it is one of 4 tasks (WORLD_SIZE), and this run's are 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := r.env(tc.rank)
			e.Tasks, e.PerNode = tc.n, tc.n
			k := &Task{Env: e, Run: r.run, Host: "h9", Model: tc.model, Started: time.Now(), Config: runtime.Config{Timings: shortTimings(), JoinTimeout: 30 * time.Second}}
			err := k.Serve(ctx, dialServer(t, r.srv, "intruder"))
			var re *RefusedError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("got %v, want refused: %q", err, tc.why)
			}
		})
	}
	select {
	case err := <-lost:
		t.Fatalf("the generation was lost: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
}

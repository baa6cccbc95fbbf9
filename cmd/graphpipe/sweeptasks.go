package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// A sweep whose tasks an environment started, each running the same
// 'graphpipe sweep SWEEP --run' (srun in a Slurm allocation, torchrun, a
// Kubernetes Indexed Job): task 0 plans the sweep for the tasks, starts
// the NATS server on its node's address, tells the others where through
// the rendezvous file a run's tasks use, and runs the sweep as --workers
// pool:KEY does, over a pool named after the launch (its key) whose agents
// are the other tasks (supervise.SweepTask) and a worker process of its
// own for its device. supervise.SweepTasks waits for the tasks, refuses
// those of another launch, and tells them when the sweep is over.

// forTasks makes the sweep's defaults the allocation's, as run's forTasks
// does: one device per task, as many on a node as the tasks on each node;
// the embedded server on task 0's node's address. --devices and
// --devices-per-node, given, must say the same; a cluster file is refused
// (the tasks are the cluster).
func (f *sweepFlags) forTasks(cmd *cobra.Command) error {
	e, fl := f.tasks, cmd.Flags()
	switch {
	case f.search.cluster != "":
		return usagef("--cluster %s: a sweep of tasks plans for its tasks, one device each (%s %d, %d on each node): leave --cluster out and name their profile with --device", f.search.cluster, e.TasksVar, e.Tasks, e.PerNode)
	case !fl.Changed("devices"):
		f.search.devices, f.search.devicesFrom = e.Tasks, e.TasksVar
	case f.search.devices != e.Tasks:
		return usagef("--devices %d: the sweep's tasks are %d (%s %d), one per device: leave --devices out, and the sweep is planned for %d devices", f.search.devices, e.Tasks, e.TasksVar, e.Tasks, e.Tasks)
	}
	switch {
	case !fl.Changed("devices-per-node"):
		f.search.perNode = e.PerNode
	case f.search.perNode != e.PerNode:
		return usagef("--devices-per-node %d: the sweep's tasks are %d on each node (%s): leave --devices-per-node out", f.search.perNode, e.PerNode, e.PerNodeVar)
	}
	if f.nats.url == "" {
		f.nats.listen = net.JoinHostPort(e.Addr, strconv.Itoa(e.Port))
	}
	return nil
}

// jobWorkers is who runs the jobs' workers: --workers, or with tasks the
// agents of the launch's pool.
func (f *sweepFlags) jobWorkers() workersFlag {
	if f.tasks != nil {
		return workersFlag{kind: poolWorkers, name: f.tasks.Key}
	}
	return f.workers
}

// timings are the sweep's: a task, an agent or task 0 silent for
// --heartbeat-timeout is lost.
func (f *sweepFlags) timings() runtime.Timings {
	return runtime.Timings{HeartbeatTimeout: f.elastic.heartbeat}
}

// sweepHost is task 0's side of a sweep's tasks: the NATS server the
// pool's agents are on, the rendezvous file, task 0's own agent, and the
// other tasks.
type sweepHost struct {
	ns      *runNATS
	t       *wire.NATS
	tasks   *supervise.SweepTasks
	remove  func()
	agent   *exec.Cmd
	exited  chan struct{} // closed once the agent has exited
	closing atomic.Bool
}

// hostTasks starts the server, tells the tasks where it is, starts task
// 0's own agent and waits for every task; from then on the jobs take the
// agents of the launch's pool on that server.
func (f *sweepFlags) hostTasks(ctx context.Context, cmd *cobra.Command) (h *sweepHost, err error) {
	e, log := f.tasks, cmd.ErrOrStderr()
	h = &sweepHost{}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	if h.ns, err = startNATS(&f.nats, e.Key, log); err != nil {
		return nil, taskListenError(e, err)
	}
	if h.t, err = wire.DialNATS(h.ns.opts); err != nil {
		return nil, dialError(err)
	}
	if err := f.writeRendezvous(h, log); err != nil {
		return nil, err
	}
	if h.tasks, err = supervise.NewSweepTasks(h.t, e.Key, supervise.TaskConfig{Env: e, Model: f.digest, JoinTimeout: f.joinTimeout, Timings: f.timings(), Log: log}); err != nil {
		return nil, err
	}
	if err := f.startAgent(h, log); err != nil {
		h.tasks.End(err)
		return nil, err
	}
	if err := h.tasks.Await(ctx); err != nil {
		h.tasks.End(err)
		var ee *supervise.EnvError
		if errors.As(err, &ee) {
			return nil, inputf("%v", err)
		}
		return nil, err
	}
	f.workers, f.nats.url, f.nats.token = f.jobWorkers(), h.ns.opts.URL, h.ns.opts.Token
	return h, nil
}

// writeRendezvous tells the other tasks where task 0's server is: its
// address, and its token when generated here.
func (f *sweepFlags) writeRendezvous(h *sweepHost, log io.Writer) error {
	e := f.tasks
	url := h.ns.opts.URL
	if h.ns.srv != nil {
		url = h.ns.reachableURL()
	}
	rv := supervise.Rendezvous{Key: e.Key, URL: url, Run: e.Key, PID: os.Getpid()}
	rv.Host, _ = os.Hostname()
	if h.ns.srv != nil && f.nats.token == "" && os.Getenv(tokenEnv) == "" {
		rv.Token = h.ns.srv.Token // generated here: the file is the only way the tasks learn it
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	path := supervise.RendezvousPath(wd, e)
	if err := supervise.WriteRendezvous(path, rv); err != nil {
		return inputf("rendezvous file %s: %v (the tasks meet through the job's working directory)", path, cause(err))
	}
	f.met, h.remove = true, func() { os.Remove(path) }
	fmt.Fprintf(log, "graphpipe: task 0 of %d (%s 0) runs sweep %s; the other tasks serve as agents of pool %s on its NATS server at %s (said in %s, mode 0600)\n",
		e.Tasks, e.RankVar, e.Key, e.Key, redactURLs(url), path)
	return nil
}

// startAgent starts task 0's own agent of the pool, for its device: a
// worker process, as a run's task 0 starts its own worker.
func (f *sweepFlags) startAgent(h *sweepHost, log io.Writer) error {
	e := f.tasks
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"worker", "--quiet", "--managed", "--nats", h.ns.opts.URL, "--pool", e.Key, "--backend", f.backend, "--device-profile", f.search.device}
	if f.backend == "cuda" {
		args = append(args, "--gpu", strconv.Itoa(max(e.GPU, 0)))
	}
	if f.nats.creds != "" { // --nats's server, which wants them
		args = append(args, "--nats-creds", f.nats.creds)
	}
	if f.nats.ca != "" {
		args = append(args, "--nats-ca", f.nats.ca)
	}
	h.agent = exec.Command(self, args...)
	h.agent.Env, h.agent.Stderr = workerEnv(e.PerNode, h.ns.opts.Token), log
	if err := h.agent.Start(); err != nil {
		h.agent = nil
		return fmt.Errorf("starting task 0's agent: %w", err)
	}
	h.exited = make(chan struct{})
	go func() {
		err := h.agent.Wait()
		if !h.closing.Load() {
			fmt.Fprintf(log, "graphpipe: task 0's own agent (pid %d) exited: %v; its device is lost to the sweep\n", h.agent.Process.Pid, err)
		}
		close(h.exited)
	}()
	return nil
}

// close ends task 0's agent, removes the rendezvous file and shuts the
// server down.
func (h *sweepHost) close() {
	if h.agent != nil {
		h.closing.Store(true)
		h.agent.Process.Kill()
		<-h.exited
	}
	if h.remove != nil {
		h.remove()
	}
	if h.t != nil {
		h.t.Close()
	}
	if h.ns != nil {
		h.ns.close()
	}
}

// serveTask is every task but task 0: an agent of the launch's pool until
// task 0 says the sweep is over. Once it has heard task 0, the signals
// that stop a sweep are task 0's to act on; before, the first ends it.
func (f *sweepFlags) serveTask(cmd *cobra.Command) error {
	return serveUntilJoined(cmd, syscall.SIGUSR1, f.tasks.Rank, "the sweep", func(ctx context.Context, made func(*supervise.SweepTask)) error {
		return f.serveTaskCtx(ctx, cmd, made)
	})
}

// serveTaskCtx is serveTask under ctx, which the first signal ends until
// the task (given to made) has heard task 0.
func (f *sweepFlags) serveTaskCtx(ctx context.Context, cmd *cobra.Command, made func(*supervise.SweepTask)) error {
	e, log := f.tasks, cmd.ErrOrStderr()
	o, err := f.search.options() // the agents are the devices the sweep is planned for
	if err != nil {
		return err
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		goruntime.GOMAXPROCS(max(1, goruntime.NumCPU()/e.PerNode))
	}
	df := deviceFlags{backend: f.backend, gpu: max(e.GPU, 0)}
	dev, err := df.open()
	if err != nil {
		return err
	}
	if dev != nil {
		defer dev.Close()
	}
	rv, err := findTaskZero(ctx, e, &f.nats, "", f.joinTimeout, log)
	if err != nil {
		return err
	}
	t, bulk, err := dialTaskZero(ctx, f, rv, log)
	if err != nil {
		return err
	}
	defer t.Close()
	defer bulk.Close()
	wlog := workerLog(log, false)
	cfg := runtime.Config{Device: dev, KillPoints: os.Getenv(runtime.KillEnv), Bulk: bulk, StreamCheckpoints: os.Getenv(runtime.StreamEnv) == "1"}
	k := &supervise.SweepTask{Env: e, Run: rv.Run, Model: f.digest, Started: processStart, JoinTimeout: f.joinTimeout, Timings: f.timings(), Log: wlog,
		Agent: &supervise.Agent{Pool: rv.Run, Profile: o.Device.Name, Memory: agentMemory(dev), Log: wlog, Config: cfg}}
	made(k)
	err = k.Serve(ctx, t)
	var ee *supervise.EnvError
	var re *supervise.RefusedError
	var fe *supervise.RunFailedError
	switch {
	case errors.As(err, &ee) || errors.As(err, &re):
		return inputf("%v", err)
	case errors.As(err, &fe):
		return fmt.Errorf("sweep %s failed: %s", fe.Run, fe.Why)
	}
	return err
}

// dialTaskZero connects a task to task 0's server, waiting for it a while:
// the connection the agent takes its orders on, and bulk, its state
// streams'.
func dialTaskZero(ctx context.Context, f *sweepFlags, rv supervise.Rendezvous, log io.Writer) (t, bulk *wire.NATS, err error) {
	opts := wire.NATSOptions{URL: rv.URL, Token: rv.Token, CredsFile: f.nats.creds, CAFile: f.nats.ca,
		Name: fmt.Sprintf("graphpipe task %d of sweep %s", f.tasks.Rank, rv.Run)}
	logConnection(&opts, log, "graphpipe task")
	t, err = wire.DialNATSWaiting(ctx, opts, 30*time.Second, func(err error) {
		fmt.Fprintf(log, "graphpipe: %v: waiting up to 30s for task 0's server\n", err)
	})
	if err != nil {
		return nil, nil, dialError(err)
	}
	if bulk, err = wire.DialNATS(bulkOptions(opts)); err != nil {
		t.Close()
		return nil, nil, dialError(err)
	}
	return t, bulk, nil
}

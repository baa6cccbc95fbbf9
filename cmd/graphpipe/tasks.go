package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/internal/regular"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// A run whose tasks an environment started, each running the same
// 'graphpipe run' (srun in a Slurm allocation, torchrun, a Kubernetes
// Indexed Job): task 0 plans (for the tasks, without a plan file), starts
// the NATS server on its node's address, tells the others where it is
// through a rendezvous file (supervise.Rendezvous) and coordinates with a
// supervise.TaskLauncher; every other task joins as a supervise.Task.

// detectTasks reads the environment when --workers is tasks, or left out
// and an environment started this process as one of several tasks (one
// task alone, as in 'srun --pty bash', runs as it would anywhere):
// f.tasks, nil for none. A wrong or partial environment is exit 2, naming
// the variable.
func (f *runFlags) detectTasks(cmd *cobra.Command) error {
	e, err := detectTaskEnv(cmd, f.workers, f.device.backend)
	if e != nil {
		f.tasks, f.workers = e, workersFlag{kind: taskWorkers}
	}
	return err
}

// detectTaskEnv is detectTasks for any command with --workers (run,
// sweep --run): the environment, nil for none.
func detectTaskEnv(cmd *cobra.Command, workers workersFlag, backend string) (*supervise.TaskEnv, error) {
	given := cmd.Flags().Changed("workers")
	if given && !workers.tasks() {
		return nil, nil
	}
	e, err := supervise.DetectEnv(taskGetenv(backend))
	if err != nil {
		return nil, inputf("%v", err)
	}
	switch {
	case e == nil && given:
		return nil, usagef("--workers tasks: no task environment here: run it as srun's tasks (SLURM_PROCID), torchrun's (RANK, WORLD_SIZE) or a Kubernetes Indexed Job's (JOB_COMPLETION_INDEX)")
	case e == nil || e.Tasks == 1 && !given:
		return nil, nil
	}
	if e.Outer != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: %s's variables (%s %d of %s %d) and %s are both set, as under 'srun torchrun': following %s's, the launcher that started this process\n",
			e.Source, e.RankVar, e.Rank, e.TasksVar, e.Tasks, e.Outer, e.Source)
	}
	return e, nil
}

// forTasks makes task 0's defaults the allocation's: a model is planned for
// one device per task, as many on a node as the tasks on each node; the
// embedded server listens on task 0's node's address (MASTER_ADDR:PORT);
// the run is named after the launch. --devices, given, must be the tasks'
// number.
func (f *runFlags) forTasks(cmd *cobra.Command) error {
	e, fl := f.tasks, cmd.Flags()
	switch {
	case !fl.Changed("devices"):
		f.search.devices, f.search.devicesFrom = e.Tasks, e.TasksVar
	case f.search.devices != e.Tasks:
		return usagef("--devices %d: the run's tasks are %d (%s %d), one per device of the plan: leave --devices out, and a model is planned for %d devices", f.search.devices, e.Tasks, e.TasksVar, e.Tasks, e.Tasks)
	}
	if !fl.Changed("devices-per-node") {
		f.search.perNode = e.PerNode
	}
	if f.nats.url == "" && f.nats.listen == "" {
		f.nats.listen = net.JoinHostPort(e.Addr, strconv.Itoa(e.Port))
	}
	if f.runID == "" {
		f.runID = e.Key
	}
	if f.device.backend == "cuda" && f.device.gpus == "" && e.GPU >= 0 {
		f.device.gpus = strconv.Itoa(e.GPU)
	}
	return nil
}

// launchDigest is a digest of what the command names to train (the model
// or plan file's bytes, --model's, and --seed when given), alike in every
// task of one launch: task 0 refuses a task whose digest is another's
// (supervise.TaskConfig.Model). "" when a file cannot be read here (not
// compared: task 0 says what is wrong with it).
func (f *runFlags) launchDigest(cmd *cobra.Command, arg string) string {
	seed := ""
	if cmd.Flags().Changed("seed") {
		seed = fmt.Sprintf("seed %d", f.seed)
	}
	return digestFiles([]string{arg, f.model}, seed)
}

// digestFiles is a digest of the files at paths ("" for none) and extra,
// "" when one cannot be read here or is standard input.
func digestFiles(paths []string, extra string) string {
	h := sha256.New()
	for _, path := range paths {
		if path == "-" {
			return "" // standard input is task 0's alone
		}
		if path == "" {
			h.Write([]byte{0})
			continue
		}
		data, err := regular.ReadFile(path)
		if err != nil {
			return ""
		}
		fmt.Fprintf(h, "%d:", len(data))
		h.Write(data)
	}
	h.Write([]byte(extra))
	return hex.EncodeToString(h.Sum(nil))
}

// processStart is when this process started: a task takes a rendezvous
// file that says its task 0 ended before then for an earlier launch's
// (supervise.RendezvousWait.Since).
var processStart = time.Now()

// clearRendezvous is task 0's first act, before it plans: the rendezvous
// file an earlier launch's task 0 left is removed (one that failed, or
// was killed), so that no task reads its failure or its token; a file of
// a task 0 still there, or one not to be trusted, is exit 2.
func (f *runFlags) clearRendezvous() error { return clearTaskRendezvous(f.tasks) }

// clearTaskRendezvous is clearRendezvous for task 0 of environment e (nil:
// none).
func clearTaskRendezvous(e *supervise.TaskEnv) error {
	if e == nil || e.Rank != 0 {
		return nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	err = supervise.ClearRendezvous(supervise.RendezvousPath(wd, e), host, nil)
	var ue *supervise.UntrustedError
	switch {
	case errors.As(err, &ue):
		return inputf("%v", err)
	case err != nil:
		return inputf("%s: 0, but %v", e.RankVar, err)
	}
	return nil
}

// taskZeroFailed tells the other tasks, through the rendezvous file, that
// task 0 failed with err before the run began: they leave at once instead
// of waiting for it for --join-timeout.
func (f *runFlags) taskZeroFailed(err error) {
	if !f.met {
		tellTasksFailed(f.tasks, err)
	}
}

// tellTasksFailed is taskZeroFailed for task 0 of environment e (nil:
// none), before it has written the rendezvous file that says where it is.
func tellTasksFailed(e *supervise.TaskEnv, err error) {
	if e == nil || e.Rank != 0 {
		return
	}
	wd, werr := os.Getwd()
	if werr != nil {
		return
	}
	rv := supervise.Rendezvous{Key: e.Key, PID: os.Getpid(), Failed: err.Error()}
	rv.Host, _ = os.Hostname()
	supervise.WriteRendezvous(supervise.RendezvousPath(wd, e), rv)
}

// taskZeroDone tells the other tasks, through the rendezvous file, that
// task 0 found nothing to do (done says why): they leave at once, and
// well, instead of waiting for it for --join-timeout.
func (f *runFlags) taskZeroDone(done string) {
	if f.tasks == nil || f.tasks.Rank != 0 {
		return
	}
	wd, err := os.Getwd()
	if err != nil {
		return
	}
	rv := supervise.Rendezvous{Key: f.tasks.Key, PID: os.Getpid(), Done: done}
	rv.Host, _ = os.Hostname()
	supervise.WriteRendezvous(supervise.RendezvousPath(wd, f.tasks), rv)
}

// tasksError words a run's failure that is its tasks' environment's fault:
// two tasks standing for one device of the plan (the coordinator's
// refusal) names the rank's variable; nil for any other.
func (f *runFlags) tasksError(err error) error {
	var je *runtime.JobError
	if f.tasks == nil || !errors.As(err, &je) || je.Field != "PlanDevice" {
		return nil
	}
	return inputf("%s: %s", f.tasks.RankVar, je.Msg)
}

// probeListen refuses, before task 0 plans anything, an address its
// environment names (MASTER_ADDR:MASTER_PORT, Slurm's first node) where
// it cannot listen: one that is not this host's (task 0 runs where it
// points), or does not resolve, or that another process holds (another
// task claims rank 0, or another program the port).
func (f *runFlags) probeListen() error { return probeTaskListen(f.tasks, &f.nats) }

// probeTaskListen is probeListen for task 0 of environment e (nil: none)
// with nats flags nf.
func probeTaskListen(e *supervise.TaskEnv, nf *natsFlags) error {
	if e == nil || nf.url != "" || nf.listen != "" {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(e.Addr, strconv.Itoa(e.Port)))
	if err == nil {
		return l.Close()
	}
	host, _ := os.Hostname()
	var de *net.DNSError
	switch {
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return inputf("%s: %s is not an address of this host (%s), where task 0 (%s 0) runs and its server listens for the other tasks: it must name task 0's host", e.AddrVar, e.Addr, host, e.RankVar)
	case errors.As(err, &de):
		return inputf("%s: %s does not resolve here (%s): it must name task 0's host (%s), where its server listens for the other tasks", e.AddrVar, e.Addr, de.Err, host)
	}
	return taskListenError(e, inputf("--nats-listen: %v", cause(err)))
}

// tasksListenError words task 0's failure to listen where its
// environment says (MASTER_ADDR:MASTER_PORT) as the environment's fault:
// another task claims rank 0, or another program holds the port.
func (f *runFlags) tasksListenError(err error) error { return taskListenError(f.tasks, err) }

// taskListenError is tasksListenError for environment e (nil: none).
func taskListenError(e *supervise.TaskEnv, err error) error {
	var ie *inputError
	if e == nil || e.Port == 0 || !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), "--nats-listen") {
		return err
	}
	_, why, _ := strings.Cut(err.Error(), ": ")
	return inputf("%s: 0, but %s is taken: another task claims rank 0, or another program holds the port (%s)", e.RankVar, net.JoinHostPort(e.Addr, strconv.Itoa(e.Port)), why)
}

// taskWorkerArgs are the device flags of task 0's own worker process.
func (f *runFlags) taskWorkerArgs(emulate bool) (func(int) []string, error) {
	d := &f.device
	if err := d.checkBackend(); err != nil {
		return nil, err
	}
	if d.backend != "cpu" && emulate {
		return nil, usagef("--backend %s: an emulated run computes nothing", d.backend)
	}
	args := []string{"--backend", d.backend, "--precision", d.precision, "--attention", cmp.Or(d.attention, plan.Unfused)}
	if d.backend == "cuda" {
		args = append(args, "--gpu", strconv.Itoa(max(f.tasks.GPU, 0)))
	}
	return func(int) []string { return args }, nil
}

// taskLauncher is task 0's launcher: the rendezvous file written (remove
// takes it away), the tasks ordered, task 0's own worker and the
// replacements of lost tasks started as processes (srun within the
// allocation, on Slurm).
func (f *runFlags) taskLauncher(t wire.Transport, ns *runNATS, job *supervise.Job, wargs func(int) []string, log io.Writer) (l supervise.Launcher, remove func(), err error) {
	e := f.tasks
	url := ns.opts.URL
	if ns.srv != nil {
		url = ns.reachableURL()
	}
	rv := supervise.Rendezvous{Key: e.Key, URL: url, Run: job.Run, PID: os.Getpid()}
	rv.Host, _ = os.Hostname()
	if ns.srv != nil && f.nats.token == "" && os.Getenv(tokenEnv) == "" {
		rv.Token = ns.srv.Token // generated here: the file is the only way the tasks learn it
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, nil, err
	}
	path := supervise.RendezvousPath(wd, e)
	if err := supervise.WriteRendezvous(path, rv); err != nil {
		return nil, nil, inputf("rendezvous file %s: %v (the tasks meet through the job's working directory)", path, cause(err))
	}
	f.met, remove = true, func() { os.Remove(path) }
	fmt.Fprintf(log, "graphpipe: task 0 of %d (%s 0) coordinates run %s; the other tasks reach its NATS server at %s (said in %s, mode 0600)\n",
		e.Tasks, e.RankVar, job.Run, redactURLs(url), path)
	srun, _ := exec.LookPath("srun")
	self, err := os.Executable()
	if err != nil {
		remove()
		return nil, nil, err
	}
	env := workerEnv(e.PerNode, ns.opts.Token) // a share of the node's cores and memory
	cfg := supervise.TaskConfig{Env: e, Replace: e.Source == "slurm" && e.JobID != "" && srun != "", JoinTimeout: job.Config.JoinTimeout, Timings: job.Config.Timings, Log: log,
		Stop: job.Config.Stop, Model: f.digest,
		Worker: func(ctx context.Context, w supervise.TaskWorker) (*exec.Cmd, error) {
			args := append([]string{"worker", "--quiet", "--nats", ns.opts.URL, "--run", w.Run, "--gen", fmt.Sprint(w.Gen), "--managed", "--plan-device", fmt.Sprint(w.Device)}, wargs(0)...)
			if w.Own {
				c := exec.CommandContext(ctx, self, args...)
				c.Env, c.Stderr = env, log
				return c, nil
			}
			args[3] = url // reached from the lost task's node
			if f.device.backend == "cuda" {
				args = append(args, "--gpu", strconv.Itoa(max(w.GPU, 0)))
			}
			node := w.Host // Slurm's name for the lost task's node
			if w.Node < len(e.Hosts) {
				node = e.Hosts[w.Node]
			}
			c := exec.CommandContext(ctx, srun, append([]string{"--overlap", "--jobid=" + e.JobID, "--nodelist=" + node, "--nodes=1", "--ntasks=1", "--quiet", self}, args...)...)
			c.Env, c.Stderr = env, log
			if w.Visible != "" {
				c.Env = append(c.Env, "CUDA_VISIBLE_DEVICES="+w.Visible)
			}
			c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) } // srun ends its step's task
			c.WaitDelay = 3 * time.Second
			return c, nil
		}}
	tl, err := supervise.NewTaskLauncher(t, job.Run, cfg)
	if err != nil {
		remove()
		return nil, nil, err
	}
	return tl, remove, nil
}

// serveTask is every task but task 0: it joins the generations task 0
// orders, on the device its environment gives it, until the run is over.
// Once it has joined, the signals that stop a run are task 0's to act on;
// before, the first ends it (taskSignals).
func (f *runFlags) serveTask(cmd *cobra.Command) error {
	return serveUntilJoined(cmd, f.preempt, f.tasks.Rank, "the run", func(ctx context.Context, made func(*supervise.Task)) error {
		return f.serveTaskCtx(ctx, cmd, made)
	})
}

// joiner is a task other than 0, which has joined once task 0 is heard.
type joiner interface{ Joined() bool }

// serveUntilJoined runs serve (which gives made the task it makes) under
// a context the first signal ends until that task has joined what (the
// run, the sweep): then the signal is an exit of 128 + it, naming rank.
func serveUntilJoined[T joiner](cmd *cobra.Command, preempt os.Signal, rank int, what string, serve func(context.Context, func(T)) error) error {
	var task atomic.Pointer[T] // set once made; the signals' goroutine reads it
	ctx, sig := watchTaskSignals(cmd.Context(), preempt, func() bool { k := task.Load(); return k != nil && (*k).Joined() })
	defer sig.done()
	err := serve(ctx, func(k T) { task.Store(&k) })
	if code := sig.code(); code != 0 {
		return &exitError{code, fmt.Errorf("%s: task %d stopped before it joined %s", signalName(sig.first()), rank, what)}
	}
	return err
}

// serveTaskCtx is serveTask under ctx, which the first signal ends until
// the task (given to made) has joined the run.
func (f *runFlags) serveTaskCtx(ctx context.Context, cmd *cobra.Command, made func(*supervise.Task)) error {
	e, log := f.tasks, cmd.ErrOrStderr()
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		goruntime.GOMAXPROCS(max(1, goruntime.NumCPU()/e.PerNode))
	}
	if f.device.backend == "cuda" {
		f.device.gpu = max(e.GPU, 0)
	}
	dev, err := f.device.open()
	if err != nil {
		return err
	}
	if dev != nil {
		defer dev.Close()
	}
	rv, err := f.rendezvous(ctx, e, log)
	if err != nil {
		return err
	}
	if rv.Done != "" {
		fmt.Fprintf(log, "graphpipe: task 0 (host %s, pid %d): %s\n", rv.Host, rv.PID, rv.Done)
		return nil
	}
	name := fmt.Sprintf("graphpipe task %d of run %s", e.Rank, rv.Run)
	opts := wire.NATSOptions{URL: rv.URL, Token: rv.Token, CredsFile: f.nats.creds, CAFile: f.nats.ca, Name: name}
	logConnection(&opts, log, "graphpipe task")
	t, err := wire.DialNATSWaiting(ctx, opts, 30*time.Second, func(err error) {
		fmt.Fprintf(log, "graphpipe: %v: waiting up to 30s for task 0's server\n", err)
	})
	if err != nil {
		return dialError(err)
	}
	defer t.Close()
	bulk, err := wire.DialNATS(bulkOptions(opts))
	if err != nil {
		return dialError(err)
	}
	defer bulk.Close()
	k := &supervise.Task{Env: e, Run: rv.Run, Log: workerLog(log, false), Model: f.digest, Started: processStart,
		Config: runtime.Config{Device: dev, Precision: f.device.precision, Attention: f.device.attention, KillPoints: os.Getenv(runtime.KillEnv), Bulk: bulk, JoinTimeout: f.joinTimeout,
			StreamCheckpoints: os.Getenv(runtime.StreamEnv) == "1"}}
	made(k)
	err = k.Serve(ctx, t)
	var ee *supervise.EnvError
	var re *supervise.RefusedError
	if errors.As(err, &ee) || errors.As(err, &re) {
		return inputf("%v", err)
	}
	return err
}

// rendezvous is where a task finds task 0: the URL and run its
// environment and flags make when they say them all (--nats, or
// MASTER_ADDR:MASTER_PORT, and a token every task has), else task 0's
// rendezvous file, waited for up to --join-timeout.
func (f *runFlags) rendezvous(ctx context.Context, e *supervise.TaskEnv, log io.Writer) (supervise.Rendezvous, error) {
	return findTaskZero(ctx, e, &f.nats, f.runID, f.joinTimeout, log)
}

// findTaskZero is rendezvous for a task of environment e with nats flags
// nf, run ID run ("": the launch's key) and join timeout wait.
func findTaskZero(ctx context.Context, e *supervise.TaskEnv, nf *natsFlags, run string, wait time.Duration, log io.Writer) (supervise.Rendezvous, error) {
	if run == "" {
		run = e.Key
	}
	tok := nf.token
	if tok == "" {
		tok = os.Getenv(tokenEnv)
	}
	known := tok != "" || nf.creds != "" || nf.noToken()
	switch {
	case nf.url != "" && known:
		return supervise.Rendezvous{URL: nf.url, Token: tok, Run: run}, nil
	case nf.url == "" && nf.listen == "" && e.Port > 0 && known:
		return supervise.Rendezvous{URL: "nats://" + net.JoinHostPort(e.Addr, strconv.Itoa(e.Port)), Token: tok, Run: run}, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return supervise.Rendezvous{}, err
	}
	w := supervise.RendezvousWait{Path: supervise.RendezvousPath(wd, e), Key: e.Key, Wait: wait, Since: processStart,
		Log: func(format string, args ...any) { fmt.Fprintf(log, "graphpipe: "+format+"\n", args...) }}
	rv, err := w.Read(ctx)
	var ue *supervise.UntrustedError
	if errors.As(err, &ue) {
		return rv, inputf("%v", err)
	}
	if err != nil {
		return rv, err
	}
	if rv.Token == "" {
		rv.Token = tok
	}
	return rv, nil
}

// taskSignals are the signals of a task other than 0: SIGINT, SIGTERM and
// the preemption signal. Until the task has joined the run, the first one
// ends it (its context, and the process with 128 + it): nothing is lost,
// and a task waiting for a task 0 that never comes must not need SIGKILL.
// Once it has joined, they are task 0's to act on (a workload manager
// signals every task; task 0 checkpoints and orders the stop), and the
// task goes on.
type taskSignals struct {
	ch     chan os.Signal
	quit   chan struct{}
	mu     sync.Mutex // guards got
	got    os.Signal
	cancel context.CancelCauseFunc
}

// watchTaskSignals listens for a task's signals; joined says whether it
// has joined the run.
func watchTaskSignals(ctx context.Context, preempt os.Signal, joined func() bool) (context.Context, *taskSignals) {
	ctx, cancel := context.WithCancelCause(ctx)
	s := &taskSignals{ch: make(chan os.Signal, 4), quit: make(chan struct{}), cancel: cancel}
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM, preempt)
	go func() {
		for {
			select {
			case sig := <-s.ch:
				if joined() {
					continue // task 0 orders the stop
				}
				s.mu.Lock()
				s.got = sig
				s.mu.Unlock()
				cancel(fmt.Errorf("%s before joining the run", signalName(sig)))
				return
			case <-s.quit:
				return
			}
		}
	}()
	return ctx, s
}

// first is the signal that ended the task, nil for none.
func (s *taskSignals) first() os.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

// code is 128 + the signal that ended the task, 0 for none.
func (s *taskSignals) code() int {
	if sig, ok := s.first().(syscall.Signal); ok {
		return 128 + int(sig)
	}
	return 0
}

// done stops listening.
func (s *taskSignals) done() {
	signal.Stop(s.ch)
	close(s.quit)
	s.cancel(nil)
}

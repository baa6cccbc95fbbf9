package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/sweep"
)

// sweepRan is how a sweep ran: the runner's result and where the jobs'
// outputs are.
type sweepRan struct {
	res *supervise.SweepResult
	sp  *sweepPlan
	out string
}

// job is job i as it ran, for sweep --json.
func (r *sweepRan) job(i int) *ranOut {
	sl, st := r.res.Ran[i], r.res.States[i]
	o := &ranOut{State: st.String(), Devices: sl.Devices, DeviceIDs: sl.DeviceIDs(), StartS: sl.Start, EndS: sl.End}
	if st == sweep.Ended {
		o.Run = filepath.Join(r.out, r.sp.l.jobs[i].spec.Name, "run.json")
	}
	if err := r.res.Errs[i]; err != nil {
		o.Error = err.Error()
	}
	if st == sweep.Skipped {
		o.Devices, o.DeviceIDs, o.StartS, o.EndS = 0, nil, 0, 0
	}
	return o
}

// runSweep trains the planned sweep (--run): each job a `graphpipe run`
// process of this binary, on its devices, under a supervise.SweepRunner;
// then it writes DIR/sweep.json and DIR/sweep.svg and prints the sweep as
// it ran. A failed job is exit 1, after the others.
func (f *sweepFlags) runSweep(cmd *cobra.Command, sp *sweepPlan) error {
	log := cmd.ErrOrStderr()
	prog, err := sweep.NewProgress(sp.problem, sp.sched, f.drift)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	jr := &jobRunner{f: f, sp: sp, exe: exe, id: randomID()}
	if f.tasks != nil {
		jr.id = f.tasks.Key // the launch's, as a run of tasks is named
	}
	if err := jr.prepare(); err != nil {
		return err
	}
	printSweep(log, sp.summary(nil))
	stops := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if f.tasks != nil {
		// a workload manager's warning, which the other tasks leave to
		// task 0 (as a run's tasks do), stops the sweep too
		stops = append(stops, syscall.SIGUSR1)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), stops...)
	defer stop()
	var host *sweepHost
	if f.tasks != nil {
		if host, err = f.hostTasks(ctx, cmd); err != nil {
			return err
		}
		defer host.close()
	}
	r := &supervise.SweepRunner{Progress: prog, Job: jr.run, Event: func(e supervise.SweepEvent) { sweepEvent(log, sp, prog, e) }}
	res, runErr := r.Run(ctx)
	runErr = f.sweepError(sp, runErr)
	if host != nil {
		host.tasks.End(runErr) // the tasks leave: well, or failed with it
	}
	ran := &sweepRan{res: res, sp: sp, out: f.out}
	if err := f.writeRan(cmd, sp, ran); err != nil {
		return err
	}
	if err := f.print(cmd, sp, ran); err != nil {
		return err
	}
	return runErr
}

// sweepError words the runner's error: the jobs that failed and were
// skipped.
func (f *sweepFlags) sweepError(sp *sweepPlan, err error) error {
	var fe *supervise.SweepFailedError
	if errors.As(err, &fe) {
		return fmt.Errorf("sweep: %s failed%s (their logs: %s/NAME/run.log)", jobNames(sp, fe.Failed), skippedWords(sp, fe.Skipped), f.out)
	}
	return err
}

// writeRan writes DIR/sweep.json, DIR/sweep.svg and --chart: the sweep
// planned and as it ran.
func (f *sweepFlags) writeRan(cmd *cobra.Command, sp *sweepPlan, ran *sweepRan) error {
	data, err := json.MarshalIndent(sp.summary(ran), "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile("--out", filepath.Join(f.out, "sweep.json"), append(data, '\n')); err != nil {
		return err
	}
	svg, err := sweepChart(sp, ran, filepath.Join(f.out, "sweep.svg"))
	if err != nil {
		return err
	}
	if err := writeFile("--out", filepath.Join(f.out, "sweep.svg"), svg); err != nil {
		return err
	}
	return f.drawChart(cmd, sp, ran)
}

// sweepEvent logs a start, end, failure, skip or re-plan.
func sweepEvent(w io.Writer, sp *sweepPlan, g *sweep.Progress, e supervise.SweepEvent) {
	name := sp.l.jobs[e.Slot.Job].spec.Name
	switch e.Kind {
	case "start":
		fmt.Fprintf(w, "sweep: %.4g s: %s starts on devices %s (planned at %.4g s)\n", e.At, name, plan.DeviceList(e.Slot.DeviceIDs()), e.Slot.Start)
	case "end":
		want := sp.problem.Jobs[e.Slot.Job].Choices
		for _, c := range want {
			if c.Devices == e.Slot.Devices {
				fmt.Fprintf(w, "sweep: %.4g s: %s ends after %.4g s (predicted %.4g s: %.3f×)\n", e.At, name, e.Slot.End-e.Slot.Start, c.Seconds, (e.Slot.End-e.Slot.Start)/c.Seconds)
			}
		}
	case "fail":
		fmt.Fprintf(w, "sweep: %.4g s: %s failed: %v\n", e.At, name, e.Err)
	case "skip":
		fmt.Fprintf(w, "sweep: %.4g s: %s skipped: a job it waits for failed\n", e.At, name)
	case "replan":
		fmt.Fprintf(w, "sweep: %.4g s: the jobs not started planned again, every prediction × %.3f (measured over predicted); the sweep now ends at %.4g s\n", e.At, g.Scale(), g.Plan().Makespan)
	}
}

// jobNames names the jobs with indices is.
func jobNames(sp *sweepPlan, is []int) string {
	var names []string
	for _, i := range is {
		names = append(names, fmt.Sprintf("%q", sp.l.jobs[i].spec.Name))
	}
	return strings.Join(names, ", ")
}

// skippedWords says which jobs were skipped, "" for none.
func skippedWords(sp *sweepPlan, is []int) string {
	if len(is) == 0 {
		return ""
	}
	return "; skipped, waiting for a job that failed: " + jobNames(sp, is)
}

// jobRunner runs a sweep's jobs, each as a `graphpipe run` process.
type jobRunner struct {
	f   *sweepFlags
	sp  *sweepPlan
	exe string
	id  string // the sweep's run ID, which each job's extends
}

// prepare makes each job's output directory and, for a job with a seed of
// its own, writes its model there (a plan names its model by hash, seed
// included).
func (jr *jobRunner) prepare() error {
	for _, j := range jr.sp.l.jobs {
		dir := filepath.Join(jr.f.out, j.spec.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return inputf("--out %s: %v", dir, cause(err))
		}
		if j.reseeded {
			if err := writeFile("--out", filepath.Join(dir, "model.json"), dag.Write(j.g.Model())); err != nil {
				return err
			}
		}
	}
	return nil
}

// run runs job sl.Job on its slot: its plan for that many devices written
// to DIR/NAME/plan.json, then `graphpipe run` of it, its log to
// DIR/NAME/run.log, its run --json to DIR/NAME/run.json.
func (jr *jobRunner) run(ctx context.Context, sl sweep.Slot) error {
	j := jr.sp.l.jobs[sl.Job]
	dir := filepath.Join(jr.f.out, j.spec.Name)
	planPath := filepath.Join(dir, "plan.json")
	if err := writeFile("--out", planPath, jr.sp.plans[sl.Job][sl.Devices].Encode()); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "run.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	var stdout bytes.Buffer
	c := exec.CommandContext(ctx, jr.exe, jr.args(j, sl, planPath, dir)...)
	c.Stdout, c.Stderr, c.Env = &stdout, logf, jr.env()
	// a sweep stopped stops its jobs as a workload manager would: they
	// checkpoint and exit
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	c.WaitDelay = time.Minute
	if err := c.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, lastLine(logPath))
	}
	return writeFile("--out", filepath.Join(dir, "run.json"), stdout.Bytes())
}

// args are job j's `graphpipe run` arguments on slot sl.
func (jr *jobRunner) args(j *sweepJob, sl sweep.Slot, planPath, dir string) []string {
	f := jr.f
	model := j.modelPath
	if j.reseeded {
		model = filepath.Join(dir, "model.json")
	}
	run := strings.NewReplacer(".", "_").Replace(j.spec.Name)
	a := []string{"run", planPath, "--model", model, "--steps", strconv.Itoa(j.spec.Steps), "--dump", dir, "--json", "--run", jr.id + "-" + run}
	a = append(a, trainArgs(j)...)
	if j.dataPath != "" {
		a = append(a, "--data", j.dataPath)
	}
	a = append(a, "--workers", f.workers.String(), "--join-timeout", f.joinTimeout.String())
	if f.workers.local() {
		// a pool's agents compute where they were started to
		a = append(a, "--backend", f.backend)
		if f.backend != "cpu" {
			a = append(a, "--gpus", joinInts(sl.DeviceIDs()))
		}
	}
	if f.nats.url != "" { // --nats, or task 0's server
		a = append(a, "--nats="+f.nats.url)
	}
	for _, name := range []string{"nats-creds", "nats-ca", "nats-in-order", "restarts", "elastic", "replace-wait", "heartbeat-timeout"} {
		if fl := f.search.cmd.Flags().Lookup(name); fl != nil && fl.Changed {
			a = append(a, "--"+name+"="+fl.Value.String())
		}
	}
	if f.elastic.restarts > 0 {
		a = append(a, "--checkpoint", filepath.Join(dir, "checkpoints"))
		if f.checkpointEvery > 0 {
			a = append(a, "--checkpoint-every", strconv.Itoa(f.checkpointEvery))
		}
	}
	return a
}

// trainArgs are run's optimizer flags for job j's training options.
func trainArgs(j *sweepJob) []string {
	o := j.train
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	a := []string{"--optimizer", o.Optimizer, "--lr", num(o.LR), "--weight-decay", num(o.WeightDecay), "--lr-schedule", o.Schedule}
	if o.Momentum != 0 {
		a = append(a, "--momentum", strconv.FormatFloat(float64(o.Momentum), 'g', -1, 32))
	}
	if o.Nesterov {
		a = append(a, "--nesterov")
	}
	if o.WarmupSteps > 0 {
		a = append(a, "--warmup-steps", strconv.Itoa(o.WarmupSteps))
	}
	if o.ClipGradNorm > 0 {
		a = append(a, "--clip-grad-norm", num(o.ClipGradNorm))
	}
	return a
}

// env is a job's environment: this process's, and --nats-token's token
// where it was given (in the environment, not on a command line ps shows).
// Local CPU workers each take a device's share of this host's cores (unless
// the user set GOMAXPROCS), as the profile's core slowdown measured k
// workers: one job's workers would otherwise take the cores of the
// devices other jobs hold.
func (jr *jobRunner) env() []string {
	env := os.Environ()
	if t := jr.f.nats.token; t != "" {
		env = append(env, tokenEnv+"="+t)
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); !set && jr.f.backend == "cpu" && jr.f.workers.local() {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", max(1, goruntime.NumCPU()/jr.sp.perNode)))
	}
	return env
}

// lastLine is the last line of a job's log that says something, to say
// why it failed.
func lastLine(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// joinInts writes ints as "0,1,2".
func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

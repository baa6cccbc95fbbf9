package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

func newRunCmd(stdin io.Reader) *cobra.Command {
	f := &runFlags{search: searchFlags{stdin: stdin}, stdin: stdin}
	cmd := &cobra.Command{
		Use:   "run MODEL|PLAN",
		Short: "Train a model as a pipeline of stage workers exchanging tensors over NATS",
		Long: `Train with stage workers. Given a model, plan it first (the search flags
apply); given a plan (graphpipe/plan@1), --model names the model it was made
for, which must match its hash. Without --device, a model is planned for the
devices the workers are (cpu, or the GPU's profile with --backend cuda); the
plan is printed before training. By default an embedded NATS server is
started on 127.0.0.1 with a random token and one worker process per device of
the plan (a stage on several devices runs as replicas); --nats uses an
external server or cluster, and --workers external waits for as many workers
started elsewhere with 'graphpipe worker --nats URL --run ID' (the command is
printed); --workers pool:NAME takes them from the agents of a pool
('graphpipe worker --nats URL --pool NAME'), each plan node's on one host, and
gives them back at the end. --nats-listen ADDR:PORT lets workers on other
hosts reach the embedded server (with a token, or TLS). With --restarts, a
lost, hung or silent worker (--heartbeat-timeout) is replaced and the run
resumes from its last checkpoint; on a pool, with --elastic, when no spare
agent comes within --replace-wait the run re-plans for the agents left, and
grows back at a checkpoint when agents return (each re-plan is logged, and
listed in --json's replans).`,
		Example: "  graphpipe run mmt-small.json --devices 3 --device cpu --steps 20\n  graphpipe run plan.json --model mmt.json --nats nats://10.0.0.5:4222 --workers external",
		Args:    args("MODEL|PLAN"),
		RunE:    func(cmd *cobra.Command, a []string) error { return f.run(cmd, a[0]) },
	}
	f.register(cmd)
	return cmd
}

// runFlags are graphpipe run's flags. Each sets a part of the run's
// supervise.Job (job), which Job.Validate checks once, or of how it runs:
// the launcher, the progress lines, the NATS server.
type runFlags struct {
	search    searchFlags
	nats      natsFlags
	device    deviceFlags
	nonFinite nonFiniteFlags
	data      dataFlags
	optim     optimFlags
	sb        sbFlags
	elastic   elasticFlags
	stdin     io.Reader

	steps, checkpointEvery, logEvery int
	seed                             int64
	joinTimeout                      time.Duration
	model, runID, emulate            string
	dump, trace, timeline, profile   string
	checkpoint, resume, init         string
	metrics                          string
	preemptName, workersArg          string
	json                             bool

	preempt os.Signal          // --preempt-signal's
	workers workersFlag        // --workers's
	tasks   *supervise.TaskEnv // the environment that started this task (--workers tasks), nil for none
	met     bool               // task 0 wrote the rendezvous file
	digest  string             // with tasks: what this launch trains (launchDigest)
}

func (f *runFlags) register(cmd *cobra.Command) {
	f.search.register(cmd)
	f.nats.register(cmd)
	f.nats.registerListen(cmd)
	f.device.registerRun(cmd)
	f.nonFinite.register(cmd)
	f.data.register(cmd)
	fl := cmd.Flags()
	fl.IntVar(&f.steps, "steps", 10, "training iterations")
	f.optim.register(cmd)
	f.sb.register(cmd)
	f.sb.registerPlanning(cmd)
	fl.StringVar(&f.workersArg, "workers", "local", "local: start one worker process per stage; external: wait for workers to join; pool:NAME: take agents of that pool (graphpipe worker --pool NAME); tasks: every task srun, torchrun or a Kubernetes Indexed Job started runs this command, task 0 coordinating (the default in such a task)")
	fl.StringVar(&f.preemptName, "preempt-signal", "USR1", "the `SIGNAL` a workload manager warns with before it ends the job (Slurm's --signal=B:USR1@120): the run checkpoints at the step reached and exits 128 + it, as on SIGTERM and SIGINT")
	fl.StringVar(&f.model, "model", "", "with a PLAN: the model `FILE` it was made for")
	fl.StringVar(&f.dump, "dump", "", "write init, data, final parameters and losses to `DIR`, as graphpipe train --dump")
	fl.StringVar(&f.runID, "run", "", "run ID (default: random); scopes every subject of the run")
	fl.Int64Var(&f.seed, "seed", 0, "with a MODEL: override its seed (parameters and data) before planning")
	fl.StringVar(&f.emulate, "emulate", "", "emulate the plan's devices (v100, a100, h100: the --device it was searched for): each op waits its modelled time, each transfer its modelled time")
	fl.StringVar(&f.trace, "trace", "", "write the measured timeline of the last iteration as Chrome trace JSON to `FILE`")
	fl.StringVar(&f.timeline, "timeline", "", "draw the measured timeline of the last iteration in `FILE` (.svg or .png)")
	fl.StringVar(&f.checkpoint, "checkpoint", "", "write checkpoints (parameters and optimizer state by name) to `DIR`, keeping the last two")
	fl.IntVar(&f.checkpointEvery, "checkpoint-every", 0, "checkpoint after every K iterations (default: a tenth of --steps)")
	fl.StringVar(&f.init, "init", "", "start from the parameters and buffers in safetensors `FILE` (by name, e.g. graphpipe import --weights)")
	fl.StringVar(&f.resume, "resume", "", "resume from the newest whole checkpoint in `DIR` (any plan: parameters are keyed by name); auto: from --checkpoint's newest when it has one, else start fresh (a requeued job)")
	f.elastic.register(cmd)
	fl.DurationVar(&f.joinTimeout, "join-timeout", 10*time.Minute, "give up when not every worker has joined within this long (0: wait for ever)")
	fl.StringVar(&f.profile, "profile", "", "write each op's time, per stage and pass, as a pprof profile to `FILE` (go tool pprof FILE)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object")
	fl.IntVar(&f.logEvery, "log-every", 0, "without a terminal, print a progress line every N steps, besides the first and the last (default: about ten lines a run)")
	fl.StringVar(&f.metrics, "metrics", "", "append one JSON line per logged step to `FILE` (step, loss, samples/s, ETA; graphpipe/metrics@1), for plots and dashboards")
}

// runSetup is a run ready to start: its job, validated, and what runs it.
type runSetup struct {
	job    *supervise.Job
	data   *runData
	replan *supervise.Elastic
	wargs  func(int) []string // the local workers' extra arguments
	prog   *progress
	// source and why say where the plan came from, for describePlan.
	source, why string
}

// planned is what a run trains: the model and plan named on the command
// line (arg), the training options the plan was made for, and why --device
// is what it is when the user gave none.
type planned struct {
	arg   string
	train stage.TrainOptions
	g     *dag.Graph
	p     *plan.Plan
	why   string
}

// run builds the job, validates it once, and runs it under a supervisor;
// a task an environment started other than task 0 joins task 0's run.
func (f *runFlags) run(cmd *cobra.Command, arg string) error {
	var err error
	if f.preempt, err = parsePreempt(f.preemptName); err != nil {
		return err
	}
	if f.workers, err = parseWorkers(f.workersArg); err != nil {
		return err
	}
	if err := f.detectTasks(cmd); err != nil {
		return err
	}
	if f.tasks != nil {
		f.digest = f.launchDigest(cmd, arg)
	}
	if f.tasks != nil && f.tasks.Rank != 0 {
		return f.serveTask(cmd)
	}
	if err := f.probeListen(); err != nil {
		return err
	}
	if err := f.clearRendezvous(); err != nil {
		return err
	}
	s, err := f.setup(cmd, arg)
	var nl *nothingLeftError
	if errors.As(err, &nl) {
		return f.nothingLeft(cmd, nl)
	}
	if err != nil {
		f.taskZeroFailed(err)
		return err
	}
	defer s.data.close()
	if err := f.start(cmd, s); err != nil {
		f.taskZeroFailed(err)
		return err
	}
	return nil
}

// setup reads what the flags name (the model and plan, the data, a
// checkpoint to resume, initial values) into the job, and checks what only
// the flags can say is wrong; the job's own settings are Job.Validate's to
// check, whose *runtime.JobError becomes the usage error naming the flag.
// Nothing is written yet.
func (f *runFlags) setup(cmd *cobra.Command, arg string) (*runSetup, error) {
	pl, err := f.plan(cmd, arg)
	if err != nil {
		return nil, err
	}
	if f.emulate != "" && (f.data.path != "" || f.data.evalPath != "") {
		return nil, usagef("--data, --eval-data: an emulated run reads no data")
	}
	d, err := f.data.open(cmd, pl.g, int(pl.p.BatchSize), &f.steps, cmd.ErrOrStderr())
	if err != nil {
		return nil, err
	}
	s, err := f.setupWith(cmd, pl, d)
	if err != nil {
		d.close()
		return nil, err
	}
	return s, nil
}

// setupWith is setup once the data is open.
func (f *runFlags) setupWith(cmd *cobra.Command, pl *planned, d *runData) (*runSetup, error) {
	if err := f.checkWiring(d, pl.p); err != nil {
		return nil, err
	}
	if err := checkTwoBWRun(pl.p, f.device.backend, f.emulate != ""); err != nil {
		return nil, err
	}
	var err error
	if pl.train.Selective, err = f.sb.settings(cmd, pl.g, d.stepsPerEpoch()); err != nil {
		return nil, err
	}
	job, err := f.job(cmd, pl, d)
	if err != nil {
		return nil, err
	}
	if err := f.checkOutputs(); err != nil {
		return nil, err
	}
	s := &runSetup{job: job, data: d, source: "searched for this run", why: pl.why}
	if f.model != "" {
		s.source, s.why = "from "+pl.arg, ""
	}
	if err := f.elastic.check(cmd, f.workers); err != nil {
		return nil, err
	}
	if s.replan, err = f.elastic.replanner(pl.g, pl.p, &f.search, f.model == ""); err != nil {
		return nil, err
	}
	if f.tasks != nil {
		if err := supervise.CheckPlanOnTasks(pl.p, f.tasks); err != nil {
			return nil, inputf("%v", err)
		}
		s.wargs, err = f.taskWorkerArgs(job.Options.Emulate)
	} else {
		s.wargs, err = f.device.workerArgs(f.workers, job.Options.Emulate, pl.p, cmd.ErrOrStderr())
	}
	if err != nil {
		return nil, err
	}
	if err := f.checkHostMemory(job); err != nil {
		return nil, err
	}
	if f.logEvery < 0 {
		return nil, usagef("--log-every: must be at least 1 (0: about ten lines a run), got %d", f.logEvery)
	}
	if err := job.Validate(); err != nil {
		return nil, jobError(err)
	}
	s.prog = f.progress(cmd, job)
	return s, nil
}

// plan is the model and the plan the run trains.
func (f *runFlags) plan(cmd *cobra.Command, arg string) (*planned, error) {
	pl := &planned{arg: arg}
	var reseed *int64
	if cmd.Flags().Changed("seed") {
		reseed = &f.seed
	}
	if f.tasks != nil {
		if err := f.forTasks(cmd); err != nil {
			return nil, err
		}
	}
	if !cmd.Flags().Changed("device") {
		var err error
		if f.search.device, pl.why, err = f.device.defaultDevice(f.workers, f.emulate); err != nil {
			return nil, err
		}
	}
	var err error
	if pl.train, err = f.optim.options(cmd, f.steps); err != nil {
		return nil, err
	}
	f.search.planFor(pl.train)  // memory for this optimizer's state
	f.search.noStreaming = true // the runtime does not stream weights
	f.search.precision, f.search.attention = f.device.precision, f.device.attention
	if err := f.sb.check(cmd, f.device.backend); err != nil {
		return nil, err
	}
	f.search.backpropFraction = f.sb.fraction(cmd)
	if f.search.schedule == search.AutoAsync { // an explicit 2bw is setupWith's to refuse
		f.search.flushOnly = twoVersionsWhy(f.device.backend, f.emulate != "")
	}
	f.shareGPUs(cmd)
	if pl.g, pl.p, err = modelAndPlan(cmd, arg, f.model, &f.search, reseed, f.stdin); err != nil {
		return nil, err
	}
	if err := f.trainIn(cmd, pl.p); err != nil {
		return nil, err
	}
	if err := f.sb.reconcile(cmd, pl.p, f.model); err != nil {
		return nil, err
	}
	return pl, nil
}

// trainIn makes the run train in the precision and attention its plan was
// priced in: a plan given in another than --precision or --attention
// names is refused.
func (f *runFlags) trainIn(cmd *cobra.Command, p *plan.Plan) error {
	for _, c := range []struct {
		flag, want string
		got        *string
	}{{"precision", p.PrecisionName(), &f.device.precision}, {"attention", p.AttentionName(), &f.device.attention}} {
		got := *c.got
		if got == "" {
			got = map[string]string{"precision": "fp32", "attention": plan.Unfused}[c.flag]
		}
		if got == c.want {
			continue
		}
		if cmd.Flags().Changed(c.flag) {
			return usagef("--%s %s: the plan %s is priced in %s; leave out --%s to train in it, or search again with --%s %s", c.flag, got, f.model, c.want, c.flag, c.flag, got)
		}
		*c.got = c.want
	}
	return nil
}

// shareGPUs prices a run searched here whose local CUDA workers outnumber
// its GPUs as it will run: each GPU time-sliced among the workers on it
// (plan.Device.TimeSliced), and a GPU's workers one node of the plan
// (--devices-per-node, unless given), whose devices the workers then map
// onto the GPUs (deviceFlags.perGPU).
func (f *runFlags) shareGPUs(cmd *cobra.Command) {
	if f.model != "" || f.search.cluster != "" {
		return // a plan given, or a cluster's nodes: priced as they say
	}
	k := f.device.workersPerGPU(f.workers, f.emulate != "", f.search.devices)
	if k <= 1 {
		return
	}
	f.search.timeSliced = true
	if !cmd.Flags().Changed("devices-per-node") {
		f.search.perNode = k
	}
	f.device.perGPU = f.search.perNode
}

// checkWiring checks the flags of where the workers are and how they are
// reached, and the evaluation set against the plan's micro-batches.
func (f *runFlags) checkWiring(d *runData, p *plan.Plan) error {
	if err := d.checkEvalKeys(p); err != nil {
		return err
	}
	if err := f.workers.checkNATS(f.nats.url); err != nil {
		return err
	}
	if err := f.nats.check(); err != nil {
		return err
	}
	return f.nats.checkListen(f.workers)
}

// job is the run the flags describe: the options every worker is sent,
// this coordinator's config, the supervisor's restarts and outputs.
func (f *runFlags) job(cmd *cobra.Command, pl *planned, d *runData) (*supervise.Job, error) {
	train := pl.train
	train.Steps, train.MicroBatch = f.steps, int(pl.p.MicroBatch) // --epochs may have set the steps
	j := &supervise.Job{Job: runtime.Job{Run: f.runID, Graph: pl.g, Plan: pl.p, Steps: f.steps,
		Options: runtime.Options{Train: train, Data: d.optionsSpec(), OnNonFinite: f.nonFinite.policy, NoIPC: f.device.noIPC}}}
	if j.Run == "" {
		j.Run = randomID()
	}
	j.Local = supervise.Local{Restarts: f.elastic.restarts,
		Outputs: supervise.Outputs{Dump: f.dump, Trace: f.trace, Timeline: f.timeline, Profile: f.profile, DumpData: d.source()}}
	if err := f.nonFinite.checkMaxSkips(); err != nil {
		return nil, err
	}
	if err := f.options(pl, &j.Job); err != nil {
		return nil, err
	}
	if err := f.config(cmd, &j.Job); err != nil {
		return nil, err
	}
	if err := f.capSteps(cmd, &j.Job); err != nil {
		return nil, err
	}
	if f.init != "" && j.Config.Resume == nil { // --resume auto found none
		vals, err := readInit(f.init, pl.g, f.stdin)
		if err != nil {
			return nil, err
		}
		j.Config.Resume, j.Options.Init = initCheckpoint(pl.g, vals), true
	}
	return j, nil
}

// options sets what --emulate and --checkpoint-every say every worker is
// to do; a model that cannot be computed can only be emulated.
func (f *runFlags) options(pl *planned, j *runtime.Job) error {
	if f.emulate != "" {
		if pl.p.Device.Name != f.emulate {
			return usagef("--emulate %s: the plan is for %s devices (search with --device %s)", f.emulate, pl.p.Device.Name, f.emulate)
		}
		j.Options.Emulate = true
	} else if err := computable(pl.g, cmp.Or(f.model, pl.arg)); err != nil {
		return err
	}
	j.Options.CheckpointEvery = f.checkpointEvery
	if f.checkpoint != "" && f.checkpointEvery == 0 {
		j.Options.CheckpointEvery = max(1, f.steps/10)
	}
	return nil
}

// config is this coordinator's part of the job: checkpoints, the join
// timeout, skips, the heartbeat timeout its workers are given, and the
// checkpoint --resume names.
func (f *runFlags) config(cmd *cobra.Command, j *runtime.Job) error {
	j.Config = runtime.Config{CheckpointDir: f.checkpoint, JoinTimeout: f.joinTimeout, MaxSkips: f.nonFinite.maxSkips,
		Timings: runtime.Timings{HeartbeatTimeout: f.elastic.heartbeat}}
	if f.init != "" && f.resume != "" && f.resume != "auto" {
		return usagef("--init and --resume: a resumed run takes its parameters from the checkpoint")
	}
	if f.resume == "" {
		return nil
	}
	if f.resume == "auto" {
		return f.resumeAuto(cmd, j)
	}
	c, err := f.loadResume(cmd, f.resume, j)
	if err != nil {
		return err
	}
	if at := c.Manifest.Step; at >= j.Steps {
		return usagef("--resume %s: the checkpoint is at step %d, and --steps is %d: nothing is left to train; give --steps beyond %d to train on", f.resume, at, j.Steps, at)
	}
	j.Config.Resume = c
	return nil
}

// nothingLeftError is --resume auto finding a checkpoint at --steps: a
// requeued job that had finished before it was requeued. It is no
// failure: the command says so and exits 0 (nothingLeft).
type nothingLeftError struct {
	dir         string
	step, steps int
}

func (e *nothingLeftError) Error() string {
	return fmt.Sprintf("--resume auto: the checkpoint in %s is at step %d, --steps %d: nothing left to do", e.dir, e.step, e.steps)
}

// nothingLeft ends a run that has nothing left to train: said, and, where
// this is task 0, said to the other tasks (through the rendezvous file),
// which leave too; exit 0.
func (f *runFlags) nothingLeft(cmd *cobra.Command, nl *nothingLeftError) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: %v\n", nl)
	f.taskZeroDone(nl.Error())
	return nil
}

// resumeAuto is --resume auto: the newest whole checkpoint of
// --checkpoint's directory when it holds one, else a fresh start (from
// --init's values, if given), said either way.
func (f *runFlags) resumeAuto(cmd *cobra.Command, j *runtime.Job) error {
	dir := f.checkpoint
	if dir == "" {
		return usagef("--resume auto: needs --checkpoint DIR, where it looks for the newest checkpoint")
	}
	fresh := func() error {
		fmt.Fprintf(cmd.ErrOrStderr(), "--resume auto: no checkpoint in %s yet: starting at step 0\n", dir)
		return nil
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fresh()
	}
	c, err := f.loadResume(cmd, dir, j)
	var ne *runtime.NoCheckpointError
	if errors.As(err, &ne) {
		return fresh()
	}
	if err != nil {
		return err
	}
	switch at := c.Manifest.Step; {
	case at == j.Steps:
		return &nothingLeftError{dir: dir, step: at, steps: j.Steps}
	case at > j.Steps:
		return usagef("--resume auto: the checkpoint in %s is at step %d, past --steps %d: give --steps beyond %d to train on", dir, at, j.Steps, at)
	}
	j.Config.Resume = c // the checkpoint's values, not --init's
	return nil
}

// resumeDir is the directory the run resumes from: --resume's, or
// --checkpoint's with --resume auto.
func (f *runFlags) resumeDir() string {
	if f.resume == "auto" {
		return f.checkpoint
	}
	return f.resume
}

// loadResume reads dir's newest whole checkpoint (--resume's), and refuses
// one made for another model or another optimizer.
func (f *runFlags) loadResume(cmd *cobra.Command, dir string, j *runtime.Job) (*runtime.Checkpoint, error) {
	skipped := func(step int, why error) {
		fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: checkpoint at step %d in %s is not whole (%v): falling back to the one before\n", step, dir, why)
	}
	var c *runtime.Checkpoint
	var err error
	if f.resume == "auto" {
		c, err = runtime.LoadCheckpoint(dir, skipped) // one that holds none is no error: a fresh start
	} else {
		c, err = loadCheckpoint("--resume", dir, skipped)
	}
	if err != nil {
		return nil, err // exit 1: no whole checkpoint
	}
	if h := dag.ModelHash(j.Graph); c.Manifest.ModelHash != h {
		return nil, inputf("--resume %s: checkpoint step-%d was made for model %q (hash %.12s), not for this %q (hash %.12s)", dir, c.Manifest.Step, c.Manifest.Model, c.Manifest.ModelHash, j.Graph.Name(), h)
	}
	if err := c.CheckOptimizer(dir, j.Options.Train.Optimizer); err != nil {
		return nil, inputf("%v", err)
	}
	return c, nil
}

// capSteps shortens the run as GRAPHPIPE_MAX_STEPS says (maxsteps.go).
func (f *runFlags) capSteps(cmd *cobra.Command, j *runtime.Job) error {
	capped, err := capSteps(cmd.ErrOrStderr(), j.Steps, j.From())
	if err != nil {
		return err
	}
	if capped < j.Steps {
		j.Steps, j.Options.CheckpointEvery = capped, capCheckpoints(j.Options.CheckpointEvery, capped, j.From())
	}
	return nil
}

// checkOutputs refuses, before anything trains, an output file that cannot
// be written or drawn.
func (f *runFlags) checkOutputs() error {
	if err := checkOutputs("--trace", f.trace, "--profile", f.profile, "--metrics", f.metrics, "--timeline", f.timeline); err != nil {
		return err
	}
	if f.timeline != "" {
		if _, err := chart.FormatOf(f.timeline); err != nil {
			return usagef("--timeline %v", err)
		}
	}
	return nil
}

// checkHostMemory refuses local CPU workers whose plan this host's memory
// cannot hold.
func (f *runFlags) checkHostMemory(j *supervise.Job) error {
	if !f.workers.local() || j.Options.Emulate || f.device.backend == "cuda" {
		return nil
	}
	p := j.Plan
	what := fmt.Sprintf("the plan's local workers (%s devices, %d samples per iteration; the peak memory the plan predicts per device, summed)", p.Device.Name, p.BatchSize)
	need, flag := profile.PlanNeed(p), "--batch"
	// a plan edited by hand may predict less than its batch takes: the
	// model trained at the plan's batch in one process is a floor on what
	// its workers hold together (every parameter, its gradient and state
	// once, the batch, a micro-batch's activations)
	if floor := profile.TrainNeed(j.Graph, int(p.BatchSize), int(p.MicroBatch), float64(stateBytes(j.Options.Train))); floor > need {
		need, flag = floor, "batch_size"
		what = fmt.Sprintf("the plan's local workers (%d samples per iteration, micro-batch %d: the model trained at that batch, more than the peak memory the plan predicts)", p.BatchSize, p.MicroBatch)
	}
	return checkHost(flag, what, profile.EstimateSlack*need)
}

// progress is the run's progress lines (and --metrics's).
func (f *runFlags) progress(cmd *cobra.Command, j *supervise.Job) *progress {
	log := cmd.ErrOrStderr()
	return &progress{log: log, bar: isTerminal(log) && !f.json, quiet: f.json, every: logEvery(f.logEvery, j.Steps),
		steps: j.Steps, batch: j.Plan.BatchSize, emulated: j.Options.Emulate, lr: j.Options.Train.Rate}
}

// start takes the checkpoint directory, says what it trains, and runs the
// job with --workers's launcher under a supervisor; it prints the summary.
func (f *runFlags) start(cmd *cobra.Command, s *runSetup) error {
	job, log := s.job, cmd.ErrOrStderr()
	if dir := job.Config.CheckpointDir; dir != "" {
		if err := checkCheckpointOut(dir); err != nil {
			return err
		}
		lock, err := lockCheckpoints(dir, job.Run)
		if err != nil {
			return err
		}
		defer lock.Unlock()
	}
	if c := job.Config.Resume; c != nil && !job.Options.Init {
		fmt.Fprintf(log, "resuming at step %d from %s\n", c.Manifest.Step, f.resumeDir())
	}
	describePlan(log, job.Plan, s.source, s.why)
	if f.metrics != "" {
		m, err := openMetrics(f.metrics, f.resume != "")
		if err != nil {
			return err
		}
		defer m.Close()
		s.prog.metrics = m
	}
	return f.supervise(cmd, s)
}

// supervise runs the job with --workers's launcher under a supervisor,
// and prints its summary.
func (f *runFlags) supervise(cmd *cobra.Command, s *runSetup) error {
	job, log := s.job, cmd.ErrOrStderr()
	ctx, sig := watchSignals(cmd.Context(), log, f.preempt, f.tasks != nil)
	defer sig.done()
	job.Config.Stop, job.Config.Skipped, job.Config.OnEval = sig.stop, s.prog.skipped, s.prog.eval
	if job.Options.Train.Selective != nil {
		job.Config.OnBackprop = s.prog.backprop
	}
	t, bulk, ns, stop, err := connect(&f.nats, job.Run, log)
	if err != nil {
		return f.tasksListenError(err)
	}
	defer stop()
	job.Config.Bulk = bulk
	if f.workers.local() {
		ns.announce(log, f.workers, runtime.Workers(job.Plan), job.Run)
	}
	var l supervise.Launcher
	if f.tasks != nil {
		var remove func()
		if l, remove, err = f.taskLauncher(t, ns, job, s.wargs, log); err != nil {
			return err
		}
		defer remove()
	} else if l, err = launcher(f.workers, t, ns, job.Config, s.wargs, log); err != nil {
		return err
	}
	sup := &supervise.Supervisor{Job: job, T: t, Launcher: l, Log: log,
		Progress: s.prog.step, Starting: s.prog.start, Failed: s.prog.abort, Elastic: s.replan,
		Replanned: func(_, p *plan.Plan) { describePlan(log, p, "re-planned", "") }}
	res, secs, err := sup.Run(ctx)
	if err != nil {
		if e := f.tasksError(err); e != nil {
			return e
		}
		if e := jobError(err); e != nil {
			return e
		}
		return runExit(err, sig)
	}
	return printRun(cmd.OutOrStdout(), job, res, secs, f.workers, f.json)
}

package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/stage"
)

// sweepFormat is sweep --json's tag: a sweep's schedule (and, with --run,
// how it ran). (Beside the others in formats.go once this command settles.)
const sweepFormat = "graphpipe/sweep-schedule@1"

func newSweepCmd(stdin io.Reader) *cobra.Command {
	f := &sweepFlags{search: searchFlags{stdin: stdin}, stdin: stdin}
	cmd := &cobra.Command{
		Use:   "sweep SWEEP",
		Short: "Plan (and train) many models on one cluster: each job's devices and start",
		Long: `Plan a sweep of training jobs (a graphpipe/sweep@1 file) on one cluster, as
Saturn does: each job is searched on every device count worth trying (the
powers of two up to --devices, the multiples of a node that divide them),
its time there its steps times the plan's predicted iteration; then each job
gets a device count, a block of devices and a start, so that the last job
ends as early as the scheduler can find, never two jobs on a device and each
job after the jobs it waits for ("after"). Printed beside it: one job at a
time on the whole cluster (each on its best plan), and the cluster split
evenly among the jobs. --chart draws the schedule as a Gantt chart.

With --run, the sweep trains: each job as a 'graphpipe run' of its plan on
its devices (local workers, a pool's agents, or a workload manager's
tasks), started as soon as its devices free up; its outputs under --out
DIR/NAME/ (run --dump's files, run.json: its run --json, run.log: its log,
plan.json). When a job's measured time drifts from its prediction by more
than --drift, the jobs not started are planned again with the measured
ratio (Saturn's introspection).
With --restarts, a job whose worker or agent is lost resumes from its last
checkpoint (DIR/NAME/checkpoints); a job that fails skips the jobs that wait
for it, and the sweep exits 1 after the rest.

Run by every task of an allocation ('srun graphpipe sweep SWEEP --run --out
DIR', or torchrun's or a Kubernetes Indexed Job's tasks: --workers tasks,
the default in such a task), task 0 plans the sweep for one device per task,
as many on a node as the tasks on each, and runs it over the other tasks:
each serves as an agent of a pool named after the launch, on task 0's NATS
server (found through a rendezvous file in the working directory, as 'run'
does), and task 0 runs one of its own. When the sweep ends, the tasks exit
0, or 1 when it failed. A task lost mid-sweep is a lost agent: its job
restarts from its checkpoint (--restarts) once the agents left can take it.`,
		Example: "  graphpipe sweep sweep.json --devices 32 --device v100 --chart sweep.svg\n  graphpipe sweep sweep.json --devices 4 --device cpu --run --out runs --json\n  srun --ntasks 8 graphpipe sweep sweep.json --device h100 --backend cuda --run --out runs --restarts 2",
		Args:    args("SWEEP"),
		RunE:    func(cmd *cobra.Command, a []string) error { return f.run(cmd, a[0]) },
	}
	f.register(cmd)
	return cmd
}

// sweepFlags are graphpipe sweep's flags: the search's (the cluster, and
// defaults for what a job does not say), the output's, and --run's, whose
// launcher flags pass on to each job's run.
type sweepFlags struct {
	search  searchFlags
	nats    natsFlags
	elastic elasticFlags
	stdin   io.Reader

	// tasks is the environment that started this process as one of a
	// sweep's tasks (--workers tasks), nil for none; digest is a digest
	// of the sweep file, alike in every task of one launch (task 0 refuses
	// a task of another); met says task 0 has told the tasks where it is.
	tasks  *supervise.TaskEnv
	digest string
	met    bool

	asJSON, train    bool
	chart, out       string
	drift            float64
	workersArg       string
	backend          string
	checkpointEvery  int
	joinTimeout      time.Duration
	workers          workersFlag
	backendGiven     bool
	checkpointsGiven bool
}

func (f *sweepFlags) register(cmd *cobra.Command) {
	f.search.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	fl.StringVar(&f.chart, "chart", "", "draw the schedule as a Gantt chart in `FILE` (.svg or .png); with --run, beside the sweep as it ran")
	fl.BoolVar(&f.train, "run", false, "train the sweep: each job a 'graphpipe run' of its plan on its devices")
	fl.StringVar(&f.out, "out", "", "with --run: each job's outputs under `DIR`/NAME/")
	fl.Float64Var(&f.drift, "drift", 0.1, "with --run: re-plan the jobs not started when a job's measured time differs from its prediction by more than this ratio (0: never)")
	fl.StringVar(&f.workersArg, "workers", "local", "with --run: local (worker processes of this host), pool:NAME (the agents of a pool, with --nats), or tasks: every task srun, torchrun or a Kubernetes Indexed Job started runs this command, task 0 sweeping over the others (the default in such a task)")
	fl.StringVar(&f.backend, "backend", "cpu", "with --run: "+backendHelp+"; with cuda, each job's local workers take the GPUs of its device ids, and with tasks each task its own GPU")
	fl.IntVar(&f.checkpointEvery, "checkpoint-every", 0, "with --run and --restarts: each job checkpoints after every K iterations (default: a tenth of its steps)")
	fl.DurationVar(&f.joinTimeout, "join-timeout", 10*time.Minute, "with --run: a job gives up when not every worker has joined within this long")
	f.nats.register(cmd)
	f.elastic.register(cmd)
}

// run plans the sweep at path, prints it, and trains it with --run; a
// task an environment started other than task 0 serves task 0's sweep.
func (f *sweepFlags) run(cmd *cobra.Command, path string) error {
	if err := f.check(cmd); err != nil {
		return err
	}
	if f.tasks == nil {
		return f.planAndRun(cmd, path)
	}
	f.digest = digestFiles([]string{path}, "")
	if f.tasks.Rank != 0 {
		return f.serveTask(cmd)
	}
	if err := probeTaskListen(f.tasks, &f.nats); err != nil {
		return err
	}
	if err := clearTaskRendezvous(f.tasks); err != nil {
		return err
	}
	err := f.planAndRun(cmd, path)
	if err != nil && !f.met {
		tellTasksFailed(f.tasks, err)
	}
	return err
}

// planAndRun plans the sweep at path, prints it, and trains it with --run.
func (f *sweepFlags) planAndRun(cmd *cobra.Command, path string) error {
	sw, err := f.load(path)
	if err != nil {
		return err
	}
	sp, err := f.plan(sw)
	if err != nil {
		return err
	}
	if !f.train {
		if err := f.drawChart(cmd, sp, nil); err != nil {
			return err
		}
		return f.print(cmd, sp, nil)
	}
	return f.runSweep(cmd, sp)
}

// check refuses flags that do not go together, before any work.
func (f *sweepFlags) check(cmd *cobra.Command) error {
	fl := cmd.Flags()
	if fl.Changed("op-times") {
		return usagef("--op-times: op times are one model's: give each job its own (\"op_times\" in the sweep file)")
	}
	if err := checkOutputs("--chart", f.chart); err != nil {
		return err
	}
	if f.chart != "" {
		if _, err := chartFormat(f.chart); err != nil {
			return err
		}
	}
	if !(f.drift >= 0) || f.drift > 1e6 {
		return usagef("--drift: must be a ratio of at least 0, got %g", f.drift)
	}
	if !f.train {
		for _, name := range runOnlyFlags {
			if fl.Changed(name) {
				return usagef("--%s: only with --run", name)
			}
		}
		return nil
	}
	return f.checkRun(cmd)
}

// runOnlyFlags are sweep's flags that only --run reads.
var runOnlyFlags = []string{"out", "drift", "workers", "backend", "checkpoint-every", "join-timeout", "nats", "nats-token", "nats-creds", "nats-ca", "nats-in-order", "restarts", "elastic", "replace-wait", "heartbeat-timeout"}

// checkRun checks --run's flags: where the outputs go, which workers.
func (f *sweepFlags) checkRun(cmd *cobra.Command) error {
	var err error
	if f.out == "" {
		return usagef("--run: needs --out DIR, where each job's outputs go")
	}
	if f.workers, err = parseWorkers(f.workersArg); err != nil {
		return err
	}
	if f.workers.external() {
		return usagef("--workers %s: a sweep starts each job's workers itself: use local or pool:NAME, or tasks in a task environment", f.workers)
	}
	if f.tasks, err = detectTaskEnv(cmd, f.workers, f.backend); err != nil {
		return err
	}
	if f.tasks != nil {
		f.workers = workersFlag{kind: taskWorkers}
		if err := f.forTasks(cmd); err != nil {
			return err
		}
	}
	if err := f.workers.checkNATS(f.nats.url); err != nil {
		return err
	}
	if err := f.nats.check(); err != nil {
		return err
	}
	if f.backend != "cpu" && f.backend != "cuda" && f.backend != "cuda-emulator" {
		return usagef("--backend: unknown backend %q (cpu, cuda or cuda-emulator)", f.backend)
	}
	if f.checkpointEvery < 0 {
		return usagef("--checkpoint-every: must be positive, got %d", f.checkpointEvery)
	}
	if cmd.Flags().Changed("checkpoint-every") && f.elastic.restarts == 0 {
		return usagef("--checkpoint-every: a sweep's jobs checkpoint to resume: give --restarts")
	}
	if err := f.elastic.check(cmd, f.jobWorkers()); err != nil {
		return err
	}
	if err := f.runDevice(cmd); err != nil {
		return err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return usagef("--out %s: %v", f.out, cause(err))
	}
	if err := probeWrite(f.out); err != nil {
		return usagef("--out %s: cannot write in it: %v", f.out, err)
	}
	return nil
}

// runDevice is --device for a sweep that trains and names none: local CPU
// workers (and the CUDA emulator's) are cpu devices, as run takes them; a
// GPU's profile must be named.
func (f *sweepFlags) runDevice(cmd *cobra.Command) error {
	if cmd.Flags().Changed("device") || f.search.cluster != "" {
		return nil
	}
	if f.backend == "cuda" {
		return usagef("--backend cuda: name the GPUs' profile with --device (v100, a100, h100, or a file from 'graphpipe profile --device cuda')")
	}
	f.search.device = "cpu"
	return nil
}

// sweepJob is a job of the sweep, loaded: its model, its training options.
type sweepJob struct {
	spec      plan.SweepJob
	modelPath string // as the sweep file names it, resolved
	dataPath  string // its dataset, resolved ("" for the synthetic data)
	opTimes   string // its op-times file, resolved
	g         *dag.Graph
	train     stage.TrainOptions
	reseeded  bool // the model's seed is the job's: its run needs the model written again
}

// loaded is a sweep file and its jobs.
type loaded struct {
	path string
	file *plan.Sweep
	jobs []*sweepJob
}

// load reads the sweep file and every job's model; every problem is exit
// 2 naming the file, the job and the field.
func (f *sweepFlags) load(path string) (*loaded, error) {
	data, name, err := readInput(path, f.stdin)
	if err != nil {
		return nil, err
	}
	sw, err := plan.DecodeSweep(data)
	if err != nil {
		return nil, inputf("%s: %v", name, err)
	}
	dir := filepath.Dir(path)
	if path == "-" {
		dir = "."
	}
	l := &loaded{path: name, file: sw}
	for _, spec := range sw.Jobs {
		j, err := loadJob(name, dir, spec, f.stdin)
		if err != nil {
			return nil, err
		}
		if f.train && j.dataPath != "" {
			if err := checkJobData(name, j, cmp.Or(j.spec.Batch, f.search.batch, j.g.BatchSize())); err != nil {
				return nil, err
			}
		}
		l.jobs = append(l.jobs, j)
	}
	return l, nil
}

// loadJob reads one job's model (reseeded as the job says) and checks its
// training options.
func loadJob(sweepPath, dir string, spec plan.SweepJob, stdin io.Reader) (*sweepJob, error) {
	bad := func(field string, err error) error {
		return inputf("%s: job %q: %s: %s", sweepPath, spec.Name, field, strings.TrimPrefix(err.Error(), "--"+field+": "))
	}
	j := &sweepJob{spec: spec, modelPath: beside(dir, spec.Model), dataPath: beside(dir, spec.Data), opTimes: beside(dir, spec.OpTimes)}
	if j.modelPath == "-" {
		return nil, inputf("%s: job %q: model: a sweep's models are files, not standard input", sweepPath, spec.Name)
	}
	g, err := loadModel(j.modelPath, stdin)
	if err != nil {
		return nil, bad("model", err)
	}
	if spec.Seed != nil {
		m := *g.Model()
		m.Seed, j.reseeded = *spec.Seed, true
		if g, err = rebuild(&m); err != nil {
			return nil, bad("seed", err)
		}
	}
	j.g = g
	if err := computable(g, j.modelPath); err != nil {
		return nil, bad("model", err)
	}
	if j.train, err = trainOptions(spec); err != nil {
		var oe *stage.OptionError
		if errors.As(err, &oe) {
			return nil, inputf("%s: job %q: %s: %s", sweepPath, spec.Name, sweepField(oe.Flag), oe.Msg)
		}
		return nil, bad("optimizer", err)
	}
	return j, nil
}

// checkJobData opens job j's dataset and holds it against its model and
// its batch, as its run will (runtime.OpenData, NewDataSource): a sweep
// that trains refuses a missing, unreadable or mismatched dataset, or one
// of fewer samples than a batch, before any job trains, not as that job
// starts (exit 1, after the jobs before it).
func checkJobData(sweepPath string, j *sweepJob, batch int64) error {
	what := fmt.Sprintf("%s: job %q: data", sweepPath, j.spec.Name)
	set, err := runtime.OpenData(j.dataPath, j.g, false)
	if err != nil {
		return dataInput(what, err)
	}
	defer set.Close()
	if _, err := runtime.NewDataSource(set, int(batch), j.g.Seed(), true); err != nil {
		return dataInput(what, err)
	}
	return nil
}

// beside is a path the sweep file names, relative to its directory unless
// absolute ("" stays "").
func beside(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// trainOptions are the job's training options, the optimizer's defaults
// where it says nothing, checked.
func trainOptions(spec plan.SweepJob) (stage.TrainOptions, error) {
	o := stage.TrainOptions{Optimizer: spec.Optimizer, LR: spec.LR, Momentum: float32(spec.Momentum), Nesterov: spec.Nesterov,
		Schedule: spec.LRSchedule, WarmupSteps: spec.WarmupSteps, Steps: spec.Steps, ClipGradNorm: spec.ClipGradNorm}
	if o.Optimizer == "" {
		o.Optimizer = "adam"
	}
	if o.Schedule == "" {
		o.Schedule = "constant"
	}
	s, err := stage.LookupOptimizer(o.Optimizer)
	if err != nil {
		return o, err
	}
	if o.LR == 0 {
		o.LR = s.LR
	}
	o.WeightDecay = s.WeightDecay
	if spec.WeightDecay != nil {
		o.WeightDecay = *spec.WeightDecay
	}
	return o, o.Check()
}

// sweepField is the sweep file's name of a training flag (weight-decay:
// weight_decay).
func sweepField(flag string) string {
	return strings.ReplaceAll(flag, "-", "_")
}

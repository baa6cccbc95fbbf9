package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// tokenEnv carries a NATS token to workers without showing it in ps.
const tokenEnv = "GRAPHPIPE_NATS_TOKEN"

type natsFlags struct {
	url, token, creds, ca string
	// run's embedded server (natsflags.go)
	listen, tlsCert, tlsKey string
	tokenGiven              func() bool
}

func (f *natsFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "nats", "", "NATS server or cluster URL(s), comma-separated")
	cmd.Flags().StringVar(&f.token, "nats-token", "", "NATS auth token (default: $"+tokenEnv+")")
	cmd.Flags().StringVar(&f.creds, "nats-creds", "", "NATS credentials `FILE` (JWT and NKey)")
	cmd.Flags().StringVar(&f.ca, "nats-ca", "", "trust this CA `FILE` for TLS to NATS")
}

// check refuses a --nats URL NATS cannot dial: a scheme other than nats,
// tls, ws or wss, or no host.
func (f *natsFlags) check() error {
	if f.url == "" {
		return nil
	}
	for _, u := range strings.Split(f.url, ",") {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			u = "nats://" + u // NATS reads host:port as that
		}
		p, err := url.Parse(u)
		switch {
		case err != nil:
			return usagef("--nats %s: %v", f.url, err)
		case p.Scheme != "nats" && p.Scheme != "tls" && p.Scheme != "ws" && p.Scheme != "wss":
			return usagef("--nats %s: scheme %q: want nats, tls, ws or wss", f.url, p.Scheme)
		case p.Hostname() == "":
			return usagef("--nats %s: no host", f.url)
		}
	}
	return nil
}

func (f *natsFlags) options(name string) runtime.NATSOptions {
	tok := f.token
	if tok == "" {
		tok = os.Getenv(tokenEnv)
	}
	return runtime.NATSOptions{URL: f.url, Token: tok, CredsFile: f.creds, CAFile: f.ca, Name: name}
}

// runSummary is `graphpipe run --json`'s object.
type runSummary struct {
	Format   string `json:"format"` // runFormat
	Model    string `json:"model"`
	Strategy string `json:"strategy"`
	Device   string `json:"device"` // the plan's device profile
	Stages   int    `json:"stages"`
	Steps    int    `json:"steps"`
	Batch    int64  `json:"batch_size"` // samples per iteration
	// FinalLoss and Losses: none for an emulated run, which computes none
	FinalLoss *jsonFloat `json:"final_loss,omitempty"`
	Losses    lossList   `json:"losses,omitempty"`
	Skipped   []int      `json:"skipped_steps"` // steps (from 1) whose update was skipped (--on-nonfinite skip)
	// LRs is each step's learning rate (the schedule's); GradNorms, with
	// --clip-grad-norm, each step's global gradient norm before clipping.
	LRs       []float64 `json:"lrs,omitempty"`
	GradNorms []float64 `json:"grad_norms,omitempty"`
	// SamplesPerS: over the whole run, worker start-up included;
	// MeasuredIterS: the median iteration, which compare uses
	SamplesPerS   float64  `json:"samples_per_s"`
	MeasuredIterS float64  `json:"measured_iteration_s"`
	PredictedIter float64  `json:"predicted_iteration_s"`
	Workers       string   `json:"workers"`
	Devices       []string `json:"devices,omitempty"` // where each worker computed
	Emulated      string   `json:"emulated,omitempty"`
	// StageTimes: each stage's compute per micro-batch, planned and measured
	// in the last iteration.
	StageTimes []stageTime `json:"stage_times,omitempty"`
	// with --eval-data: the last evaluation, and every one
	EvalLoss     *float64   `json:"eval_loss,omitempty"`
	EvalAccuracy *float64   `json:"eval_accuracy,omitempty"`
	Evals        []evalJSON `json:"evals,omitempty"`
}

func newRunCmd(stdin io.Reader) *cobra.Command {
	sf := searchFlags{stdin: stdin}
	var nf natsFlags
	var df deviceFlags
	var nff nonFiniteFlags
	var data dataFlags
	var steps int
	var of optimFlags
	var workers, modelPath, dump, runID, emulate, trace, prof, ckptDir, resume, initPath, timeline string
	var ckptEvery, restarts, logEveryN int
	var metricsPath string
	var initVals map[string]*stage.Value[float32]
	var joinTimeout time.Duration
	var seed int64
	var asJSON bool
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
printed). --nats-listen ADDR:PORT lets workers on other hosts reach the
embedded server (with a token, or TLS).`,
		Example: "  graphpipe run mmt-small.json --devices 3 --device cpu --steps 20\n  graphpipe run plan.json --model mmt.json --nats nats://10.0.0.5:4222 --workers external",
		Args:    args("MODEL|PLAN"),
		RunE: func(cmd *cobra.Command, a []string) error {
			var reseed *int64
			if cmd.Flags().Changed("seed") {
				reseed = &seed
			}
			var why string // why --device is what it is, when the user gave none
			if !cmd.Flags().Changed("device") {
				var err error
				if sf.device, why, err = df.defaultDevice(workers, emulate); err != nil {
					return err
				}
			}
			train, err := of.options(cmd, steps)
			if err != nil {
				return err
			}
			sf.planFor(train) // memory for this optimizer's state
			g, plan, err := modelAndPlan(cmd, a[0], modelPath, &sf, reseed, stdin)
			if err != nil {
				return err
			}
			if steps < 1 {
				return usagef("--steps: must be positive, got %d", steps)
			}
			if emulate != "" && (data.path != "" || data.evalPath != "") {
				return usagef("--data, --eval-data: an emulated run reads no data")
			}
			d, err := data.open(cmd, g, int(plan.BatchSize), &steps, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer d.close()
			if err := d.checkEvalKeys(plan); err != nil {
				return err
			}
			if workers != "local" && workers != "external" {
				return usagef(`--workers: must be "local" or "external", got %q`, workers)
			}
			if err := nf.check(); err != nil {
				return err
			}
			if err := nf.checkListen(workers); err != nil {
				return err
			}
			train.Steps, train.MicroBatch = steps, int(plan.MicroBatch) // --epochs may have set the steps
			o := runtime.Options{Train: train, Data: d.optionsSpec()}
			if err := nff.check(); err != nil {
				return err
			}
			o.OnNonFinite, o.MaxSkips = nff.policy, nff.maxSkips
			if emulate != "" {
				if plan.Device.Name != emulate {
					return usagef("--emulate %s: the plan is for %s devices (search with --device %s)", emulate, plan.Device.Name, emulate)
				}
				if dump != "" {
					return usagef("--dump: an emulated run computes nothing to dump")
				}
				o.Emulate = true
			} else if err := computable(g, cmp.Or(modelPath, a[0])); err != nil {
				return err
			}
			if ckptEvery < 0 || ckptEvery > 0 && ckptDir == "" {
				return usagef("--checkpoint-every needs --checkpoint DIR and a positive count")
			}
			if ckptDir != "" && ckptEvery == 0 {
				ckptEvery = max(1, steps/10)
			}
			if runID == "" {
				runID = randomID()
			} else if err := checkRunID(runID); err != nil {
				return err
			}
			if ckptDir != "" {
				if err := checkCheckpointOut(ckptDir); err != nil {
					return err
				}
				lock, err := lockCheckpoints(ckptDir, runID)
				if err != nil {
					return err
				}
				defer lock.Unlock()
			}
			o.CheckpointDir, o.CheckpointEvery = ckptDir, ckptEvery
			if joinTimeout < 0 {
				return usagef("--join-timeout: must be at least 0, got %v", joinTimeout)
			}
			o.JoinTimeout = joinTimeout
			if initPath != "" && resume != "" {
				return usagef("--init and --resume: a resumed run takes its parameters from the checkpoint")
			}
			if resume != "" {
				if err := checkCheckpointDir("--resume", resume); err != nil {
					return err
				}
				c, err := runtime.LoadCheckpoint(resume, func(step int, why error) {
					fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: checkpoint at step %d in %s is not whole (%v): falling back to the one before\n", step, resume, why)
				})
				if err != nil {
					return err // exit 1: no whole checkpoint
				}
				if h := search.ModelHash(g); c.Manifest.ModelHash != h {
					return inputf("--resume %s: checkpoint step-%d was made for model %q (hash %.12s), not for this %q (hash %.12s)", resume, c.Manifest.Step, c.Manifest.Model, c.Manifest.ModelHash, g.Name(), h)
				}
				if c.Manifest.Step >= steps {
					return usagef("--resume: the checkpoint is at step %d, past --steps %d", c.Manifest.Step, steps)
				}
				o.Resume = c
				fmt.Fprintf(cmd.ErrOrStderr(), "resuming at step %d from %s\n", c.Manifest.Step, resume)
			}
			if capped, err := capSteps(cmd.ErrOrStderr(), steps, resumeStep(o)); err != nil {
				return err
			} else if capped < steps {
				steps, o.CheckpointEvery = capped, capCheckpoints(o.CheckpointEvery, capped, resumeStep(o))
			}
			if initPath != "" {
				if o.Emulate {
					return usagef("--init: an emulated run computes nothing to initialise")
				}
				if initVals, err = readInit(initPath, g, stdin); err != nil {
					return err
				}
				o.Resume, o.Init = initCheckpoint(g, initVals), true
			}
			if prof != "" && o.Emulate {
				return usagef("--profile: an emulated run computes nothing to profile")
			}
			if err := checkOutputs("--trace", trace, "--profile", prof, "--metrics", metricsPath, "--timeline", timeline); err != nil {
				return err
			}
			if timeline != "" {
				if _, err := chart.FormatOf(timeline); err != nil {
					return usagef("--timeline %v", err)
				}
			}
			if restarts < 0 || restarts > 0 && workers != "local" {
				return usagef("--restarts: restarts need local workers and a count of at least 0")
			}
			wargs, err := df.workerArgs(workers, o.Emulate, plan, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if workers == "local" && !o.Emulate && df.backend != "cuda" {
				what := fmt.Sprintf("the plan's local workers (%s devices, %d samples per iteration; the peak memory the plan predicts per device, summed)", plan.Device.Name, plan.BatchSize)
				if err := checkHost("--batch", what, estimateSlack*planNeed(plan)); err != nil {
					return err
				}
			}
			prog := &progress{log: cmd.ErrOrStderr(), bar: isTerminal(cmd.ErrOrStderr()) && !asJSON, quiet: asJSON, every: logEvery(logEveryN, steps),
				steps: steps, batch: plan.BatchSize, emulated: o.Emulate, lr: o.Train.Rate}
			if logEveryN < 0 {
				return usagef("--log-every: must be at least 1 (0: about ten lines a run), got %d", logEveryN)
			}
			source := "searched for this run"
			if modelPath != "" {
				source, why = "from "+a[0], ""
			}
			describePlan(cmd.ErrOrStderr(), plan, source, why)
			if metricsPath != "" {
				f, err := openMetrics(metricsPath, resume != "")
				if err != nil {
					return err
				}
				defer f.Close()
				prog.metrics = f
			}
			return runPlan(cmd, g, plan, &nf, workers, wargs, runID, steps, o, dump, trace, timeline, prof, asJSON, restarts, d, prog)
		},
	}
	sf.register(cmd)
	nf.register(cmd)
	nf.registerListen(cmd)
	df.registerRun(cmd)
	nff.register(cmd)
	data.register(cmd)
	cmd.Flags().IntVar(&steps, "steps", 10, "training iterations")
	of.register(cmd)
	cmd.Flags().StringVar(&workers, "workers", "local", "local: start one worker process per stage; external: wait for workers to join")
	cmd.Flags().StringVar(&modelPath, "model", "", "with a PLAN: the model `FILE` it was made for")
	cmd.Flags().StringVar(&dump, "dump", "", "write init, data, final parameters and losses to `DIR`, as graphpipe train --dump")
	cmd.Flags().StringVar(&runID, "run", "", "run ID (default: random); scopes every subject of the run")
	cmd.Flags().Int64Var(&seed, "seed", 0, "with a MODEL: override its seed (parameters and data) before planning")
	cmd.Flags().StringVar(&emulate, "emulate", "", "emulate the plan's devices (v100, a100, h100: the --device it was searched for): each op waits its modelled time, each transfer its modelled time")
	cmd.Flags().StringVar(&trace, "trace", "", "write the measured timeline of the last iteration as Chrome trace JSON to `FILE`")
	cmd.Flags().StringVar(&timeline, "timeline", "", "draw the measured timeline of the last iteration in `FILE` (.svg or .png)")
	cmd.Flags().StringVar(&ckptDir, "checkpoint", "", "write checkpoints (parameters and optimizer state by name) to `DIR`, keeping the last two")
	cmd.Flags().IntVar(&ckptEvery, "checkpoint-every", 0, "checkpoint after every K iterations (default: a tenth of --steps)")
	cmd.Flags().StringVar(&initPath, "init", "", "start from the parameters and buffers in safetensors `FILE` (by name, e.g. graphpipe import --weights)")
	cmd.Flags().StringVar(&resume, "resume", "", "resume from the newest whole checkpoint in `DIR` (any plan: parameters are keyed by name)")
	cmd.Flags().IntVar(&restarts, "restarts", 0, "when a worker dies, restart the workers up to this many times, resuming from the last checkpoint (local workers)")
	cmd.Flags().DurationVar(&joinTimeout, "join-timeout", 10*time.Minute, "give up when not every worker has joined within this long (0: wait for ever)")
	cmd.Flags().StringVar(&prof, "profile", "", "write each op's time, per stage and pass, as a pprof profile to `FILE` (go tool pprof FILE)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().IntVar(&logEveryN, "log-every", 0, "without a terminal, print a progress line every N steps, besides the first and the last (default: about ten lines a run)")
	cmd.Flags().StringVar(&metricsPath, "metrics", "", "append one JSON line per logged step to `FILE` (step, loss, samples/s, ETA; graphpipe/metrics@1), for plots and dashboards")
	return cmd
}

// modelAndPlan loads a model and plans it, or loads a plan and its model.
func modelAndPlan(cmd *cobra.Command, path, modelPath string, sf *searchFlags, seed *int64, stdin io.Reader) (*dag.Graph, *search.Plan, error) {
	data, name, err := readInput(path, stdin)
	if err != nil {
		return nil, nil, err
	}
	var probe struct {
		Format string `json:"format"`
	}
	json.Unmarshal(data, &probe)
	if probe.Format == search.PlanFormat {
		if modelPath == "" {
			return nil, nil, usagef("running a plan needs --model, the model file it was made for")
		}
		if seed != nil {
			return nil, nil, usagef("--seed: a plan is made for one model, seed included; search again with the new seed")
		}
		for _, f := range searchFlagNames {
			if cmd.Flags().Changed(f) {
				return nil, nil, usagef("--%s: the plan %s fixes it; search again to change it", f, name)
			}
		}
		g, err := loadModel(modelPath, stdin)
		if err != nil {
			return nil, nil, err
		}
		plan, err := decodePlan(data, name, g, modelPath)
		if err != nil {
			return nil, nil, err
		}
		return g, plan, nil
	}
	g, err := parseModel(data, name) // stdin, if path is "-", is read already
	if err != nil {
		return nil, nil, err
	}
	if seed != nil {
		m := *g.Model()
		m.Seed = *seed
		if g, err = rebuild(&m); err != nil {
			return nil, nil, err
		}
	}
	o, err := sf.options()
	if err != nil {
		return nil, nil, err
	}
	plan, err := search.Search(g, o)
	if err != nil {
		return nil, nil, searchError(err)
	}
	return g, plan, nil
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func runPlan(cmd *cobra.Command, g *dag.Graph, plan *search.Plan, nf *natsFlags, workers string, wargs func(int) []string, runID string, steps int, o runtime.Options, dump, trace, timeline, prof string, asJSON bool, restarts int, d *runData, prog *progress) error {
	log := cmd.ErrOrStderr()
	ctx, sig := watchSignals(cmd.Context(), log)
	defer sig.done()
	o.Stop = sig.stop
	ns, err := startNATS(nf, runID, workers, log)
	if err != nil {
		return err
	}
	defer ns.close()
	opts := ns.opts
	t, err := runtime.DialNATS(opts)
	if err != nil {
		return inputf("--nats: %v", err)
	}
	defer t.Close()
	n := 0 // one worker per device: a data-parallel stage runs as replicas
	for _, s := range plan.Stages {
		n += len(s.Devices)
	}
	ns.announce(log, workers, n, runID)
	start := time.Now()
	var res *runtime.Result
	var initial *runtime.Checkpoint // --init's values: what a restart with no checkpoint starts from
	if o.Init {
		initial = o.Resume
	}
	for gen := uint32(1); ; gen++ {
		o.Gen = gen
		var err error
		prog.start(resumeStep(o))
		res, err = runGeneration(ctx, cmd, g, plan, t, opts, workers, wargs, runID, steps, n, o, prog)
		if err == nil {
			break
		}
		if runtime.IsDataError(err) {
			return inputf("%v", err) // no restart reads other data
		}
		if ctx.Err() != nil || restarts == 0 || final(err) {
			return runExit(err, sig)
		}
		restarts--
		o.Resume = initial
		from := "step 0"
		if o.CheckpointDir != "" {
			if c, cerr := runtime.LoadCheckpoint(o.CheckpointDir, nil); cerr == nil {
				o.Resume, from = c, fmt.Sprintf("the checkpoint at step %d", c.Manifest.Step)
			}
		}
		fmt.Fprintf(log, "graphpipe: %v\ngraphpipe: restarting the workers as generation %d from %s (%d restarts left)\n", err, gen+1, from, restarts)
	}
	secs := time.Since(start).Seconds()
	if err := writeTrace(trace, timeline, plan, res, o.Emulate); err != nil {
		return err
	}
	if prof != "" {
		if err := writeProfile(prof, res); err != nil {
			return err
		}
	}
	if dump != "" {
		var init map[string]*stage.Value[float32]
		if initial != nil {
			init = initial.Params
		}
		if err := dumpRun(dump, g, plan, res, steps, init, d); err != nil {
			return err
		}
	}
	ran := len(res.Losses)
	sum := runSummary{Format: runFormat, Model: g.Name(), Strategy: plan.Strategy, Device: plan.Device.Name, Stages: len(plan.Stages), Steps: ran,
		Batch: plan.BatchSize, Losses: res.Losses, FinalLoss: ptr(jsonFloat(res.Losses[ran-1])), Skipped: []int{}, SamplesPerS: float64(plan.BatchSize) * float64(ran) / secs,
		MeasuredIterS: median(res.Iters), PredictedIter: plan.Predicted.IterationS, Workers: workers, Devices: res.Devices}
	for k := steps - ran; k < steps; k++ { // a resumed run reports its own steps
		sum.LRs = append(sum.LRs, o.Train.Rate(k))
	}
	sum.GradNorms = res.GradNorms
	for _, i := range res.Skipped {
		sum.Skipped = append(sum.Skipped, i+1)
	}
	sum.StageTimes = stageTimes(plan, res)
	for _, r := range res.Evals {
		e := toEvalJSON(r)
		sum.Evals = append(sum.Evals, e)
		sum.EvalLoss, sum.EvalAccuracy = finiteOrNil(&e.Loss), e.Accuracy
	}
	if o.Emulate {
		sum.Emulated, sum.Losses, sum.FinalLoss = plan.Device.Name, nil, nil
	}
	w := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(w).Encode(sum)
	}
	if o.Emulate {
		fmt.Fprintf(w, "%s: EMULATED %s devices (no loss computed): %s on %s, %.4g s per iteration measured (median), %.4g s predicted\n",
			sum.Model, sum.Emulated, plural(ran, "step"), stagesWord(sum.Stages), sum.MeasuredIterS, sum.PredictedIter)
		return nil
	}
	fmt.Fprintf(w, "%s: %s on %s, loss %.6g → %.6g, %.4g samples/s; %.4g s per iteration measured (median), %.4g s predicted",
		sum.Model, plural(ran, "step"), stagesWord(sum.Stages), res.Losses[0], *sum.FinalLoss, sum.SamplesPerS, sum.MeasuredIterS, sum.PredictedIter)
	if n := len(res.Evals); n > 0 {
		fmt.Fprintf(w, "; %s", evalLine(res.Evals[n-1]))
	}
	fmt.Fprintln(w)
	return nil
}

// runGeneration runs one generation of workers to the end, or to the first
// failure, which it returns with its cause.
func runGeneration(ctx context.Context, cmd *cobra.Command, g *dag.Graph, plan *search.Plan, t *runtime.NATS, opts runtime.NATSOptions,
	workers string, wargs func(int) []string, runID string, steps, n int, o runtime.Options, prog *progress) (*runtime.Result, error) {
	log := cmd.ErrOrStderr()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	o.Skipped = prog.skipped
	switch workers {
	case "local":
		procs, err := startWorkers(ctx, n, opts, runID, o.Gen, wargs, log)
		if err != nil {
			return nil, err
		}
		exited := watchWorkers(procs, fail)
		defer func() {
			if context.Cause(ctx) != nil { // the generation failed: the rest of it goes too
				for _, p := range procs {
					p.Process.Kill()
				}
			}
			stopWorkers(procs, exited)
		}()
	}
	o.OnEval = prog.eval
	res, err := runtime.Coordinate(ctx, g, plan, t, runID, steps, o, prog.step)
	if err != nil {
		prog.abort()
		if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && !runtime.IsDataError(err) {
			err = cause
		}
		// the local workers go at once, instead of waiting out the
		// coordinator's silence (4 s)
		fail(err)
		return nil, err
	}
	return res, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// writeTrace writes the last iteration's measured timeline to trace as
// Chrome trace JSON, in the shape of graphpipe sim --trace, and to timeline
// as a chart; each when named.
func writeTrace(trace, timeline string, plan *search.Plan, res *runtime.Result, emulated bool) error {
	r, names := res.Timeline(plan), plan.StageNames()
	title := "measured: " + planTitle(plan)
	if emulated {
		title = "measured, EMULATED " + plan.Device.Name + ": " + planTitle(plan)
		for s := range names {
			names[s] += " EMULATED " + plan.Device.Name
		}
	}
	if trace != "" {
		if err := writeFile("--trace", trace, microbatch.Trace(r, len(plan.Stages), names)); err != nil {
			return err
		}
	}
	if timeline == "" {
		return nil
	}
	format, _ := chart.FormatOf(timeline) // checked before the run
	pic, err := drawTimelines("--timeline", timeline, format, chart.Timeline{Title: title, Rows: plan.StageNames(), Result: r})
	if err != nil {
		return err
	}
	return writeFile("--timeline", timeline, pic)
}

// startWorkers starts one worker process per device: this same binary,
// worker i with the extra arguments wargs(i) (its backend and GPU).
func startWorkers(ctx context.Context, n int, o runtime.NATSOptions, runID string, gen uint32, wargs func(int) []string, log io.Writer) ([]*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	env := workerEnv(n, o.Token)
	if _, ok := log.(*os.File); !ok {
		// exec copies each worker's stderr into log from a goroutine of
		// its own: the workers must take turns
		log = &lockedWriter{w: log}
	}
	var procs []*exec.Cmd
	for i := 0; i < n; i++ {
		c := exec.CommandContext(ctx, self, append([]string{"worker", "--quiet", "--nats", o.URL, "--run", runID, "--gen", fmt.Sprint(gen), "--managed"}, wargs(i)...)...)
		c.Env = env
		c.Stderr = log
		if err := c.Start(); err != nil {
			for _, p := range procs {
				p.Process.Kill()
				p.Wait()
			}
			return nil, fmt.Errorf("starting worker %d: %w", i, err)
		}
		procs = append(procs, c)
	}
	return procs, nil
}

// lockedWriter is a writer several goroutines may share.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// workerEnv is the environment of n local worker processes: this one's,
// the server's token, and, unless the user set GOMAXPROCS, an even share of
// this host's cores each. With all of them each, a pipeline's stages, busy
// at once, preempt one another and the server relaying their messages: the
// small MMT on 2 workers and 2 cores took 6.05-7.34 ms per iteration, with a
// core each 4.84-5.19 ms. Likewise, unless the user set GOMEMLIMIT, an even
// share of hostShare of the host's memory each, as a soft limit: a Go heap
// grows to twice its live size between collections, and eight workers of the
// paper's MMT (14.7 GB predicted in all) were killed for memory on a 25 GB
// host without it.
func workerEnv(n int, token string) []string {
	env := append(os.Environ(), tokenEnv+"="+token)
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", max(1, goruntime.NumCPU()/n)))
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		if host := hostMemory(); host > 0 {
			env = append(env, fmt.Sprintf("GOMEMLIMIT=%d", int64(hostShare*float64(host))/int64(n)))
		}
	}
	return env
}

// watchWorkers fails the run as soon as a local worker process dies with an
// error, instead of waiting for messages it will never send. It owns the
// workers' Wait, which also joins the goroutines copying their stderr; the
// channel closes once every worker has exited and been waited for.
func watchWorkers(procs []*exec.Cmd, fail context.CancelCauseFunc) <-chan struct{} {
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Wait()
			if st := p.ProcessState; st != nil && !st.Success() {
				fail(fmt.Errorf("worker process %d (pid %d) exited: %v", i, p.Process.Pid, st))
			}
		}()
	}
	exited := make(chan struct{})
	go func() {
		wg.Wait()
		close(exited)
	}()
	return exited
}

// stopWorkers waits briefly for workers to leave, then kills what remains,
// and returns once watchWorkers has waited for every one.
func stopWorkers(procs []*exec.Cmd, exited <-chan struct{}) {
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		for _, p := range procs {
			p.Process.Kill()
		}
		<-exited
	}
}

// dumpRun writes what graphpipe train --dump writes: initial parameters and
// data (both reproducible from the model's seed), and the workers' final
// parameters and the losses.
func dumpRun(dir string, g *dag.Graph, plan *search.Plan, res *runtime.Result, steps int, init map[string]*stage.Value[float32], d *runData) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return inputf("--dump %s: %v", dir, err)
	}
	all := make([]int, g.NumOps())
	for i := range all {
		all[i] = i
	}
	ex, err := stage.NewExecutor(g, all, g.Seed())
	if err != nil {
		return err
	}
	if init != nil {
		ex.LoadState(init)
	}
	if err := writeParams(filepath.Join(dir, "init.safetensors"), ex); err != nil {
		return err
	}
	var src stage.Source = d.src
	if d.src == nil {
		ds, err := stage.NewDataset(g)
		if err != nil {
			return err
		}
		src = ds
	}
	var data []tensor.Named
	for s := 0; s < steps; s++ {
		batch, err := src.Inputs(s, int(plan.BatchSize), nil)
		if err != nil {
			return err
		}
		for name, v := range batch {
			data = append(data, tensor.Named{Name: fmt.Sprintf("%d/%s", s, name), Shape: v.Shape, F32: v.Data, I32: v.Ints})
		}
	}
	state := ex.State()
	for name, v := range res.Params {
		copy(state[name].Data, v.Data)
	}
	return writeDump(dir, ex, data, res.Losses)
}

func newWorkerCmd() *cobra.Command {
	var nf natsFlags
	var df deviceFlags
	var runID string
	var gen uint32
	var quiet bool
	var connectWait time.Duration
	var managed bool
	cmd := &cobra.Command{
		Use:   "worker --nats URL --run ID",
		Short: "Join a run as a stage worker",
		Long: `Join run ID on a NATS server: take the stage the coordinator assigns, train
it, and leave when the run ends. The token comes from --nats-token or $` + tokenEnv + `.`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nf.url == "" || runID == "" {
				return usagef("worker needs --nats and --run")
			}
			if err := nf.check(); err != nil {
				return err
			}
			if err := checkRunID(runID); err != nil {
				return err
			}
			ctx := cmd.Context()
			if managed {
				// SIGINT and SIGTERM are the coordinator's to act on
				// (it stops the run after the step in flight); a
				// terminal's Ctrl-C reaches its whole process group
				signal.Ignore(os.Interrupt, syscall.SIGTERM)
			} else {
				var stop context.CancelFunc
				ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
				defer stop()
			}
			dev, err := df.open()
			if err != nil {
				return err // exit 1: no such device or no driver
			}
			if dev != nil {
				defer dev.Close()
			}
			if connectWait < 0 {
				return usagef("--connect-wait: must be at least 0, got %v", connectWait)
			}
			no := nf.options("graphpipe worker " + runID)
			logConnection(&no, cmd.ErrOrStderr(), "graphpipe worker")
			t, err := runtime.DialNATSWaiting(ctx, no, connectWait, func(err error) {
				fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: %v: waiting up to %v for the server\n", err, connectWait)
			})
			if err != nil {
				return err
			}
			defer t.Close()
			logf := workerLog(cmd.ErrOrStderr(), quiet)
			logf("connected to %s as a worker of run %s (generation %d), computing on %s; waiting for the coordinator to give it a stage", t.ConnectedURL(), runID, gen, deviceName(dev))
			return runtime.ServeLogged(ctx, t, runID, gen, dev, logf, runtime.WithPrecision(df.precision))
		},
	}
	nf.register(cmd)
	df.registerWorker(cmd)
	cmd.Flags().BoolVar(&quiet, "quiet", false, "print nothing but errors (run's local workers)")
	cmd.Flags().StringVar(&runID, "run", "", "the run to join")
	cmd.Flags().Uint32Var(&gen, "gen", 1, "the generation to join (restarts start new ones)")
	cmd.Flags().BoolVar(&managed, "managed", false, "started by graphpipe run: leave SIGINT and SIGTERM to it")
	cmd.Flags().MarkHidden("managed")
	cmd.Flags().DurationVar(&connectWait, "connect-wait", 30*time.Second, "while no NATS server answers at --nats, keep trying this long (a worker may start before the server)")
	return cmd
}

// writeProfile writes per-op time as a pprof profile: each sample is one op's
// forward or backward time, under a frame for its stage.
func writeProfile(path string, res *runtime.Result) error {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "time", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "time", Unit: "nanoseconds"},
		Period:     1,
	}
	frame := func(name string) *profile.Location {
		f := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name, SystemName: name}
		p.Function = append(p.Function, f)
		l := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f}}}
		p.Location = append(p.Location, l)
		return l
	}
	for s, ops := range res.Ops {
		stageLoc := frame(fmt.Sprintf("stage %d", s))
		names := make([]string, 0, len(ops))
		for name := range ops {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			for pass, label := range []string{"forward", "backward"} {
				ns := int64(ops[name][pass] * 1e9)
				p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{frame(name + " " + label), stageLoc}, Value: []int64{ns}})
			}
		}
	}
	if err := p.CheckValid(); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		return err
	}
	return writeFile("--profile", path, b.Bytes())
}

// isTerminal says whether w is a character device (a terminal): progress is
// then one line redrawn in place, plain log lines otherwise.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newExportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export DIR -o FILE",
		Short: "Write the newest whole checkpoint's parameters as one safetensors file",
		Long: `Write the parameters of the newest whole checkpoint in DIR as one safetensors
file a PyTorch user can load: each parameter as "<op>.<param>" in PyTorch's layout.`,
		Args: args("DIR"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if out == "" {
				return usagef("export needs -o FILE")
			}
			if err := checkCheckpointDir("DIR", a[0]); err != nil {
				return err
			}
			if err := checkOutputs("-o", out); err != nil {
				return err
			}
			c, err := runtime.LoadCheckpoint(a[0], func(step int, why error) {
				fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: checkpoint at step %d is not whole (%v): using the one before\n", step, why)
			})
			if err != nil {
				return err
			}
			var entries []tensor.Named
			for name, v := range c.Params {
				entries = append(entries, tensor.Named{Name: name, Shape: v.Shape, F32: v.Data})
			}
			b, err := tensor.EncodeSafetensors(entries, map[string]string{"step": fmt.Sprint(c.Manifest.Step), "model": c.Manifest.Model})
			if err != nil {
				return err
			}
			return writeOutput(cmd, "-o", out, b)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the safetensors `FILE` to write")
	return cmd
}

func ptr[T any](v T) *T { return &v }

package main

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
)

func newRunCmd(stdin io.Reader) *cobra.Command {
	sf := searchFlags{stdin: stdin}
	var nf natsFlags
	var df deviceFlags
	var nff nonFiniteFlags
	var data dataFlags
	var steps int
	var of optimFlags
	var workers, modelPath, dump, runID, emulate, trace, prof, ckptDir, resume, initPath, timeline string
	var ckptEvery, logEveryN int
	var ef elasticFlags
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
			if err := checkWorkers(workers, nf.url); err != nil {
				return err
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
				if h := dag.ModelHash(g); c.Manifest.ModelHash != h {
					return inputf("--resume %s: checkpoint step-%d was made for model %q (hash %.12s), not for this %q (hash %.12s)", resume, c.Manifest.Step, c.Manifest.Model, c.Manifest.ModelHash, g.Name(), h)
				}
				if err := c.CheckOptimizer(resume, o.Train.Optimizer); err != nil {
					return inputf("%v", err)
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
				if initVals, err = readInit(initPath, g, stdin); err != nil {
					return err
				}
				o.Resume, o.Init = initCheckpoint(g, initVals), true
			}
			if err := checkOutputs("--trace", trace, "--profile", prof, "--metrics", metricsPath, "--timeline", timeline); err != nil {
				return err
			}
			if timeline != "" {
				if _, err := chart.FormatOf(timeline); err != nil {
					return usagef("--timeline %v", err)
				}
			}
			if err := ef.check(cmd, workers); err != nil {
				return err
			}
			el, err := ef.replanner(g, plan, &sf, modelPath == "")
			if err != nil {
				return err
			}
			wargs, err := df.workerArgs(workers, o.Emulate, plan, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if workers == "local" && !o.Emulate && df.backend != "cuda" {
				what := fmt.Sprintf("the plan's local workers (%s devices, %d samples per iteration; the peak memory the plan predicts per device, summed)", plan.Device.Name, plan.BatchSize)
				if err := checkHost("--batch", what, profile.EstimateSlack*profile.PlanNeed(plan)); err != nil {
					return err
				}
			}
			prog := &progress{log: cmd.ErrOrStderr(), bar: isTerminal(cmd.ErrOrStderr()) && !asJSON, quiet: asJSON, every: logEvery(logEveryN, steps),
				steps: steps, batch: plan.BatchSize, emulated: o.Emulate, lr: o.Train.Rate}
			if logEveryN < 0 {
				return usagef("--log-every: must be at least 1 (0: about ten lines a run), got %d", logEveryN)
			}
			job := &runtime.Job{Run: runID, Graph: g, Plan: plan, Steps: steps, Options: o, Local: runtime.Local{Restarts: ef.restarts,
				Outputs: runtime.Outputs{Dump: dump, Trace: trace, Timeline: timeline, Profile: prof, DumpData: d.source()}}}
			if err := job.Validate(); err != nil {
				return jobError(err)
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
			return runPlan(cmd, job, &nf, workers, wargs, asJSON, prog, el)
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
	cmd.Flags().StringVar(&workers, "workers", "local", "local: start one worker process per stage; external: wait for workers to join; pool:NAME: take agents of that pool (graphpipe worker --pool NAME)")
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
	ef.register(cmd)
	cmd.Flags().DurationVar(&joinTimeout, "join-timeout", 10*time.Minute, "give up when not every worker has joined within this long (0: wait for ever)")
	cmd.Flags().StringVar(&prof, "profile", "", "write each op's time, per stage and pass, as a pprof profile to `FILE` (go tool pprof FILE)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().IntVar(&logEveryN, "log-every", 0, "without a terminal, print a progress line every N steps, besides the first and the last (default: about ten lines a run)")
	cmd.Flags().StringVar(&metricsPath, "metrics", "", "append one JSON line per logged step to `FILE` (step, loss, samples/s, ETA; graphpipe/metrics@1), for plots and dashboards")
	return cmd
}

// runPlan runs job with --workers's launcher under a supervisor, and prints
// its summary.
func runPlan(cmd *cobra.Command, job *runtime.Job, nf *natsFlags, workers string, wargs func(int) []string, asJSON bool, prog *progress, el *runtime.Elastic) error {
	log := cmd.ErrOrStderr()
	ctx, sig := watchSignals(cmd.Context(), log)
	defer sig.done()
	job.Options.Stop, job.Options.Skipped, job.Options.OnEval = sig.stop, prog.skipped, prog.eval
	t, ns, stop, err := connect(nf, job.Run, log)
	if err != nil {
		return err
	}
	defer stop()
	if workers != "external" && !strings.HasPrefix(workers, "pool:") {
		ns.announce(log, workers, runtime.Workers(job.Plan), job.Run)
	}
	l, err := launcher(workers, t, ns, job.Options.JoinTimeout, wargs, log)
	if err != nil {
		return err
	}
	sup := &runtime.Supervisor{Job: job, T: t, Launcher: l, Log: log,
		Progress: prog.step, Starting: prog.start, Failed: prog.abort, Elastic: el,
		Replanned: func(_, p *plan.Plan) { describePlan(log, p, "re-planned", "") }}
	res, secs, err := sup.Run(ctx)
	if err != nil {
		if e := jobError(err); e != nil {
			return e
		}
		return runExit(err, sig)
	}
	return printRun(cmd.OutOrStdout(), job.Graph, job.Plan, res, secs, job.Options, job.Steps, workers, asJSON)
}

package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// trainSummary is `graphpipe train --json`'s object.
type trainSummary struct {
	Format    string  `json:"format"` // trainFormat
	Model     string  `json:"model"`
	Steps     int     `json:"steps"`
	Optimizer string  `json:"optimizer"`
	LR        float64 `json:"lr"`
	// LRs is each step's learning rate (the schedule's); GradNorms, with
	// --clip-grad-norm, each step's global gradient norm before clipping.
	LRs         []float64 `json:"lrs"`
	GradNorms   []float64 `json:"grad_norms,omitempty"`
	Batch       int       `json:"batch_size"`
	MicroBatch  int       `json:"micro_batch"`
	FirstLoss   jsonFloat `json:"first_loss"`
	FinalLoss   jsonFloat `json:"final_loss"`
	Losses      lossList  `json:"losses"`
	Skipped     []int     `json:"skipped_steps"` // steps (from 1) whose update was skipped (--on-nonfinite skip)
	SamplesPerS float64   `json:"samples_per_s"`
	// Samples is the samples the steps saw; BackpropSamples those of them
	// that had a backward pass (fewer with --selective-backprop), and
	// BackpropPerStep each step's (with --selective-backprop).
	Samples         int   `json:"samples"`
	BackpropSamples int   `json:"backprop_samples"`
	BackpropPerStep []int `json:"backprop_per_step,omitempty"`
	// IterationS is each step's seconds, from its batch to its update
	// (on a GPU, the update is waited for by the next step's loss).
	IterationS []float64 `json:"iteration_s"`
	// BLAS is what computed the matrix products on the cpu (absent on a GPU).
	BLAS *tensor.BLASInfo `json:"blas,omitempty"`
	// with --eval-data: the last evaluation, and every one
	EvalLoss     *float64   `json:"eval_loss,omitempty"`
	EvalAccuracy *float64   `json:"eval_accuracy,omitempty"`
	Evals        []evalJSON `json:"evals,omitempty"`
	// DeviceCalls, on a CUDA backend: what the last step (a steady-state
	// one after the first) asked of the device, its evaluation aside.
	DeviceCalls *cuda.Counts `json:"device_calls,omitempty"`
	// Conv, on a CUDA backend: how the device runs conv2d (and
	// batch_norm), "cudnn 9.1.2, algorithms by measured search" (or "by
	// heuristics", GRAPHPIPE_CONV_ALGO) or "im2col" (im2col + GEMM and
	// graphpipe's batch norm kernels: no cuDNN, or GRAPHPIPE_CONV=im2col).
	Conv string `json:"conv,omitempty"`
}

// addEval records an evaluation in the summary.
func (s *trainSummary) addEval(r stage.EvalResult) {
	e := toEvalJSON(r)
	s.Evals = append(s.Evals, e)
	s.EvalLoss, s.EvalAccuracy = finiteOrNil(&e.Loss), e.Accuracy
}

func newTrainCmd(stdin io.Reader) *cobra.Command {
	f := &trainFlags{stdin: stdin}
	cmd := &cobra.Command{
		Use:   "train MODEL",
		Short: "Train a model in one process: the reference every pipeline run is checked against",
		Long: `Train a model in a single process, on its synthetic dataset or on --data,
evaluating on --eval-data. --dump DIR writes
init.safetensors (every parameter as "<op>.<param>", PyTorch layouts),
data.safetensors ("<step>/<input>": each step's batch), final.safetensors and
losses.json (each step's loss before its update), enough to replay the run
in PyTorch.`,
		Args: args("MODEL"),
		RunE: func(cmd *cobra.Command, a []string) error { return f.run(cmd, a[0]) },
	}
	f.register(cmd)
	return cmd
}

// trainFlags are graphpipe train's flags: a run in one process, which
// builds no runtime.Job but a stage.Trainer.
type trainFlags struct {
	device         deviceFlags
	nonFinite      nonFiniteFlags
	data           dataFlags
	optim          optimFlags
	sb             sbFlags
	steps          int
	batch, micro   int
	dump, initPath string
	schedule       string // --schedule: 2bw keeps two versions of the weights (twobw.go)
	seed           int64
	json           bool
	stdin          io.Reader
}

func (f *trainFlags) register(cmd *cobra.Command) {
	f.device.registerWorker(cmd)
	f.nonFinite.register(cmd)
	f.data.register(cmd)
	cmd.Flags().IntVar(&f.steps, "steps", 100, "training steps (one optimizer step each)")
	f.optim.register(cmd)
	f.sb.register(cmd)
	cmd.Flags().IntVar(&f.batch, "batch", 0, "global batch (default: the model's batch_size)")
	cmd.Flags().IntVar(&f.micro, "micro-batch", 0, "micro-batch size; gradients of the micro-batches are accumulated (default: the whole batch)")
	cmd.Flags().Int64Var(&f.seed, "seed", 0, "override the model's seed (parameters and data)")
	cmd.Flags().StringVar(&f.initPath, "init", "", "start from the parameters and buffers in safetensors `FILE` (by name, e.g. graphpipe import --weights)")
	cmd.Flags().StringVar(&f.dump, "dump", "", "write init, data, final parameters and losses to `DIR`")
	cmd.Flags().StringVar(&f.schedule, "schedule", "1f1b", trainScheduleHelp)
	cmd.Flags().BoolVar(&f.json, "json", false, "print one JSON object")
}

// run trains the model at path as the flags say.
func (f *trainFlags) run(cmd *cobra.Command, path string) error {
	g, err := f.model(cmd, path)
	if err != nil {
		return err
	}
	o, err := f.optim.options(cmd, f.steps)
	if err != nil {
		return err
	}
	if err := f.sb.check(cmd, f.device.backend); err != nil {
		return err
	}
	twoBW, err := trainTwoBW(cmd, f.schedule, f.device.backend, f.sb.on(cmd))
	if err != nil {
		return err
	}
	b, m := cmp.Or(f.batch, int(g.BatchSize())), cmp.Or(f.micro, f.batch, int(g.BatchSize()))
	if b > 0 && m > 0 {
		if err := checkHost("--batch", fmt.Sprintf("training %s at batch %d, micro-batch %d, in one process", g.Name(), b, m), profile.EstimateSlack*profile.TrainNeed(g, b, m, float64(stateBytes(o)))); err != nil {
			return err
		}
	}
	var initVals map[string]*stage.Value[float32]
	if f.initPath != "" {
		if initVals, err = readInit(f.initPath, g, f.stdin); err != nil {
			return err
		}
	}
	d, err := f.data.open(cmd, g, b, &f.steps, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer d.close()
	o.Steps, o.Batch, o.MicroBatch = f.steps, f.batch, f.micro // --epochs may have set the steps
	if o.Selective, err = f.sb.settings(cmd, g, d.stepsPerEpoch()); err != nil {
		return err
	}
	t, err := stage.NewTrainer(g, o)
	if err != nil {
		return inputf("%v", err)
	}
	defer t.Close() // (deferred after d.close: runs before it)
	if d.src != nil {
		t.Source = d.src
	}
	if initVals != nil {
		t.Ex.LoadState(initVals)
	}
	if twoBW {
		if err := keepTwoVersions(t, f.schedule); err != nil {
			return err
		}
	}
	release, err := f.device.useDevice(t)
	if err != nil {
		return err
	}
	defer release()
	sum := trainSummary{Format: trainFormat, Model: g.Name(), Steps: f.steps, Optimizer: o.Optimizer, LR: o.LR, Skipped: []int{}}
	if t.Ex.Backend().Name() == "cpu" {
		info := tensor.BLAS()
		sum.BLAS = &info
	}
	if dev := t.Ex.Device(); dev != nil {
		sum.Conv = dev.ConvPath()
		if c := dev.ConvAlgorithmChoice(); c != "" {
			sum.Conv += ", algorithms by " + c
		}
		if hasConv(g) {
			fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: conv2d on %s: %s\n", dev.Name, convLine(dev))
		}
	}
	return train(cmd, t, o, d, f.dump, f.json, f.nonFinite, sum)
}

// model is the model at path, its seed replaced by --seed's, once the
// steps, GRAPHPIPE_MAX_STEPS and --on-nonfinite are checked.
func (f *trainFlags) model(cmd *cobra.Command, path string) (*dag.Graph, error) {
	g, err := loadModel(path, f.stdin)
	if err != nil {
		return nil, err
	}
	if f.steps < 1 {
		return nil, usagef("--steps: must be positive, got %d", f.steps)
	}
	if f.steps, err = capSteps(cmd.ErrOrStderr(), f.steps, 0); err != nil {
		return nil, err
	}
	if err := f.nonFinite.check(); err != nil {
		return nil, err
	}
	if cmd.Flags().Changed("seed") {
		m := *g.Model()
		m.Seed = f.seed
		if g, err = rebuild(&m); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func train(cmd *cobra.Command, t *stage.Trainer, o stage.TrainOptions, d *runData, dump string, asJSON bool, nff nonFiniteFlags, sum trainSummary) error {
	steps := d.steps
	sum.Steps = steps
	var last stage.EvalResult
	var data []tensor.Named
	if dump != "" {
		if err := os.MkdirAll(dump, 0o755); err != nil {
			return inputf("--dump %s: %v", dump, err)
		}
		if err := supervise.WriteParams(filepath.Join(dump, "init.safetensors"), t.Ex); err != nil {
			return err
		}
	}
	start := time.Now()
	samples := 0
	stepped := func(r stage.StepResult) error {
		step := r.Step
		if r.NonFinite != "" {
			sum.Skipped = append(sum.Skipped, step+1)
			if !asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: step %d: %s: its update skipped (%d in a row)\n", step+1, r.NonFinite, r.Skips)
			}
		}
		sum.IterationS = append(sum.IterationS, r.Seconds)
		if r.DeviceCalls != nil {
			sum.DeviceCalls = r.DeviceCalls
		}
		sum.Losses = append(sum.Losses, r.Loss)
		sum.LRs = append(sum.LRs, o.Rate(step))
		if o.ClipGradNorm > 0 {
			sum.GradNorms = append(sum.GradNorms, t.GradNorm())
		}
		samples += r.Batch[t.G.Inputs()[0].Name].Shape[0]
		sum.Batch = r.Batch[t.G.Inputs()[0].Name].Shape[0]
		sum.Samples, sum.BackpropSamples = samples, sum.BackpropSamples+r.Backprop
		if o.Selective != nil {
			sum.BackpropPerStep = append(sum.BackpropPerStep, r.Backprop)
		}
		if dump != "" {
			for name, v := range r.Batch {
				data = append(data, tensor.Named{Name: fmt.Sprintf("%d/%s", step, name), Shape: v.Shape, F32: v.Data, I32: v.Ints})
			}
		}
		if !asJSON && (step%max(1, steps/10) == 0 || step == steps-1) {
			kept := ""
			if o.Selective != nil {
				kept = keptLine(r.Backprop, sum.Batch)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "step %d/%d: loss %.6g, lr %.4g%s\n", step+1, steps, r.Loss, o.Rate(step), kept) // counted from 1, as run counts
		}
		return nil
	}
	evaluated := func(step int, r stage.EvalResult) {
		sum.addEval(r)
		last = r
		if !asJSON {
			fmt.Fprintf(cmd.ErrOrStderr(), "step %d/%d: %s\n", step+1, steps, evalLine(r))
		}
	}
	loop := stage.Loop{Steps: steps, NonFinite: stage.NonFinite{Skip: nff.policy == runtime.NonFiniteSkip, MaxSkips: nff.maxSkips},
		Eval: d.eval, EvalDue: d.spec.EvalDue, Stepped: stepped, Evaluated: evaluated}
	if err := t.Run(loop); err != nil {
		return trainError(err)
	}
	sum.SamplesPerS = float64(samples) / time.Since(start).Seconds()
	sum.FirstLoss, sum.FinalLoss = jsonFloat(sum.Losses[0]), jsonFloat(sum.Losses[len(sum.Losses)-1])
	if dump != "" {
		if err := supervise.WriteDump(dump, t.Ex, data, sum.Losses); err != nil {
			return err
		}
	}
	w := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(w).Encode(sum)
	}
	fmt.Fprintf(w, "%s: %s, loss %.6g → %.6g (%+.1f%%), %.4g samples/s", sum.Model, plural(steps, "step"), sum.FirstLoss, sum.FinalLoss,
		100*(sum.FinalLoss/sum.FirstLoss-1), sum.SamplesPerS)
	if n := len(sum.Evals); n > 0 {
		fmt.Fprintf(w, "; %s", evalLine(last))
	}
	if o.Selective != nil {
		fmt.Fprintf(w, "; %d of %d samples backpropagated (%.1f%%)", sum.BackpropSamples, sum.Samples, 100*float64(sum.BackpropSamples)/float64(max(1, sum.Samples)))
	}
	fmt.Fprintln(w)
	return nil
}

// trainError is how train reports what ended a Trainer's run: a step whose
// values are not finite (exit 3, as a pipeline run's coordinator reports
// it), the user's data (exit 2), or another failure.
func trainError(err error) error {
	var stop *stage.NonFiniteStop
	var eval *stage.EvalError
	switch {
	case errors.As(err, &stop):
		return &exitError{exitDiverged, &runtime.NonFiniteError{Step: stop.Step, Stage: -1, What: stop.What, Skips: stop.Skips}}
	case errors.As(err, &eval) && runtime.IsDataError(eval.Err):
		return inputf("--eval-data %v", eval.Err)
	case errors.As(err, &eval):
		return eval.Err
	case runtime.IsDataError(err):
		return inputf("--data %v", err)
	}
	return err
}

// readInit reads an --init file and checks it against the model: every
// parameter and buffer by name and shape, nothing else. Problems are exit 2,
// one line each.
func readInit(path string, g *dag.Graph, stdin io.Reader) (map[string]*stage.Value[float32], error) {
	data, _, err := readInput(path, stdin)
	if err != nil {
		return nil, flagInputError("--init", err)
	}
	entries, _, err := tensor.DecodeSafetensors(data)
	if err != nil {
		return nil, inputf("--init %s: %v", path, err)
	}
	vals, problems := stage.StateOf(g, entries)
	if len(problems) > 0 {
		lines := make([]string, len(problems))
		for i, p := range problems {
			lines[i] = fmt.Sprintf("--init %s: %s", path, p)
		}
		return nil, &inputError{lines}
	}
	return vals, nil
}

// initCheckpoint is --init's values as a checkpoint at step 0, which the
// run path hands out to the workers as it does to resume.
func initCheckpoint(g *dag.Graph, vals map[string]*stage.Value[float32]) *runtime.Checkpoint {
	c := &runtime.Checkpoint{Params: vals, Optim: map[string][]float32{}}
	c.Manifest.Model, c.Manifest.ModelHash = g.Name(), dag.ModelHash(g)
	return c
}

// hasConv says whether g has a conv2d op.
func hasConv(g *dag.Graph) bool {
	for i := 0; i < g.NumOps(); i++ {
		if g.Op(i).Kind == dag.Conv2D {
			return true
		}
	}
	return false
}

// convLine says how dev runs conv2d, and why not through cuDNN where it
// does not (a missing cuDNN's reason was said when the device opened).
func convLine(dev *cuda.Device) string {
	err := dev.ConvPathReason()
	switch {
	case dev.ConvPath() != "im2col":
		return dev.ConvPath() + " (batch_norm too), algorithms by " + dev.ConvAlgorithmChoice()
	case errors.Is(err, cuda.ErrDNNOff):
		return "im2col + GEMM (" + cuda.ConvEnv + "=im2col)"
	case dev.Emulated:
		return "im2col + GEMM (the emulator has no cuDNN)"
	}
	return "im2col + GEMM (no cuDNN: why is said above)"
}

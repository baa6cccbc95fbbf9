package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
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
	// with --eval-data: the last evaluation, and every one
	EvalLoss     *float64   `json:"eval_loss,omitempty"`
	EvalAccuracy *float64   `json:"eval_accuracy,omitempty"`
	Evals        []evalJSON `json:"evals,omitempty"`
}

// addEval records an evaluation in the summary.
func (s *trainSummary) addEval(r stage.EvalResult) {
	e := toEvalJSON(r)
	s.Evals = append(s.Evals, e)
	s.EvalLoss, s.EvalAccuracy = finiteOrNil(&e.Loss), e.Accuracy
}

func newTrainCmd(stdin io.Reader) *cobra.Command {
	var steps, batch, micro int
	var df deviceFlags
	var nff nonFiniteFlags
	var data dataFlags
	var of optimFlags
	var dump, initPath string
	var seed int64
	var asJSON bool
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
		RunE: func(cmd *cobra.Command, a []string) error {
			g, err := loadModel(a[0], stdin)
			if err != nil {
				return err
			}
			if steps < 1 {
				return usagef("--steps: must be positive, got %d", steps)
			}
			if steps, err = capSteps(cmd.ErrOrStderr(), steps, 0); err != nil {
				return err
			}
			if err := nff.check(); err != nil {
				return err
			}
			if cmd.Flags().Changed("seed") {
				m := *g.Model()
				m.Seed = seed
				if g, err = rebuild(&m); err != nil {
					return err
				}
			}
			o, err := of.options(cmd, steps)
			if err != nil {
				return err
			}
			b, m := cmp.Or(batch, int(g.BatchSize())), cmp.Or(micro, batch, int(g.BatchSize()))
			if b > 0 && m > 0 {
				if err := checkHost("--batch", fmt.Sprintf("training %s at batch %d, micro-batch %d, in one process", g.Name(), b, m), profile.EstimateSlack*profile.TrainNeed(g, b, m, float64(stateBytes(o)))); err != nil {
					return err
				}
			}
			var initVals map[string]*stage.Value[float32]
			if initPath != "" {
				if initVals, err = readInit(initPath, g, stdin); err != nil {
					return err
				}
			}
			d, err := data.open(cmd, g, b, &steps, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer d.close()
			o.Steps, o.Batch, o.MicroBatch = steps, batch, micro // --epochs may have set the steps
			t, err := stage.NewTrainer(g, o)
			if err != nil {
				return inputf("%v", err)
			}
			if d.src != nil {
				t.Source = d.src
			}
			if initVals != nil {
				t.Ex.LoadState(initVals)
			}
			release, err := df.useDevice(t)
			if err != nil {
				return err
			}
			defer release()
			return train(cmd, t, o, d, dump, asJSON, nff, trainSummary{Format: trainFormat, Model: g.Name(), Steps: steps, Optimizer: o.Optimizer, LR: o.LR, Skipped: []int{}})
		},
	}
	df.registerWorker(cmd)
	nff.register(cmd)
	data.register(cmd)
	cmd.Flags().IntVar(&steps, "steps", 100, "training steps (one optimizer step each)")
	of.register(cmd)
	cmd.Flags().IntVar(&batch, "batch", 0, "global batch (default: the model's batch_size)")
	cmd.Flags().IntVar(&micro, "micro-batch", 0, "micro-batch size; gradients of the micro-batches are accumulated (default: the whole batch)")
	cmd.Flags().Int64Var(&seed, "seed", 0, "override the model's seed (parameters and data)")
	cmd.Flags().StringVar(&initPath, "init", "", "start from the parameters and buffers in safetensors `FILE` (by name, e.g. graphpipe import --weights)")
	cmd.Flags().StringVar(&dump, "dump", "", "write init, data, final parameters and losses to `DIR`")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
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
		if err := runtime.WriteParams(filepath.Join(dump, "init.safetensors"), t.Ex); err != nil {
			return err
		}
	}
	start := time.Now()
	samples, skips := 0, 0
	for step := 0; step < steps; step++ {
		loss, batch, err := t.Compute(step)
		if err != nil {
			if runtime.IsDataError(err) {
				return inputf("--data %v", err)
			}
			return err
		}
		bad := trainNonFinite(t, loss)
		if bad != "" && (nff.policy == runtime.NonFiniteStop || skips == nff.maxSkips) {
			return &exitError{exitDiverged, &runtime.NonFiniteError{Step: step + 1, Stage: -1, What: bad, Skips: skips}}
		}
		if bad != "" {
			skips++
			sum.Skipped = append(sum.Skipped, step+1)
			if !asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "graphpipe: step %d: %s: its update skipped (%d in a row)\n", step+1, bad, skips)
			}
		} else {
			skips = 0
		}
		if err := t.Apply(bad != ""); err != nil {
			return err
		}
		sum.Losses = append(sum.Losses, loss)
		sum.LRs = append(sum.LRs, o.Rate(step))
		if o.ClipGradNorm > 0 {
			sum.GradNorms = append(sum.GradNorms, t.GradNorm())
		}
		samples += batch[t.G.Inputs()[0].Name].Shape[0]
		sum.Batch = batch[t.G.Inputs()[0].Name].Shape[0]
		if dump != "" {
			for name, v := range batch {
				data = append(data, tensor.Named{Name: fmt.Sprintf("%d/%s", step, name), Shape: v.Shape, F32: v.Data, I32: v.Ints})
			}
		}
		if !asJSON && (step%max(1, steps/10) == 0 || step == steps-1) {
			fmt.Fprintf(cmd.ErrOrStderr(), "step %d/%d: loss %.6g, lr %.4g\n", step+1, steps, loss, o.Rate(step)) // counted from 1, as run counts
		}
		if d.spec.EvalDue(step, steps) {
			r, err := t.Evaluate(step+1, d.eval)
			if err != nil {
				if runtime.IsDataError(err) {
					return inputf("--eval-data %v", err)
				}
				return err
			}
			sum.addEval(r)
			last = r
			if !asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "step %d/%d: %s\n", step+1, steps, evalLine(r))
			}
		}
	}
	sum.SamplesPerS = float64(samples) / time.Since(start).Seconds()
	sum.FirstLoss, sum.FinalLoss = jsonFloat(sum.Losses[0]), jsonFloat(sum.Losses[len(sum.Losses)-1])
	if dump != "" {
		if err := runtime.WriteDump(dump, t.Ex, data, sum.Losses); err != nil {
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
	fmt.Fprintln(w)
	return nil
}

// trainNonFinite says where a step of train found a value that is not
// finite, "" if none: its loss, then its gradients (read once), and only
// then the first op with one.
func trainNonFinite(t *stage.Trainer, loss float64) string {
	if !math.IsNaN(loss) && !math.IsInf(loss, 0) && t.Ex.GradsFinite() {
		return ""
	}
	if op, what := t.Ex.FirstNonFinite(); op != "" {
		return fmt.Sprintf("op %q: %s", op, what)
	}
	return fmt.Sprintf("op %q: the loss is %v", t.G.Op(t.G.Loss()).Name, float32(loss))
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

package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/dataset"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
)

// dataFlags are the flags of a user's data, shared by train and run.
type dataFlags struct {
	path, evalPath          string
	evalEvery, epochs       int
	shuffle, allowNonfinite bool
}

func (f *dataFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.path, "data", "", "train on the dataset at `PATH`: a .safetensors file or directory of shards, a directory of .npy files, or an .npz; one tensor per model input (the label too), samples on the first axis (default: the model's synthetic data)")
	cmd.Flags().StringVar(&f.evalPath, "eval-data", "", "evaluate on the dataset at `PATH` (forward only) after the last step, and every --eval-every steps")
	cmd.Flags().IntVar(&f.evalEvery, "eval-every", 0, "with --eval-data: evaluate after every K steps too")
	cmd.Flags().IntVar(&f.epochs, "epochs", 0, "with --data: train this many epochs (instead of --steps); each epoch leaves out its last partial batch")
	cmd.Flags().BoolVar(&f.shuffle, "shuffle", true, "with --data: visit each epoch's samples in an order drawn from (--seed, epoch); false: file order")
	cmd.Flags().BoolVar(&f.allowNonfinite, "allow-nonfinite", false, "with --data: accept NaN and infinite float inputs (refused by default, naming the file, tensor and row)")
}

// runData is a command's opened data: nil sources for synthetic data.
type runData struct {
	spec  runtime.DataSpec
	src   *runtime.DataSource
	eval  *runtime.EvalData
	steps int
}

func (d *runData) close() {
	if d.src != nil {
		d.src.Set.Close()
	}
	if d.eval != nil {
		d.eval.Set.Close()
	}
}

// open checks the flags, opens the data for g at the global batch, and
// settles the step count: --steps, or --epochs of the data. It says on log
// how the data divides into batches.
func (f *dataFlags) open(cmd *cobra.Command, g *dag.Graph, batch int, steps *int, log io.Writer) (*runData, error) {
	d := &runData{spec: runtime.DataSpec{Shuffle: f.shuffle, AllowNonfinite: f.allowNonfinite, EvalEvery: f.evalEvery}}
	switch {
	case f.path == "" && (f.epochs != 0 || cmd.Flags().Changed("shuffle") || f.allowNonfinite):
		return nil, usagef("--epochs, --shuffle and --allow-nonfinite need --data")
	case f.evalPath == "" && f.evalEvery != 0:
		return nil, usagef("--eval-every needs --eval-data")
	case f.evalEvery < 0:
		return nil, usagef("--eval-every: must be at least 0, got %d", f.evalEvery)
	case f.epochs < 0:
		return nil, usagef("--epochs: must be positive, got %d", f.epochs)
	case f.epochs > 0 && cmd.Flags().Changed("steps"):
		return nil, usagef("--epochs and --steps: give one")
	}
	if f.path != "" {
		set, err := runtime.OpenData(f.path, g, f.allowNonfinite)
		if err != nil {
			return nil, dataInput("--data", err)
		}
		d.src, err = runtime.NewDataSource(set, batch, g.Seed(), f.shuffle)
		if err != nil {
			set.Close()
			return nil, dataInput("--data", err)
		}
		d.spec.Path = absPath(f.path)
		if d.spec.Fingerprint, err = set.Fingerprint(); err != nil {
			d.close()
			return nil, dataInput("--data", err)
		}
		o := d.src.Order
		if f.epochs > 0 {
			if o.StepsPerEpoch() > math.MaxInt32/f.epochs {
				d.close()
				return nil, usagef("--epochs: %d epochs of %d steps is too many", f.epochs, o.StepsPerEpoch())
			}
			*steps = f.epochs * o.StepsPerEpoch()
		}
		fmt.Fprintf(log, "data: %d samples in %s, %d steps per epoch of %d samples (%d left out of each epoch), %.4g epochs in %d steps\n",
			set.N, f.path, o.StepsPerEpoch(), batch, o.Left(), float64(*steps)/float64(o.StepsPerEpoch()), *steps)
	}
	if f.evalPath != "" {
		set, err := runtime.OpenData(f.evalPath, g, f.allowNonfinite)
		if err != nil {
			d.close()
			return nil, dataInput("--eval-data", err)
		}
		d.eval = &runtime.EvalData{Set: set, Size: batch}
		d.spec.EvalPath = absPath(f.evalPath)
		if d.spec.EvalFingerprint, err = set.Fingerprint(); err != nil {
			d.close()
			return nil, dataInput("--eval-data", err)
		}
	}
	d.steps = *steps
	return d, nil
}

// stepsPerEpoch is the training data's steps in an epoch: 0 for the
// model's synthetic data, which has no epochs.
func (d *runData) stepsPerEpoch() int {
	if d.src == nil {
		return 0
	}
	return d.src.Order.StepsPerEpoch()
}

// dataInput makes a refusal of the data an input error (exit 2), a line
// per problem, each naming the flag.
func dataInput(flag string, err error) error {
	if ce, ok := err.(*dataset.CheckError); ok {
		lines := make([]string, len(ce.Lines))
		for i, l := range ce.Lines {
			lines[i] = flag + " " + l
		}
		return &inputError{lines}
	}
	return inputf("%s %v", flag, err)
}

// evalLine is an evaluation as the progress lines show it.
func evalLine(r stage.EvalResult) string {
	s := fmt.Sprintf("eval loss %.6g", r.Loss)
	if r.HasAccuracy() {
		s += fmt.Sprintf(", accuracy %.4f", r.Accuracy)
	}
	return s
}

// evalJSON is an evaluation in --json outputs.
type evalJSON struct {
	Step     int      `json:"step"`
	Samples  int      `json:"samples"`
	Loss     float64  `json:"loss"`
	Accuracy *float64 `json:"accuracy,omitempty"`
}

func toEvalJSON(r stage.EvalResult) evalJSON {
	e := evalJSON{Step: r.Step, Samples: r.Samples, Loss: r.Loss}
	if r.HasAccuracy() {
		a := r.Accuracy
		e.Accuracy = &a
	}
	return e
}

// optionsSpec is the data as workers are told of it: nil for synthetic
// source is the run's training data for a dump: nil for the model's
// synthetic data.
func (d *runData) source() stage.Source {
	if d.src == nil {
		return nil
	}
	return d.src
}

// data without evaluation.
func (d *runData) optionsSpec() *runtime.DataSpec {
	if d.spec.Path == "" && d.spec.EvalPath == "" {
		return nil
	}
	s := d.spec
	if d.eval != nil {
		s.EvalSamples = d.eval.Set.N
	}
	return &s
}

// checkEvalKeys refuses an evaluation set too large for the frame keys of
// its micro-batches (runtime's evalMBBase: 2³⁰ micro-batches).
func (d *runData) checkEvalKeys(plan *plan.Plan) error {
	if d.eval == nil {
		return nil
	}
	mbs := int64(plan.BatchSize / plan.MicroBatch)
	if batches := int64(dataset.EvalBatches(d.eval.Set.N, int(plan.BatchSize))); batches*mbs >= 1<<30 {
		return usagef("--eval-data: %d samples make %d micro-batches of %d, past the 2^30 an evaluation may have", d.eval.Set.N, batches*mbs, plan.MicroBatch)
	}
	return nil
}

// absPath is path made absolute: workers on other hosts open the same path,
// whatever their working directory.
func absPath(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

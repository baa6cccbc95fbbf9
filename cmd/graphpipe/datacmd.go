package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
)

func newDataCmd(stdin io.Reader) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Datasets: write a model's synthetic, teacher-labelled data as a file --data reads",
	}
	cmd.AddCommand(newDataSynthCmd(stdin))
	return cmd
}

func newDataSynthCmd(stdin io.Reader) *cobra.Command {
	var out string
	var samples, skip int
	cmd := &cobra.Command{
		Use:   "synth MODEL -o FILE.safetensors --samples N",
		Short: "Write N samples of the model's synthetic data (labels from its teacher) as safetensors or .npz",
		Long: `Write samples of the model's synthetic data, the data train and run use
without --data: float inputs close to N(0, 1), int inputs uniform in their
range, and the label made by a fixed random teacher of the other inputs (a
function of the model's seed), so that a model can learn it. One tensor per
model input, named after it, samples on the first axis: what --data reads,
as safetensors, or as a NumPy .npz archive (np.savez's, members stored)
where -o ends in .npz. --skip K starts at sample K, so that an evaluation
set drawn past the training set holds other samples labelled by the same
teacher. A file larger than its file system's free space is refused before
anything is written; SIGINT or SIGTERM stops the writing and leaves no
partial file.`,
		Example: "  graphpipe data synth model.json -o train.safetensors --samples 4096\n  graphpipe data synth model.json -o eval.npz --samples 1024 --skip 4096",
		Args:    args("MODEL"),
		RunE: func(cmd *cobra.Command, a []string) error {
			g, err := loadModel(a[0], stdin)
			if err != nil {
				return err
			}
			if samples < 1 || skip < 0 {
				return usagef("--samples must be positive and --skip at least 0 (got %d, %d)", samples, skip)
			}
			if out == "" {
				return usagef("-o: required")
			}
			if err := checkOutputs("-o", out); err != nil {
				return err
			}
			s, err := newSynth(g, out, skip, samples)
			if err != nil {
				return err
			}
			if err := s.checkSpace(); err != nil {
				return err
			}
			ds, err := stage.NewDataset(g)
			if err != nil {
				return err
			}
			ctx, stop := stopOnSignal(cmd.Context())
			defer stop()
			if err := writeStream(out, func(w io.Writer) error { return s.write(ctx, w, ds) }); err != nil {
				var se *signalError
				if errors.As(err, &se) {
					return &exitError{code: 128 + int(se.sig), err: fmt.Errorf("data synth: stopped by %s; %s not written", signalName(se.sig), out)}
				}
				return inputf("-o %s: cannot write: %v", out, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d samples of %d inputs, %s)\n", out, samples, len(g.Inputs()), s.format)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the `FILE` to write: safetensors, or NumPy .npz where it ends in .npz")
	cmd.Flags().IntVar(&samples, "samples", 1024, "samples to write")
	cmd.Flags().IntVar(&skip, "skip", 0, "start at this sample of the synthetic stream")
	return cmd
}

// evalSummary is `graphpipe eval --json`'s object.
type evalSummary struct {
	Format   string   `json:"format"` // evalFormat
	Model    string   `json:"model"`
	Data     string   `json:"data"`
	Samples  int      `json:"samples"`
	Loss     float64  `json:"loss"`
	Accuracy *float64 `json:"accuracy,omitempty"`
}

func newEvalCmd(stdin io.Reader) *cobra.Command {
	var initPath, dataPath string
	var batch int
	var allowNonfinite, asJSON bool
	var df deviceFlags
	cmd := &cobra.Command{
		Use:   "eval MODEL --init W.safetensors --data PATH",
		Short: "Evaluate saved weights on a dataset in one process (forward only, evaluation mode)",
		Long: `Run the dataset at --data through the model forward in evaluation mode
(batch_norm by its running statistics, no dropout), with the parameters and
buffers of --init (graphpipe export's or import's), and print the mean loss
and, for softmax cross-entropy, the accuracy.`,
		Example: "  graphpipe export ck/ -o trained.safetensors\n  graphpipe eval model.json --init trained.safetensors --data eval.safetensors",
		Args:    args("MODEL"),
		RunE: func(cmd *cobra.Command, a []string) error {
			g, err := loadModel(a[0], stdin)
			if err != nil {
				return err
			}
			if initPath == "" || dataPath == "" {
				return usagef("--init and --data: both required")
			}
			if batch < 0 {
				return usagef("--batch: must be positive, got %d", batch)
			}
			b := batch
			if b == 0 {
				b = int(g.BatchSize())
			}
			initVals, err := readInit(initPath, g, stdin)
			if err != nil {
				return err
			}
			set, err := runtime.OpenData(dataPath, g, allowNonfinite)
			if err != nil {
				return dataInput("--data", err)
			}
			defer set.Close()
			t, err := stage.NewTrainer(g, stage.TrainOptions{Optimizer: "sgd", LR: 1, Batch: b}) // never steps
			if err != nil {
				return inputf("%v", err)
			}
			t.Ex.LoadState(initVals)
			release, err := df.useDevice(t)
			if err != nil {
				return err
			}
			defer release()
			r, err := t.Evaluate(0, &runtime.EvalData{Set: set, Size: b})
			if err != nil {
				if runtime.IsDataError(err) {
					return inputf("--data %v", err)
				}
				return err
			}
			e := toEvalJSON(r)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(evalSummary{Format: evalFormat, Model: g.Name(), Data: dataPath, Samples: r.Samples, Loss: r.Loss, Accuracy: e.Accuracy})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d samples of %s: %s\n", g.Name(), r.Samples, dataPath, evalLine(r))
			return nil
		},
	}
	df.registerWorker(cmd)
	cmd.Flags().StringVar(&initPath, "init", "", "the parameters and buffers, safetensors `FILE` by name")
	cmd.Flags().StringVar(&dataPath, "data", "", "the dataset at `PATH` (as train --data reads)")
	cmd.Flags().IntVar(&batch, "batch", 0, "samples per forward pass (default: the model's batch_size); the loss is the mean over every sample whatever the batch")
	cmd.Flags().BoolVar(&allowNonfinite, "allow-nonfinite", false, "accept NaN and infinite float inputs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

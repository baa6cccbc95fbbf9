package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

func newDataCmd(stdin io.Reader) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Datasets: write a model's synthetic, teacher-labelled data as a file --data reads",
	}
	cmd.AddCommand(newDataSynthCmd(stdin))
	return cmd
}

// synthChunk is how many samples make one step of the synthetic data that
// data synth draws from: sample i is row i mod synthChunk of step
// ⌊i / synthChunk⌋, so that a sample is a function of its index alone.
const synthChunk = 256

func newDataSynthCmd(stdin io.Reader) *cobra.Command {
	var out string
	var samples, skip int
	cmd := &cobra.Command{
		Use:   "synth MODEL -o FILE.safetensors --samples N",
		Short: "Write N samples of the model's synthetic data (labels from its teacher) as safetensors",
		Long: `Write samples of the model's synthetic data, the data train and run use
without --data: float inputs close to N(0, 1), int inputs uniform in their
range, and the label made by a fixed random teacher of the other inputs (a
function of the model's seed), so that a model can learn it. One tensor per
model input, named after it, samples on the first axis: what --data reads.
--skip K starts at sample K, so that an evaluation set drawn past the
training set holds other samples labelled by the same teacher.`,
		Example: "  graphpipe data synth model.json -o train.safetensors --samples 4096\n  graphpipe data synth model.json -o eval.safetensors --samples 1024 --skip 4096",
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
			ds, err := stage.NewDataset(g)
			if err != nil {
				return err
			}
			if err := writeStream(out, func(w io.Writer) error { return synthWrite(w, g, ds, skip, samples) }); err != nil {
				return inputf("-o %s: cannot write: %v", out, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d samples of %d inputs)\n", out, samples, len(g.Inputs()))
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the safetensors `FILE` to write")
	cmd.Flags().IntVar(&samples, "samples", 1024, "samples to write")
	cmd.Flags().IntVar(&skip, "skip", 0, "start at this sample of the synthetic stream")
	return cmd
}

// synthWrite streams samples [skip, skip+n) of every input, one input at a
// time, a chunk of synthetic steps at a time.
func synthWrite(w io.Writer, g *dag.Graph, ds *stage.Dataset, skip, n int) error {
	var heads []tensor.Head
	for _, in := range g.Inputs() {
		shape := []int{n}
		for _, d := range in.Shape {
			shape = append(shape, int(d))
		}
		dt := "F32"
		if in.DType == dag.Int32 {
			dt = "I32"
		}
		heads = append(heads, tensor.Head{Name: in.Name, Shape: shape, DType: dt})
	}
	meta := map[string]string{"graphpipe": fmt.Sprintf("synthetic data of model %q, seed %d, samples [%d, %d)", g.Name(), g.Seed(), skip, skip+n)}
	return tensor.StreamSafetensors(w, heads, meta, func(h tensor.Head, w io.Writer) error {
		per := tensor.Size(h.Shape[1:])
		buf := make([]byte, 0, 4*per*synthChunk)
		for i := skip; i < skip+n; {
			step, row := i/synthChunk, i%synthChunk
			take := min(synthChunk-row, skip+n-i)
			b, err := ds.Inputs(step, synthChunk, map[string]bool{h.Name: true})
			if err != nil {
				return err
			}
			v := b[h.Name]
			buf = buf[:0]
			for k := row * per; k < (row+take)*per; k++ {
				if v.Ints != nil {
					buf = binary.LittleEndian.AppendUint32(buf, uint32(v.Ints[k]))
				} else {
					buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v.Data[k]))
				}
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
			i += take
		}
		return nil
	})
}

// evalSummary is `graphpipe eval --json`'s object.
type evalSummary struct {
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
			initVals, err := readInit(initPath, g)
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
				return json.NewEncoder(cmd.OutOrStdout()).Encode(evalSummary{Model: g.Name(), Data: dataPath, Samples: r.Samples, Loss: r.Loss, Accuracy: e.Accuracy})
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

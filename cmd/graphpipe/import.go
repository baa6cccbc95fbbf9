package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/internal/atomicfile"
	"github.com/graphpipe/graphpipe/onnx"
)

func newImportCmd(stdin io.Reader) *cobra.Command {
	var out, weights, loss, label, output, name string
	var batch int64
	var opaque bool
	cmd := &cobra.Command{
		Use:   "import MODEL.onnx",
		Short: "Turn an ONNX model into a graphpipe model file and its weights",
		Long: `Read an ONNX model (IR 6 or later, opsets 11 to 18, external data beside it)
and write a graphpipe/model@2 file. The first axis of every graph input and
output is the batch. Weights keep their ONNX initializer names (a PyTorch
export's state_dict keys); --weights writes their values as safetensors, to
start training from with train --init or run --init.

Export from PyTorch with:
  torch.onnx.export(model, args, "model.onnx", input_names=[...], output_names=["output"],
      dynamic_axes={name: {0: "batch"} for every input and output}, opset_version=17,
      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)

A graph that outputs predictions needs --loss; the loss's target becomes an
input named by --label. A node graphpipe cannot compute is refused, one line
per node; --allow-opaque makes such nodes opaque ops instead (priced from
their shapes: the model can be searched and simulated, not trained).`,
		Args: args("MODEL.onnx"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutputs("-o", out, "--weights", weights); err != nil {
				return err
			}
			if batch < 0 {
				return usagef("--batch: must be positive, got %d", batch)
			}
			switch dag.Kind(loss) {
			case "", dag.SoftmaxCrossEntropy, dag.MSE, dag.BCEWithLogits:
			default:
				return usagef("--loss: unknown loss %q (known: softmax_cross_entropy, mse, bce_with_logits)", loss)
			}
			f, path, err := readONNX(a[0], stdin)
			if err != nil {
				return err
			}
			res, err := onnx.Import(f, onnx.Options{Loss: dag.Kind(loss), Label: label, Batch: batch, Output: output, AllowOpaque: opaque, Name: name})
			if err != nil {
				return importError(path, err)
			}
			for _, note := range res.Notes {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", note)
			}
			if weights != "" {
				if err := writeStream(weights, res.WriteWeights); err != nil {
					return fmt.Errorf("--weights %s: %w", weights, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d weights, %s)\n", weights, len(res.Weights), byteText(res.WeightBytes()))
			}
			g, err := dag.Build(res.Model)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "imported %s: %d inputs, %d ops, %d parameters\n", path, len(res.Model.Inputs), len(res.Model.Ops), g.Total().Params)
			return writeOutput(cmd, "-o", out, dag.Write(res.Model))
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "write the model file to `FILE` (default: stdout)")
	cmd.Flags().StringVar(&weights, "weights", "", "write the weights as safetensors to `FILE`")
	cmd.Flags().StringVar(&loss, "loss", "", "append a loss to a graph that outputs predictions: softmax_cross_entropy, mse or bce_with_logits")
	cmd.Flags().StringVar(&label, "label", "label", "the name of the input --loss adds for its target")
	cmd.Flags().Int64Var(&batch, "batch", 0, "the model's batch_size (default: the inputs' fixed batch dim, or 32)")
	cmd.Flags().StringVar(&output, "output", "", "the graph output to train (default: the first)")
	cmd.Flags().BoolVar(&opaque, "allow-opaque", false, "make nodes graphpipe cannot compute opaque ops instead of refusing the model")
	cmd.Flags().StringVar(&name, "name", "", "the model's name (default: the graph's)")
	return cmd
}

// readONNX reads and checks an ONNX file ("-": stdin, external data in the
// working directory).
func readONNX(path string, stdin io.Reader) (*onnx.File, string, error) {
	var f *onnx.File
	var err error
	if path == "-" {
		data, rerr := io.ReadAll(stdin)
		if rerr != nil {
			return nil, "<stdin>", inputf("<stdin>: cannot read: %v", rerr)
		}
		path = "<stdin>"
		f, err = onnx.Read(data, ".", path)
	} else {
		f, err = onnx.ReadFile(path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path { // the file itself: missing, unreadable, not a regular file
		return nil, path, inputf("%s: cannot read: %v", path, pe.Err)
	}
	if err != nil {
		return nil, path, importError(path, err)
	}
	return f, path, nil
}

// importError turns the importer's problems into exit-2 lines naming the file.
func importError(path string, err error) error {
	var es onnx.Errors
	var fe *onnx.FileError
	var ne *onnx.NodeError
	switch {
	case errors.As(err, &es):
		lines := make([]string, len(es))
		for i, e := range es {
			lines[i] = path + ": " + e.Error()
		}
		return &inputError{lines}
	case errors.As(err, &fe), errors.As(err, &ne):
		return inputf("%s: %v", path, err)
	case errors.Is(err, os.ErrNotExist), errors.Is(err, os.ErrPermission):
		return inputf("%s: cannot read: %v", path, cause(err))
	}
	return err
}

// writeStream writes a file atomically from a writer function, buffered
// (internal/atomicfile, 0666 less the umask): a large file is never held in
// memory. An error about path comes without it (the caller names it); one
// of write's about another file keeps that file's name.
func writeStream(path string, write func(io.Writer) error) error {
	err := atomicfile.Write(path, 0o666, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 4<<20)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return pe.Err
	}
	return err
}

// byteText is a size for people.
func byteText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

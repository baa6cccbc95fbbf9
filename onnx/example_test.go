package onnx_test

import (
	"bytes"
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// Import a PyTorch export (a two-tower model with a shared head) and train
// it in one process from its exported weights: what `graphpipe import` and
// `graphpipe train --init` do.
func ExampleImport() {
	f, err := onnx.ReadFile("testdata/models/two_tower.onnx")
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := onnx.Import(f, onnx.Options{Loss: dag.SoftmaxCrossEntropy, Batch: 16, Name: "two-tower"})
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := dag.Build(res.Model)
	if err != nil {
		fmt.Println(err)
		return
	}
	var weights bytes.Buffer // safetensors, under the state_dict's names
	if err := res.WriteWeights(&weights); err != nil {
		fmt.Println(err)
		return
	}
	entries, _, err := tensor.DecodeSafetensors(weights.Bytes())
	if err != nil {
		fmt.Println(err)
		return
	}
	vals, problems := stage.StateOf(g, entries)
	if len(problems) > 0 {
		fmt.Println(problems)
		return
	}
	t, err := stage.NewTrainer(g, stage.TrainOptions{Optimizer: "sgd", LR: 0.1})
	if err != nil {
		fmt.Println(err)
		return
	}
	t.Ex.LoadState(vals)
	fmt.Printf("%s: %d ops, %d weights, loss %s\n", g.Name(), g.NumOps(), len(res.Weights), g.Op(g.Loss()).Kind)
	for step := 0; step < 3; step++ {
		loss, _, err := t.Step(step)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("step %d: loss %.3f\n", step, loss)
	}
	// Output:
	// two-tower: 33 ops, 23 weights, loss softmax_cross_entropy
	// step 0: loss 2.258
	// step 1: loss 2.268
	// step 2: loss 2.290
}

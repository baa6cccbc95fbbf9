package dag_test

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

// A model file in, a checked graph out: shapes inferred per sample, costs
// counted per op.
func ExampleLoad() {
	g, err := dag.Load([]byte(`{
  "format": "graphpipe/model@1", "name": "tiny", "batch_size": 32, "seed": 1,
  "inputs": [
    {"name": "x", "shape": [32], "dtype": "float32"},
    {"name": "label", "shape": [], "dtype": "int32", "range": [0, 8]}
  ],
  "ops": [
    {"name": "fc", "op": "linear", "inputs": ["x"], "attrs": {"out": 64, "bias": true}},
    {"name": "relu", "op": "relu", "inputs": ["fc"]},
    {"name": "head", "op": "linear", "inputs": ["relu"], "attrs": {"out": 8, "bias": true}},
    {"name": "loss", "op": "softmax_cross_entropy", "inputs": ["head", "label"]}
  ]
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	t := g.Total()
	fmt.Printf("%s: %d ops, %d parameters, %.0f forward FLOPs per sample\n", g.Name(), g.NumOps(), t.Params, t.FwdFLOPs)
	for i := 0; i < g.NumOps(); i++ {
		op := g.Op(i)
		fmt.Printf("%-5s %-22s per-sample shape %v, %d parameters\n", op.Name, op.Kind, g.Out(i).Shape, g.Cost(i).Params)
	}
	// Output:
	// tiny: 4 ops, 2632 parameters, 5296 forward FLOPs per sample
	// fc    linear                 per-sample shape [64], 2112 parameters
	// relu  relu                   per-sample shape [64], 0 parameters
	// head  linear                 per-sample shape [8], 520 parameters
	// loss  softmax_cross_entropy  per-sample shape [], 0 parameters
}

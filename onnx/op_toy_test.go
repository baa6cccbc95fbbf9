//go:build toyop

package onnx

import (
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// TestToyOpImports: with its row (op_toy.go), a node of the made-up op type
// Scale2 becomes the toy operator scale2, and the model builds.
func TestToyOpImports(t *testing.T) {
	m := model([]*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4)}, nil,
		[]*onnxpb.NodeProto{nodeOf("Scale2", "s", []string{"x"}, []string{"y"})}, "y")
	res := mustImport(t, m, Options{Loss: dag.MSE})
	if k := opKinds(res); k != "scale2 mse" {
		t.Fatalf("ops %s", k)
	}
	if _, err := dag.Build(res.Model); err != nil {
		t.Fatal(err)
	}
}

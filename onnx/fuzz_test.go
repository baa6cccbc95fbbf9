package onnx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// FuzzImport feeds the reader and the importer arbitrary bytes: nothing
// panics, and every refusal is a typed error of one line per problem.
func FuzzImport(f *testing.F) {
	for _, glob := range []string{"testdata/models/*.onnx", "testdata/broken/*.onnx"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil && len(data) < 1<<20 {
				f.Add(data)
			}
		}
	}
	x := []*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4)}
	f.Add(marshal(model(x, []*onnxpb.TensorProto{floatInit("w", []int64{4, 3}), intInit("shape", 0, -1)}, []*onnxpb.NodeProto{
		nodeOf("MatMul", "m", []string{"x", "w"}, []string{"h"}),
		nodeOf("Reshape", "r", []string{"h", "shape"}, []string{"y"}),
		nodeOf("Softmax", "s", []string{"y"}, []string{"z"}, intAttr("axis", -1))}, "z")))
	// Two dangling inputs: a list of problems, one line each.
	f.Add(marshal(model(x, nil, []*onnxpb.NodeProto{
		nodeOf("Add", "a", []string{"x", "nowhere"}, []string{"h"}),
		nodeOf("Add", "b", []string{"x", "elsewhere"}, []string{"k"}),
		nodeOf("Add", "c", []string{"h", "k"}, []string{"z"})}, "z")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Read(data, t.TempDir(), "fuzz.onnx")
		if err == nil {
			var res *Result
			if res, err = Import(file, Options{Loss: dag.MSE}); err == nil {
				if _, err := dag.Build(res.Model); err != nil {
					t.Fatalf("an imported model does not build: %v", err)
				}
				return
			}
		}
		var ne *NodeError
		var fe *FileError
		var es Errors
		// Errors is asked for first and on its own: errors.As finds a
		// NodeError inside Errors too, and a short-circuited || would leave es
		// nil for a list of problems.
		isList := errors.As(err, &es)
		if !isList && !errors.As(err, &ne) && !errors.As(err, &fe) && !strings.Contains(err.Error(), "does not validate") {
			t.Fatalf("untyped error %T: %v", err, err)
		}
		if !isList && strings.Contains(err.Error(), "\n") {
			t.Fatalf("a single problem spans lines: %q", err)
		}
	})
}

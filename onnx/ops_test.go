package onnx

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// TestOpTable: every row has a handler, reads a non-empty range of the
// opsets a file may import, and names each attribute once.
func TestOpTable(t *testing.T) {
	if got := SupportedOps(); !slices.IsSorted(got) || len(got) != len(ops) {
		t.Fatalf("SupportedOps: %v", got)
	}
	for name, s := range ops {
		if s.handle == nil {
			t.Errorf("%s: no handler", name)
		}
		if s.opsets[0] < MinOpset || s.opsets[1] > MaxOpset || s.opsets[0] > s.opsets[1] {
			t.Errorf("%s: opsets %v, not a range within %d..%d", name, s.opsets, MinOpset, MaxOpset)
		}
		words := strings.Fields(s.attrs)
		slices.Sort(words)
		if len(slices.Compact(words)) != len(strings.Fields(s.attrs)) {
			t.Errorf("%s: attributes %q name one twice", name, s.attrs)
		}
	}
}

// TestOpsetOutsideRow: a node of an op type read in other opsets than the
// file's is refused, naming the row's range (here Relu's, narrowed for the
// test to opset 18 alone).
func TestOpsetOutsideRow(t *testing.T) {
	old := ops["Relu"]
	t.Cleanup(func() { ops["Relu"] = old })
	narrowed := old
	narrowed.opsets = [2]int64{18, 18}
	ops["Relu"] = narrowed
	m := model([]*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4)}, nil,
		[]*onnxpb.NodeProto{nodeOf("Relu", "r", []string{"x"}, []string{"y"})}, "y")
	f, err := Read(marshal(m), t.TempDir(), "test.onnx")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Import(f, Options{Loss: dag.MSE})
	var ne *NodeError
	want := "graphpipe reads op type Relu in opsets 18 to 18, not 17"
	if !errors.As(err, &ne) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want a NodeError containing %q", err, want)
	}
	ops["Relu"] = old
	if _, err := Import(f, Options{Loss: dag.MSE}); err != nil {
		t.Fatalf("with Relu's own row: %v", err)
	}
}

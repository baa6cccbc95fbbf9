package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// TestReadersRefuseWhatIsNotAFile: no reader of a user's file opens a
// FIFO (whose open waits for a writer for ever), /dev/zero (which never
// ends) or a directory: the model, a plan, a device profile, op times,
// --init, --data and --eval-data, a trace, run summaries, an ONNX model and
// its external data each exit 2 within a second, saying "not a regular
// file" and naming the flag or file.
func TestReadersRefuseWhatIsNotAFile(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	npz := filepath.Join(dir, "data.npz")
	syscall.Mkfifo(npz, 0o644)
	// an ONNX model whose weight is external data in a FIFO beside it
	onnxDir := t.TempDir()
	syscall.Mkfifo(filepath.Join(onnxDir, "w.bin"), 0o644)
	w := &onnxpb.TensorProto{Name: proto.String("fc.weight"), Dims: []int64{4, 3}, DataType: proto.Int32(1),
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String("w.bin")}}}
	dims := []*onnxpb.TensorShapeProto_Dimension{{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}}, {Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 4}}}
	x := &onnxpb.ValueInfoProto{Name: proto.String("x"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: &onnxpb.TensorShapeProto{Dim: dims}}}}}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("g"), Input: []*onnxpb.ValueInfoProto{x}, Initializer: []*onnxpb.TensorProto{w},
			Node:   []*onnxpb.NodeProto{{OpType: proto.String("MatMul"), Name: proto.String("fc"), Input: []string{"x", "fc.weight"}, Output: []string{"y"}}},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y")}}}}
	b, _ := proto.Marshal(m)
	ext := filepath.Join(onnxDir, "m.onnx")
	os.WriteFile(ext, b, 0o644)
	type tc struct {
		name string
		args []string
	}
	var cases []tc
	for _, bad := range []string{fifo, "/dev/zero", dir} {
		cases = append(cases,
			tc{"model " + bad, []string{"validate", bad}},
			tc{"plan " + bad, []string{"explain", bad}},
			tc{"device profile " + bad, []string{"search", model, "--devices", "2", "--device", bad}},
			tc{"op times " + bad, []string{"search", model, "--devices", "2", "--device", "cpu", "--op-times", bad}},
			tc{"--init " + bad, []string{"train", model, "--steps", "1", "--init", bad}},
			tc{"import " + bad, []string{"import", bad, "-o", filepath.Join(dir, "out.json")}},
		)
	}
	cases = append(cases,
		tc{"train's model", []string{"train", fifo, "--steps", "1"}},
		tc{"run's plan", []string{"run", fifo, "--model", model, "--steps", "1"}},
		tc{"run's --model", []string{"run", plan, "--model", fifo, "--steps", "1"}},
		tc{"--data", []string{"train", model, "--steps", "1", "--data", fifo}},
		tc{"--data npz", []string{"train", model, "--steps", "1", "--data", npz}},
		tc{"--data /dev/zero", []string{"train", model, "--steps", "1", "--data", "/dev/zero"}},
		tc{"--eval-data", []string{"run", plan, "--model", model, "--steps", "1", "--eval-data", fifo}},
		tc{"--measured", []string{"sim", plan, "--svg", filepath.Join(dir, "t.svg"), "--measured", fifo}},
		tc{"compare", []string{"compare", fifo, fifo}},
		tc{"ONNX external data", []string{"import", ext, "-o", filepath.Join(dir, "ext.json"), "--loss", "mse"}},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var code int
			var errs string
			done := make(chan struct{})
			go func() { code, _, errs = gp(t, "", c.args...); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Second):
				t.Fatalf("%v: still running after a second", c.args)
			}
			if code != 2 || !strings.Contains(errs, "not a regular file") {
				t.Fatalf("%v: exit %d, %q; want 2 and \"not a regular file\"", c.args, code, errs)
			}
		})
	}
}

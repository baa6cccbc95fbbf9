package main

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
	"github.com/graphpipe/graphpipe/tensor"
)

// mlpONNX writes a small ONNX MLP (Gemm, Relu, Gemm) the way PyTorch's
// exporter names things, and returns its path.
func mlpONNX(t *testing.T, dir string, extra ...*onnxpb.NodeProto) string {
	t.Helper()
	w := func(name string, dims ...int64) *onnxpb.TensorProto {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		raw := make([]byte, 4*n)
		for i := int64(0); i < n; i++ {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(i%5)*0.1-0.2))
		}
		return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), RawData: raw}
	}
	dim := func(d any) *onnxpb.TensorShapeProto_Dimension {
		if s, ok := d.(string); ok {
			return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: s}}
		}
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d.(int))}}
	}
	node := func(op, name string, in []string, out string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: in, Output: []string{out}, Attribute: attrs}
	}
	transB := &onnxpb.AttributeProto{Name: proto.String("transB"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)}
	nodes := []*onnxpb.NodeProto{
		node("Gemm", "/fc1/Gemm", []string{"x", "fc1.weight", "fc1.bias"}, "h", transB),
		node("Relu", "/act/Relu", []string{"h"}, "a"),
		node("Gemm", "/fc2/Gemm", []string{"a", "fc2.weight", "fc2.bias"}, "output", transB),
	}
	if len(extra) > 0 {
		nodes[1] = extra[0]
	}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("mlp"), Node: nodes,
			Input: []*onnxpb.ValueInfoProto{{Name: proto.String("x"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
				ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{dim("batch"), dim(6)}}}}}}},
			Output:      []*onnxpb.ValueInfoProto{{Name: proto.String("output")}},
			Initializer: []*onnxpb.TensorProto{w("fc1.weight", 8, 6), w("fc1.bias", 8), w("fc2.weight", 3, 8), w("fc2.bias", 3)}}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "mlp.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestImportThenTrain: import writes a model@2 file and weights under the
// initializers' names; train --init starts from exactly those weights.
func TestImportThenTrain(t *testing.T) {
	dir := t.TempDir()
	src := mlpONNX(t, dir)
	model, weights := filepath.Join(dir, "mlp.json"), filepath.Join(dir, "mlp.safetensors")
	code, _, errs := gp(t, "", "import", src, "-o", model, "--weights", weights, "--loss", "softmax_cross_entropy", "--batch", "8")
	if code != 0 {
		t.Fatalf("import: exit %d\n%s", code, errs)
	}
	g, err := dag.LoadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if g.Version() != 2 || g.BatchSize() != 8 || g.NumOps() != 4 {
		t.Fatalf("model@%d, batch %d, %d ops:\n%s", g.Version(), g.BatchSize(), g.NumOps(), dag.Write(g.Model()))
	}
	data, _ := os.ReadFile(weights)
	entries, _, err := tensor.DecodeSafetensors(data)
	if err != nil || len(entries) != 4 || entries[0].Name != "fc1.bias" || entries[2].Name != "fc2.bias" {
		t.Fatalf("weights %v, %v", entries, err)
	}
	dump := filepath.Join(dir, "dump")
	code, _, errs = gp(t, "", "train", model, "--init", weights, "--steps", "2", "--micro-batch", "4", "--dump", dump)
	if code != 0 {
		t.Fatalf("train --init: exit %d\n%s", code, errs)
	}
	init, _ := os.ReadFile(filepath.Join(dump, "init.safetensors"))
	got, _, err := tensor.DecodeSafetensors(init)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		for j, v := range e.F32 {
			if v != entries[i].F32[j] {
				t.Fatalf("%s[%d] started at %v, the init file holds %v", e.Name, j, v, entries[i].F32[j])
			}
		}
	}
}

// TestImportRefusals: bad files and flags exit 2 with a line naming the
// node or field, and write nothing.
func TestImportRefusals(t *testing.T) {
	dir := t.TempDir()
	good := mlpONNX(t, dir)
	celu := &onnxpb.NodeProto{OpType: proto.String("Celu"), Name: proto.String("/act/Celu"), Input: []string{"h"}, Output: []string{"a"}}
	bad := mlpONNX(t, t.TempDir(), celu)
	empty := filepath.Join(dir, "empty.onnx")
	os.WriteFile(empty, nil, 0o644)
	junk := filepath.Join(dir, "junk.onnx")
	os.WriteFile(junk, []byte("this is not protobuf at all \xff\xff\xff\xff"), 0o644)
	data, _ := os.ReadFile(good)
	cut := filepath.Join(dir, "cut.onnx")
	os.WriteFile(cut, data[:len(data)/2], 0o644)
	out := filepath.Join(dir, "out.json")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"import", bad, "-o", out, "--loss", "mse"}, `node "/act/Celu" (Celu, domain ai.onnx, opset 17): op type Celu is not one graphpipe reads`},
		{[]string{"import", good, "-o", out}, "--loss: the graph outputs predictions"},
		{[]string{"import", good, "-o", out, "--loss", "hinge"}, `--loss: unknown loss "hinge"`},
		{[]string{"import", good, "-o", out, "--loss", "mse", "--output", "logits"}, `--output: the graph has no output "logits" (it has output)`},
		{[]string{"import", empty, "-o", out, "--loss", "mse"}, "the file is empty"},
		{[]string{"import", junk, "-o", out, "--loss", "mse"}, "not an ONNX model"},
		{[]string{"import", cut, "-o", out, "--loss", "mse"}, "not an ONNX model"},
		{[]string{"import", filepath.Join(dir, "missing.onnx"), "-o", out}, "cannot read"},
		{[]string{"import", good, "-o", "/nonexistent/dir/out.json", "--loss", "mse"}, "-o /nonexistent/dir/out.json: directory"},
		{[]string{"import", good, "-o", out, "--loss", "mse", "--batch", "-3"}, "--batch: must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			code, stdout, errs := gp(t, "", tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) || stdout != "" {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 saying %q", code, errs, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("a refused import wrote its output")
			}
		})
	}
}

// TestInitRefusals: an init file that does not fit the model is exit 2,
// one line per name at fault.
func TestInitRefusals(t *testing.T) {
	dir := t.TempDir()
	model, weights := filepath.Join(dir, "mlp.json"), filepath.Join(dir, "w.safetensors")
	if code, _, errs := gp(t, "", "import", mlpONNX(t, dir), "-o", model, "--weights", weights, "--loss", "mse"); code != 0 {
		t.Fatal(errs)
	}
	data, _ := os.ReadFile(weights)
	entries, _, _ := tensor.DecodeSafetensors(data)
	// drop fc1.bias, reshape fc2.weight, add a stranger
	var bad []tensor.Named
	for _, e := range entries {
		switch e.Name {
		case "fc1.bias":
		case "fc2.weight":
			bad = append(bad, tensor.Named{Name: e.Name, Shape: []int{8, 3}, F32: e.F32})
		default:
			bad = append(bad, e)
		}
	}
	bad = append(bad, tensor.Named{Name: "fc3.weight", Shape: []int{1}, F32: []float32{1}})
	b, _ := tensor.EncodeSafetensors(bad, nil)
	badPath := filepath.Join(dir, "bad.safetensors")
	os.WriteFile(badPath, b, 0o644)
	for _, cmd := range [][]string{{"train", model, "--steps", "1"}, {"run", model, "--devices", "2", "--device", "cpu", "--steps", "1"}} {
		code, _, errs := gp(t, "", append(cmd, "--init", badPath)...)
		for _, want := range []string{`"fc1.bias" is missing`, `"fc2.weight" has shape [8 3], the model's is [3, 8]`, `"fc3.weight" is not a parameter or buffer`} {
			if code != 2 || !strings.Contains(errs, want) {
				t.Errorf("%s: exit %d, stderr:\n%s\nwant exit 2 saying %q", cmd[0], code, errs, want)
			}
		}
	}
	if code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--init", weights, "--resume", dir); code != 2 || !strings.Contains(errs, "--init and --resume") {
		t.Errorf("--init with --resume: exit %d\n%s", code, errs)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// imageNodeONNX writes a one-node ONNX graph reading x [batch, 2, 8, 8] and
// the given float initializers (filled with 1), and returns its path.
func imageNodeONNX(t *testing.T, node *onnxpb.NodeProto, inits map[string][]int64) string {
	t.Helper()
	var ts []*onnxpb.TensorProto
	for _, name := range node.Input[1:] {
		dims := inits[name]
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = 1
		}
		ts = append(ts, &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: vals})
	}
	dim := func(v int64) *onnxpb.TensorShapeProto_Dimension {
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}}
	}
	batch := &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}}
	x := &onnxpb.ValueInfoProto{Name: proto.String("x"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
		ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{batch, dim(2), dim(8), dim(8)}}}}}}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("one"), Node: []*onnxpb.NodeProto{node}, Input: []*onnxpb.ValueInfoProto{x},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y")}}, Initializer: ts}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "one.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestImportAttributeFaults: an attribute value graphpipe cannot compute
// with exits 2 naming the file, the node and the attribute: never a panic
// (strides 0 divided by zero) nor "a bug in the importer" with exit 1.
func TestImportAttributeFaults(t *testing.T) {
	ints := func(name string, v ...int64) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
	}
	float := func(name string, v float32) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
	}
	node := func(op, name string, in []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: in, Output: []string{"y"}, Attribute: attrs}
	}
	convW := map[string][]int64{"conv.weight": {4, 2, 3, 3}}
	bnW := map[string][]int64{"bn.weight": {2}, "bn.bias": {2}, "bn.running_mean": {2}, "bn.running_var": {2}}
	bnIn := []string{"x", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}
	cases := []struct {
		name  string
		node  *onnxpb.NodeProto
		inits map[string][]int64
		want  string
	}{
		{"conv strides 0", node("Conv", "/conv/Conv", []string{"x", "conv.weight"}, ints("strides", 0, 0)), convW, `node "/conv/Conv" (Conv, domain ai.onnx, opset 17): attribute strides: element 0 must be positive, got 0`},
		{"conv dilations 0", node("Conv", "/conv/Conv", []string{"x", "conv.weight"}, ints("dilations", 1, 0)), convW, `node "/conv/Conv" (Conv, domain ai.onnx, opset 17): attribute dilations: element 1 must be positive`},
		{"average pool strides 0", node("AveragePool", "/pool/AveragePool", []string{"x"}, ints("kernel_shape", 2, 2), ints("strides", 0, 2)), nil, `node "/pool/AveragePool" (AveragePool, domain ai.onnx, opset 17): attribute strides: element 0 must be positive`},
		{"max pool kernel_shape 0", node("MaxPool", "/pool/MaxPool", []string{"x"}, ints("kernel_shape", 0, 2)), nil, `node "/pool/MaxPool" (MaxPool, domain ai.onnx, opset 17): attribute kernel_shape: element 0 must be positive`},
		{"batch norm momentum 5", node("BatchNormalization", "/bn/BatchNormalization", bnIn, float("momentum", 5)), bnW, `node "/bn/BatchNormalization" (BatchNormalization, domain ai.onnx, opset 17): attribute momentum: must be a number in [0, 1], got 5`},
		{"batch norm epsilon negative", node("BatchNormalization", "/bn/BatchNormalization", bnIn, float("epsilon", -1)), bnW, `node "/bn/BatchNormalization" (BatchNormalization, domain ai.onnx, opset 17): attribute epsilon: must be a positive number`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := imageNodeONNX(t, tc.node, tc.inits)
			out := filepath.Join(filepath.Dir(path), "m.json")
			code, stdout, errs := gp(t, "", "import", path, "-o", out, "--loss", "mse")
			if code != 2 || stdout != "" || !strings.HasPrefix(errs, path+": "+tc.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and one line %s: %s", code, errs, path, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("a refused import wrote its output")
			}
		})
	}
}

package onnx

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

func floatAttr(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

// TestAttributeFaults: an attribute value graphpipe cannot compute with (a
// stride, dilation or kernel of 0, a momentum past 1, a negative epsilon) is
// the file's fault: a NodeError naming the node and the ONNX attribute, not
// a panic in the window arithmetic nor a model that fails to validate after
// the import.
func TestAttributeFaults(t *testing.T) {
	img := []*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 2, 8, 8)}
	conv := func(attrs ...*onnxpb.AttributeProto) *onnxpb.ModelProto {
		return model(img, []*onnxpb.TensorProto{floatInit("c.weight", []int64{4, 2, 3, 3})},
			[]*onnxpb.NodeProto{nodeOf("Conv", "c", []string{"x", "c.weight"}, []string{"y"}, attrs...)}, "y")
	}
	pool := func(op string, attrs ...*onnxpb.AttributeProto) *onnxpb.ModelProto {
		return model(img, nil, []*onnxpb.NodeProto{nodeOf(op, "p", []string{"x"}, []string{"y"}, attrs...)}, "y")
	}
	bn := func(attrs ...*onnxpb.AttributeProto) *onnxpb.ModelProto {
		var inits []*onnxpb.TensorProto
		for _, s := range []string{"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"} {
			inits = append(inits, floatInit(s, []int64{2}, 1))
		}
		return model(img, inits, []*onnxpb.NodeProto{nodeOf("BatchNormalization", "bn",
			[]string{"x", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, []string{"y"}, attrs...)}, "y")
	}
	ln := model([]*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4)},
		[]*onnxpb.TensorProto{floatInit("ln.weight", []int64{4}), floatInit("ln.bias", []int64{4})},
		[]*onnxpb.NodeProto{nodeOf("LayerNormalization", "ln", []string{"x", "ln.weight", "ln.bias"}, []string{"y"}, floatAttr("epsilon", -1e-5))}, "y")
	cases := []struct {
		name, node, attr string
		m                *onnxpb.ModelProto
	}{
		{"conv strides 0", "c", "strides", conv(intsAttr("strides", 0, 1))},
		{"conv dilations 0", "c", "dilations", conv(intsAttr("dilations", 1, 0))},
		{"average pool strides 0", "p", "strides", pool("AveragePool", intsAttr("kernel_shape", 2, 2), intsAttr("strides", 0, 0))},
		{"average pool strides 0, ceil", "p", "strides", pool("AveragePool", intsAttr("kernel_shape", 2, 2), intsAttr("strides", 2, 0), intAttr("ceil_mode", 1))},
		{"max pool strides 0", "p", "strides", pool("MaxPool", intsAttr("kernel_shape", 2, 2), intsAttr("strides", 0, 2))},
		{"max pool dilations 0", "p", "dilations", pool("MaxPool", intsAttr("kernel_shape", 2, 2), intsAttr("dilations", 0, 1))},
		{"max pool kernel_shape 0", "p", "kernel_shape", pool("MaxPool", intsAttr("kernel_shape", 0, 2))},
		{"average pool kernel_shape 0", "p", "kernel_shape", pool("AveragePool", intsAttr("kernel_shape", 2, 0), intsAttr("strides", 1, 1))},
		{"batch norm momentum 5", "bn", "momentum", bn(floatAttr("momentum", 5))},
		{"batch norm epsilon negative", "bn", "epsilon", bn(floatAttr("epsilon", -1e-3))},
		{"layer norm epsilon negative", "ln", "epsilon", ln},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Read(marshal(tc.m), t.TempDir(), "test.onnx")
			if err != nil {
				t.Fatal(err)
			}
			_, err = Import(f, Options{Loss: dag.MSE})
			var es Errors
			var ne *NodeError
			if !errors.As(err, &es) || len(es) != 1 || !errors.As(es[0], &ne) {
				t.Fatalf("got %T %v, want one NodeError", err, err)
			}
			if ne.Node != tc.node || !strings.Contains(ne.Msg, "attribute "+tc.attr+":") {
				t.Fatalf("%v: want node %q and attribute %s named", ne, tc.node, tc.attr)
			}
		})
	}
}

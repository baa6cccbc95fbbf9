package onnx

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// TestSymCompare: comparisons, Max and Min of an integer that holds the
// batch size N are folded where N ≥ 1 decides them, and left undecided
// where it does not.
func TestSymCompare(t *testing.T) {
	N := sym{c: 1, n: 1}
	cases := []struct {
		op   string
		a, b sym
		want string // "" undecided
	}{
		{"Equal", N, num(-1), "0"}, // ViT's class token: expand(N, -1, -1)
		{"Equal", num(-1), N, "0"},
		{"Equal", N, N, "1"},
		{"Equal", sym{c: 2, n: 1}, N, "0"},
		{"Equal", sym{c: 2, n: 1}, num(3), "0"}, // 2N is even
		{"Equal", N, num(3), ""},
		{"Equal", N, num(0), "0"},
		{"Equal", sym{c: -1, n: 1}, num(1), "0"},
		{"Greater", N, num(0), "1"},
		{"Less", sym{c: -2, n: 1}, num(-1), "1"},
		{"GreaterOrEqual", N, num(1), "1"},
		{"Greater", N, num(1), ""}, // false at N = 1 only
		{"LessOrEqual", N, num(4), ""},
		{"Max", N, num(1), "N"},
		{"Max", num(1), N, "N"},
		{"Max", num(2), N, ""},
		{"Greater", sym{c: 1 << 62, n: 1}, num(-1), ""}, // too large to reason about
		{"Max", sym{c: 2, n: 1}, num(1), "2·N"},
		{"Min", N, num(0), "0"},
		{"Min", N, sym{c: 3, n: 1}, "N"},
	}
	for _, tc := range cases {
		got, ok := symOp(tc.op, tc.a, tc.b)
		if (tc.want == "") == ok || ok && got.String() != tc.want {
			t.Errorf("%s(%v, %v) = %v, %v; want %q", tc.op, tc.a, tc.b, got, ok, tc.want)
		}
	}
}

// TestClassTokenExpand: torchvision's ViT prepends a class token with
// class_token.expand(N, -1, -1), which the exporter writes as its shape
// [N, -1, -1] compared with -1 (Equal), the -1s replaced by 1 (Where) and
// an Expand of the weight over the batch; the importer folds the shape
// and makes the token a parameter given the batch, concatenated before
// the patches. It refused "Equal of N and -1".
func TestClassTokenExpand(t *testing.T) {
	x := []*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4, 8)}
	inits := []*onnxpb.TensorProto{floatInit("class_token", []int64{1, 1, 8}), intInit("zero", 0), intInit("axes", 0),
		intInit("minus1", -1), intInit("flat", -1)}
	one := intInit("one", 1)
	one.Dims = []int64{1}
	nodes := []*onnxpb.NodeProto{
		nodeOf("Shape", "/Shape", []string{"x"}, []string{"shape"}),
		nodeOf("Gather", "/Gather", []string{"shape", "zero"}, []string{"n"}, intAttr("axis", 0)),
		nodeOf("Concat", "/Concat", []string{"n", "minus1", "minus1"}, []string{"target"}, intAttr("axis", 0)),
		nodeOf("Reshape", "/Reshape", []string{"target", "flat"}, []string{"target1"}),
		nodeOf("Shape", "/Shape_1", []string{"target1"}, []string{"tshape"}),
		nodeOf("ConstantOfShape", "/ConstantOfShape", []string{"tshape"}, []string{"ones"}),
		nodeOf("Mul", "/Mul", []string{"ones", "minus1"}, []string{"neg"}),
		nodeOf("Equal", "/Equal", []string{"target1", "neg"}, []string{"keep"}),
		nodeOf("Where", "/Where", []string{"keep", "ones", "target1"}, []string{"expanded"}),
		nodeOf("Expand", "/Expand", []string{"class_token", "expanded"}, []string{"cls"}),
		nodeOf("Concat", "/Concat_2", []string{"cls", "x"}, []string{"y"}, intAttr("axis", 1)),
	}
	m := model(x, append(inits, one), nodes, "y")
	// ConstantOfShape's value: an int64 1, as the exporter writes it
	nodes[5].Attribute = append(nodes[5].Attribute, tensorAttr("value", intInit("", 1)))
	res := mustImport(t, m, Options{Loss: dag.MSE})
	g, err := dag.Build(res.Model)
	if err != nil {
		t.Fatal(err)
	}
	var par, cat *dag.Op
	for i, op := range res.Model.Ops {
		switch op.Kind {
		case dag.Parameter:
			par = &res.Model.Ops[i]
		case dag.Concat:
			cat = &res.Model.Ops[i]
		}
	}
	if par == nil || par.ParamNames["value"] != "class_token" || cat == nil {
		t.Fatalf("no class_token parameter concatenated:\n%s", dag.Write(res.Model))
	}
	out := g.Tensor(cat.Name)
	if !out.Shape.Equal(dag.Shape{5, 8}) {
		t.Fatalf("the token and 4 patches: per-sample %v, want [5 8]:\n%s", out.Shape, dag.Write(res.Model))
	}
}

func tensorAttr(name string, v *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: v}
}

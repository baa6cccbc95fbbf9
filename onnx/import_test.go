package onnx

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

func TestSym(t *testing.T) {
	n, three := sym{1, 1}, num(3)
	if p, ok := n.mul(three); !ok || p != (sym{3, 1}) {
		t.Errorf("N·3 = %v, %v", p, ok)
	}
	if _, ok := n.mul(n); ok {
		t.Error("N·N has no form here, but mul said ok")
	}
	if q, ok := (sym{12, 1}).div(num(4)); !ok || q != (sym{3, 1}) {
		t.Errorf("12N/4 = %v, %v", q, ok)
	}
	if q, ok := (sym{12, 1}).div(sym{4, 1}); !ok || q != num(3) {
		t.Errorf("12N/4N = %v, %v", q, ok)
	}
	if _, ok := (sym{12, 1}).div(num(5)); ok {
		t.Error("12N/5 is not an integer form, but div said ok")
	}
	if _, ok := n.add(num(1)); ok {
		t.Error("N+1 has no form here, but add said ok")
	}
	if s, ok := num(0).add(n); !ok || s != n {
		t.Errorf("0+N = %v, %v", s, ok)
	}
}

// TestWithDims follows where a reshape puts the batch: the per-sample shape
// it makes, or its refusal.
func TestWithDims(t *testing.T) {
	N := func(c int64) sym { return sym{c, 1} }
	cases := []struct {
		name    string
		dims    []int64
		j       int
		a, b    int64
		target  []sym
		canon   dag.Shape
		j2      int
		a2, b2  int64
		refused string
	}{
		{"flatten", []int64{1, 3, 4}, 0, 1, 1, []sym{N(1), num(12)}, dag.Shape{12}, 0, 1, 1, ""},
		{"heads out of the batch", []int64{16, 1, 96}, 1, 1, 1, []sym{num(16), N(4), num(24)}, dag.Shape{16, 4, 24}, 1, 1, 4, ""},
		{"sequence into the batch", []int64{16, 4, 8}, 1, 1, 4, []sym{N(16), num(32)}, dag.Shape{16, 32}, 0, 16, 1, ""},
		{"and back", []int64{16, 32}, 0, 16, 1, []sym{num(16), N(1), num(32)}, dag.Shape{16, 32}, 1, 1, 1, ""},
		{"unsqueeze", []int64{1, 5}, 0, 1, 1, []sym{N(1), num(1), num(5)}, dag.Shape{1, 5}, 0, 1, 1, ""},
		{"merges samples", []int64{1, 6}, 0, 1, 1, []sym{num(2), N(3)}, nil, 0, 0, 0, "moves elements across samples"},
		{"loses the batch", []int64{1, 6}, 0, 1, 1, []sym{num(6)}, nil, 0, 0, 0, "loses the batch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &converter{names: map[string]bool{}}
			v := &value{kind: kAct, dims: tc.dims, j: tc.j, a: tc.a, b: tc.b, t: "x", dtype: dag.Float32}
			out, err := c.withDims("r", v, tc.target)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("got %v, want a refusal saying %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !out.canon().Equal(tc.canon) || out.j != tc.j2 || out.a != tc.a2 || out.b != tc.b2 {
				t.Fatalf("per sample %v, batch in dim %d as %d·N·%d; want %v, %d, %d·N·%d", out.canon(), out.j, out.a, out.b, tc.canon, tc.j2, tc.a2, tc.b2)
			}
			if v.canon().Equal(out.canon()) != (len(c.ops) == 0) {
				t.Fatalf("%d reshape ops for %v → %v", len(c.ops), v.canon(), out.canon())
			}
		})
	}
}

// TestTransposed: a transpose of a tensor whose batch is merged with
// another dim moves both factors together.
func TestTransposed(t *testing.T) {
	c := &converter{names: map[string]bool{}}
	v := &value{kind: kAct, dims: []int64{16, 4, 8}, j: 1, a: 1, b: 4, t: "x", dtype: dag.Float32} // [s, n·h, d]
	out, err := c.transposed("t", v, []int64{1, 0, 2})                                             // [n·h, s, d]
	if err != nil {
		t.Fatal(err)
	}
	if out.j != 0 || !out.canon().Equal(dag.Shape{4, 16, 8}) || len(c.ops) != 1 || !c.ops[0].Attrs.Perm.Equal(dag.Shape{1, 0, 2}) {
		t.Fatalf("batch in %d, per sample %v, ops %+v", out.j, out.canon(), c.ops)
	}
	if _, err := c.transposed("t", v, []int64{0, 0, 1}); err == nil {
		t.Fatal("a perm that repeats an axis was accepted")
	}
}

// TestImportLinearAndGelu: MatMul by a weight plus its bias is one linear,
// keeping the weights' names; the exporter's erf GELU is one gelu.
func TestImportLinearAndGelu(t *testing.T) {
	m := model([]*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4)},
		[]*onnxpb.TensorProto{floatInit("fc.weight", []int64{3, 4}), floatInit("fc.bias", []int64{3}),
			floatInit("sqrt2", nil, float32(math.Sqrt2)), floatInit("one", nil, 1), floatInit("half", nil, 0.5)},
		[]*onnxpb.NodeProto{
			nodeOf("Transpose", "t", []string{"fc.weight"}, []string{"wt"}),
			nodeOf("MatMul", "mm", []string{"x", "wt"}, []string{"h"}),
			nodeOf("Add", "bias", []string{"h", "fc.bias"}, []string{"y"}),
			nodeOf("Div", "d", []string{"y", "sqrt2"}, []string{"y1"}),
			nodeOf("Erf", "e", []string{"y1"}, []string{"y2"}),
			nodeOf("Add", "a", []string{"y2", "one"}, []string{"y3"}),
			nodeOf("Mul", "m1", []string{"y", "y3"}, []string{"y4"}),
			nodeOf("Mul", "m2", []string{"y4", "half"}, []string{"out"}),
		}, "out")
	res := mustImport(t, m, Options{Loss: dag.MSE})
	kinds := opKinds(res)
	if kinds != "linear gelu mse" {
		t.Fatalf("ops %s, want linear gelu mse:\n%s", kinds, dag.Write(res.Model))
	}
	lin := res.Model.Ops[0]
	if lin.Attrs.WeightLayout != "out_in" || !lin.Attrs.Bias || lin.ParamNames["weight"] != "fc.weight" || lin.ParamNames["bias"] != "fc.bias" || lin.Name != "fc" {
		t.Fatalf("linear %+v", lin)
	}
	if len(res.Weights) != 2 {
		t.Fatalf("weights %v, want fc.weight and fc.bias", res.Weights)
	}
}

func mustImport(t *testing.T, m *onnxpb.ModelProto, o Options) *Result {
	t.Helper()
	f, err := Read(marshal(m), t.TempDir(), "test.onnx")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func opKinds(res *Result) string {
	var k []string
	for _, op := range res.Model.Ops {
		k = append(k, string(op.Kind))
	}
	return strings.Join(k, " ")
}

// TestRefusals: each problem is a one-line error naming the node or field.
func TestRefusals(t *testing.T) {
	x := []*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4)}
	cases := []struct {
		name string
		m    *onnxpb.ModelProto
		o    Options
		want string
	}{
		{"softmax over the batch", model(x, nil, []*onnxpb.NodeProto{nodeOf("Softmax", "sm", []string{"x"}, []string{"y"}, intAttr("axis", 0))}, "y"),
			Options{Loss: dag.MSE}, `node "sm" (Softmax, domain ai.onnx, opset 17): the softmax runs along axis 0, which holds the batch`},
		{"unknown op", model(x, nil, []*onnxpb.NodeProto{nodeOf("Celu", "c", []string{"x"}, []string{"y"})}, "y"),
			Options{Loss: dag.MSE}, `node "c" (Celu, domain ai.onnx, opset 17): op type Celu is not one graphpipe reads`},
		{"no loss", model(x, nil, []*onnxpb.NodeProto{nodeOf("Relu", "r", []string{"x"}, []string{"y"})}, "y"),
			Options{}, `--loss: the graph outputs predictions`},
		{"missing input", model(x, nil, []*onnxpb.NodeProto{nodeOf("Add", "a", []string{"x", "w"}, []string{"y"})}, "y"),
			Options{Loss: dag.MSE}, `node "a" (Add, domain ai.onnx, opset 17): input 1 "w" is neither a graph input, an initializer nor another node's output`},
		{"shared weight", model(x, []*onnxpb.TensorProto{floatInit("w", []int64{4, 4})}, []*onnxpb.NodeProto{
			nodeOf("MatMul", "m1", []string{"x", "w"}, []string{"h"}), nodeOf("MatMul", "m2", []string{"h", "w"}, []string{"y"})}, "y"),
			Options{Loss: dag.MSE}, `node "m2" (MatMul, domain ai.onnx, opset 17): takes weight "w", which node "m1" takes too`},
		{"label name taken", model(x, nil, []*onnxpb.NodeProto{nodeOf("Relu", "r", []string{"x"}, []string{"y"})}, "y"),
			Options{Loss: dag.MSE, Label: "x"}, `--label: "x" is already the name`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Read(marshal(tc.m), t.TempDir(), "test.onnx")
			if err == nil {
				_, err = Import(f, tc.o)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v\nwant one line containing %q", err, tc.want)
			}
			var ne *NodeError
			var fe *FileError
			var es Errors
			if !errors.As(err, &ne) && !errors.As(err, &fe) && !errors.As(err, &es) {
				t.Fatalf("%T is not a typed importer error", err)
			}
		})
	}
}

// TestAllowOpaque: an op the importer cannot compute becomes an opaque op
// when asked, priced from the shape the file's value_info gives.
func TestAllowOpaque(t *testing.T) {
	m := model([]*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4)}, nil,
		[]*onnxpb.NodeProto{nodeOf("Celu", "c", []string{"x"}, []string{"y"}), nodeOf("Relu", "r", []string{"y"}, []string{"z"})}, "z")
	m.Graph.ValueInfo = []*onnxpb.ValueInfoProto{tensorInput("y", tFloat, "batch", 4)}
	res := mustImport(t, m, Options{Loss: dag.MSE, AllowOpaque: true})
	if k := opKinds(res); k != "opaque relu mse" {
		t.Fatalf("ops %s", k)
	}
	if op := res.Model.Ops[0]; !op.Attrs.OutShape.Equal(dag.Shape{4}) || op.Attrs.FlopsFwd != 8 {
		t.Fatalf("opaque %+v", op.Attrs)
	}
}

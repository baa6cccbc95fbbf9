package onnx

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx/onnxpb"
)

// TestImportHardSigmoidAndHardSwish: MobileNetV3's activations become
// hard_sigmoid (ONNX's slope and offset written out, its defaults 0.2 and
// 0.5 where the node gives none) and hard_swish.
func TestImportHardSigmoidAndHardSwish(t *testing.T) {
	m := model([]*onnxpb.ValueInfoProto{tensorInput("x", tFloat, "batch", 4)}, nil,
		[]*onnxpb.NodeProto{
			nodeOf("HardSigmoid", "hs", []string{"x"}, []string{"a"}, floatAttr("alpha", 0.25)),
			nodeOf("HardSwish", "hw", []string{"a"}, []string{"b"}),
			nodeOf("HardSigmoid", "hd", []string{"b"}, []string{"y"}),
		}, "y")
	res := mustImport(t, m, Options{Loss: dag.MSE})
	if k := opKinds(res); k != "hard_sigmoid hard_swish hard_sigmoid mse" {
		t.Fatalf("ops %s", k)
	}
	for i, want := range [][2]float64{{0.25, 0.5}, {}, {0.2, 0.5}} {
		a := res.Model.Ops[i].Attrs
		if want != ([2]float64{}) && (math.Abs(a.Alpha-want[0]) > 1e-7 || a.Beta != want[1]) {
			t.Errorf("op %d: alpha %g, beta %g, want %g, %g", i, a.Alpha, a.Beta, want[0], want[1])
		}
	}
	if _, err := dag.Build(res.Model); err != nil {
		t.Fatal(err)
	}
}

// TestFoldHard: both fold on constants as the kernels compute them.
func TestFoldHard(t *testing.T) {
	x := floatConst([]int64{5}, []float64{-4, -3, 0, 1.5, 4})
	sw, err := foldUnary("HardSwish", x)
	if err != nil {
		t.Fatal(err)
	}
	sg, err := foldHardSigmoid(x, 0.2, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	wantSw := []float64{0, 0, 0, 1.5 * 4.5 / 6, 4}
	wantSg := []float64{0, 0, 0.5, 0.8, 1}
	for i := range wantSw {
		if math.Abs(sw.floats[i]-wantSw[i]) > 1e-12 || math.Abs(sg.floats[i]-wantSg[i]) > 1e-12 {
			t.Errorf("element %d: hard_swish %g (want %g), hard_sigmoid %g (want %g)", i, sw.floats[i], wantSw[i], sg.floats[i], wantSg[i])
		}
	}
	if _, err := foldHardSigmoid(intConst([]int64{1}, []sym{num(2)}), 0.2, 0.5); err == nil {
		t.Error("HardSigmoid of integers folded")
	}
}

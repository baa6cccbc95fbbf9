package bench

import (
	"bytes"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/onnx"
	"github.com/graphpipe/graphpipe/tensor"
)

// TestGeneratedTransformerImports: a small instance of the benchmark's
// transformer imports (its attention through the exporter's reshapes and
// transposes, its GELU recognised), counts the parameters it declares, and
// its weights come back from the external data file intact.
func TestGeneratedTransformerImports(t *testing.T) {
	spec := TransformerSpec{Layers: 2, Width: 16, Heads: 4, Vocab: 50, Seq: 6, Classes: 3}
	path, bytesOut, err := WriteTransformer(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if bytesOut != 4*spec.Params() {
		t.Fatalf("wrote %d bytes of weights, %d parameters", bytesOut, spec.Params())
	}
	f, err := onnx.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := onnx.Import(f, onnx.Options{Loss: dag.SoftmaxCrossEntropy})
	if err != nil {
		t.Fatal(err)
	}
	g, err := dag.Build(res.Model)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Total().Params; got != spec.Params() {
		t.Errorf("the imported model has %d parameters, the spec %d", got, spec.Params())
	}
	kinds := map[dag.Kind]int{}
	for _, op := range res.Model.Ops {
		kinds[op.Kind]++
	}
	if kinds[dag.GELU] != 2 || kinds[dag.LayerNorm] != 5 || kinds[dag.MatMul] != 4 || kinds[dag.Linear] != 9 {
		t.Errorf("ops by kind %v", kinds)
	}
	var buf bytes.Buffer
	if err := res.WriteWeights(&buf); err != nil {
		t.Fatal(err)
	}
	entries, _, err := tensor.DecodeSafetensors(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name == "h.1.ln_2.weight" && (e.F32[0] != 1 || e.F32[15] != 1) {
			t.Errorf("%s = %v, written as ones", e.Name, e.F32)
		}
	}
}

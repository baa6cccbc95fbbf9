package stage

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
)

// goldenCase is one op's forward and backward as PyTorch computed them
// (testdata/torch/gen_golden.py, committed beside its output).
type goldenCase struct {
	Name   string               `json:"name"`
	Inputs string               `json:"inputs"`
	Op     string               `json:"op"`
	Values map[string][]float64 `json:"values"`
	Params map[string][]float64 `json:"params"`
	W      []float64            `json:"w"`
	Y      []float64            `json:"y"`
	Grads  map[string][]float64 `json:"grads"`
}

// TestAgainstPyTorch checks every op's float32 forward and backward against
// PyTorch's values: max|ours − torch| ≤ 1e-4 · max|torch| per tensor.
func TestAgainstPyTorch(t *testing.T) {
	data, err := os.ReadFile("testdata/torch/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 20 {
		t.Fatalf("only %d golden cases", len(file.Cases))
	}
	kinds := map[dag.Kind]bool{}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			g, i := oneOp(t, opCase{c.Name, c.Inputs, c.Op})
			kinds[g.Op(i).Kind] = true
			k, err := newKernel[float32](g, i, &runCtx{})
			if err != nil {
				t.Fatal(err)
			}
			var x, gx []*Value[float32]
			for _, in := range g.OpInputs(i) {
				shape := append([]int{3}, toInts(in.Shape)...)
				v := &Value[float32]{Shape: shape}
				vals := c.Values[in.Name]
				if in.DType == dag.Int32 {
					v.Ints = make([]int32, len(vals))
					for j, f := range vals {
						v.Ints[j] = int32(f)
					}
					gx = append(gx, nil)
				} else {
					v.Data = f32(vals)
					gx = append(gx, NewValue[float32](shape...))
				}
				x = append(x, v)
			}
			var p, gp []*Value[float32]
			for _, prm := range g.Params(i) {
				v := &Value[float32]{Shape: toInts(prm.Shape), Data: f32(c.Params[prm.Name])}
				p = append(p, v)
				gp = append(gp, NewValue[float32](v.Shape...))
			}
			y, st, err := k.forward(x, p)
			if err != nil {
				t.Fatal(err)
			}
			close(t, "y", y.Data, c.Y)
			k.backward(&Value[float32]{Shape: y.Shape, Data: f32(c.W)}, x, p, y, st, gx, gp)
			for j, in := range g.OpInputs(i) {
				if want, ok := c.Grads["input:"+in.Name]; ok && gx[j] != nil {
					close(t, "grad of "+in.Name, gx[j].Data, want)
				}
			}
			for j, prm := range g.Params(i) {
				want, ok := c.Grads["param:"+prm.Name]
				if !ok {
					t.Fatalf("no golden gradient for %s", prm.Name)
				}
				close(t, "grad of "+prm.Name, gp[j].Data, want)
			}
		})
	}
	for _, k := range dag.Kinds() {
		if k != dag.Opaque && k.Since() == 1 && !kinds[k] {
			t.Errorf("no golden case for %s", k)
		}
	}
}

func f32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, f := range v {
		out[i] = float32(f)
	}
	return out
}

func close(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, PyTorch has %d", what, len(got), len(want))
	}
	scale, worst := 0.0, 0.0
	for i := range want {
		scale = math.Max(scale, math.Abs(want[i]))
		worst = math.Max(worst, math.Abs(float64(got[i])-want[i]))
	}
	if worst > 1e-4*math.Max(scale, 1e-6) {
		t.Fatalf("%s: differs from PyTorch by %.3g (largest value %.3g)", what, worst, scale)
	}
}

package kernel

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
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
	// Buffers are the op's buffers before the forward pass, BuffersAfter
	// after it (batch_norm's running statistics), by slot.
	Buffers      map[string][]float64 `json:"buffers"`
	BuffersAfter map[string][]float64 `json:"buffers_after"`
	W            []float64            `json:"w"`
	Y            []float64            `json:"y"`
	Grads        map[string][]float64 `json:"grads"`
}

// goldenCases reads every testdata/torch/golden*.json file.
func goldenCases(t *testing.T) []goldenCase {
	files, err := filepath.Glob("testdata/torch/golden*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	var all []goldenCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var file struct {
			Cases []goldenCase `json:"cases"`
		}
		if err := json.Unmarshal(data, &file); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, file.Cases...)
	}
	return all
}

// TestAgainstPyTorch checks every op's float32 forward and backward (and the
// buffers a forward updates) against PyTorch's values: max|ours − torch| ≤
// 1e-4 · max|torch| per tensor.
func TestAgainstPyTorch(t *testing.T) {
	cases := goldenCases(t)
	if len(cases) < 20 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	kinds := map[dag.Kind]bool{}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			g, i := oneOp(t, opCase{c.Name, c.Inputs, c.Op})
			kinds[g.Op(i).Kind] = true
			k, err := New[float32](g, i, &Pass{})
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
			for _, b := range g.Buffers(i) {
				vals, ok := c.Buffers[b.Name]
				if !ok {
					t.Fatalf("no golden buffer %s", b.Name)
				}
				p = append(p, &Value[float32]{Shape: toInts(b.Shape), Data: f32(vals)})
				gp = append(gp, nil)
			}
			y, st, err := k.Forward(x, p)
			if err != nil {
				t.Fatal(err)
			}
			close(t, "y", y.Data, c.Y)
			for j, b := range g.Buffers(i) {
				close(t, "buffer "+b.Name, p[len(g.Params(i))+j].Data, c.BuffersAfter[b.Name])
			}
			k.Backward(&Value[float32]{Shape: y.Shape, Data: f32(c.W)}, x, p, y, st, gx, gp)
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
		if k != dag.Opaque && k != dag.Parameter && k != dag.Constant && !kinds[k] {
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

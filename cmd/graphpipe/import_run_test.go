package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/tensor"
)

// TestImportedRunEqualsTrain: an imported model (PyTorch's two-tower model
// of onnx/testdata/models: attention, convolutions, batch norms, pooling)
// trained as a 3-stage pipeline of worker processes ends with the
// parameters and batch-norm statistics of the single-process run, from the
// same --init weights, within 1e-5.
func TestImportedRunEqualsTrain(t *testing.T) {
	dir := t.TempDir()
	model, weights := filepath.Join(dir, "m.json"), filepath.Join(dir, "w.safetensors")
	if code, _, errs := gp(t, "", "import", "../../onnx/testdata/models/two_tower.onnx", "-o", model, "--weights", weights,
		"--loss", "softmax_cross_entropy", "--batch", "12"); code != 0 {
		t.Fatal(errs)
	}
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	if data, _ := os.ReadFile(plan); !strings.Contains(string(data), `"stages"`) || strings.Count(string(data), `"micro_batch_per_device"`) != 3 && strings.Count(string(data), `"device_micro_batch"`) != 3 {
		t.Fatalf("the plan is not of 3 stages:\n%.400s", data)
	}
	common := []string{"--init", weights, "--steps", "3", "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"}
	one, three := filepath.Join(dir, "train"), filepath.Join(dir, "run")
	if code, _, errs := gp(t, "", append([]string{"train", model, "--micro-batch", "4", "--dump", one}, common...)...); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", append([]string{"run", plan, "--model", model, "--dump", three}, common...)...); code != 0 {
		t.Fatal(errs)
	}
	read := func(path string) map[string][]float32 {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		entries, _, err := tensor.DecodeSafetensors(data)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for _, e := range entries {
			out[e.Name] = e.F32
		}
		return out
	}
	a, b, init := read(filepath.Join(one, "final.safetensors")), read(filepath.Join(three, "final.safetensors")), read(weights)
	if len(a) != len(b) || len(a) != len(init) || a["bn1.running_var"] == nil {
		t.Fatalf("%d, %d and %d tensors; bn1.running_var %v", len(a), len(b), len(init), a["bn1.running_var"])
	}
	moved := 0.0
	for name, want := range a {
		got := b[name]
		scale := 1e-12
		for j := range want {
			scale = math.Max(scale, math.Abs(float64(want[j])))
			moved = math.Max(moved, math.Abs(float64(want[j]-init[name][j])))
		}
		for j := range want {
			if d := math.Abs(float64(got[j] - want[j])); d > 1e-5*scale {
				t.Fatalf("%s[%d]: run %v, train %v", name, j, got[j], want[j])
			}
		}
	}
	if moved == 0 {
		t.Fatal("training changed nothing")
	}
}

package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestPrecisionRefusals: --precision bf16 or tf32 on the cpu backend, and
// an unknown precision, exit 2 naming the flag, in train, run and worker.
func TestPrecisionRefusals(t *testing.T) {
	model := smallModel(t, "mlp")
	for _, c := range [][]string{
		{"train", model, "--steps", "1", "--precision", "bf16"},
		{"train", model, "--steps", "1", "--precision", "tf32"},
		{"run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--precision", "tf32"},
		{"run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--precision", "bf16"},
		{"worker", "--nats", "nats://127.0.0.1:1", "--run", "x", "--precision", "bf16"},
		{"train", model, "--steps", "1", "--backend", "cuda-emulator", "--precision", "fp8"},
	} {
		code, _, errs := gp(t, "", c...)
		if code != 2 || !strings.Contains(errs, c[len(c)-1]) || !strings.Contains(errs, "--precision") || strings.Count(strings.TrimSpace(errs), "\n") > 1 {
			t.Errorf("%s: exit %d, %q", strings.Join(c, " "), code, errs)
		}
	}
}

// TestPrecisionTF32Emulated: train --precision tf32 on the CUDA emulator
// runs its products on TF32-rounded operands: losses close to fp32's, not
// equal to them.
func TestPrecisionTF32Emulated(t *testing.T) {
	needEmulator(t)
	model := smallModel(t, "mlp")
	losses := map[string][]float64{}
	for _, p := range []string{"fp32", "tf32"} {
		code, out, errs := gp(t, "", "train", model, "--steps", "3", "--backend", "cuda-emulator", "--precision", p, "--json")
		if code != 0 {
			t.Fatalf("--precision %s: exit %d: %s", p, code, errs)
		}
		var r struct{ Losses []float64 }
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Losses) != 3 {
			t.Fatalf("--precision %s: %v: %s", p, err, out)
		}
		losses[p] = r.Losses
	}
	same := true
	for i, l := range losses["fp32"] {
		d := math.Abs(losses["tf32"][i]-l) / math.Abs(l)
		if d > 1e-2 {
			t.Errorf("step %d: tf32 loss %v, fp32 %v: relative difference %.3g, over 1e-2", i, losses["tf32"][i], l, d)
		}
		same = same && losses["tf32"][i] == l
	}
	if same {
		t.Errorf("tf32's losses equal fp32's bit for bit (%v): the products were not rounded", losses["fp32"])
	}
}

// TestPrecisionPlanned: search --precision prices a plan in it, which the
// plan file, --json and explain say; a device without the precision's rate
// is exit 2 naming both; run trains a plan in the plan's precision, and
// refuses a --precision that contradicts it.
func TestPrecisionPlanned(t *testing.T) {
	dir := t.TempDir()
	model := smallModel(t, "mmt")
	bf16 := dir + "/bf16.json"
	code, out, errs := gp(t, "", "search", model, "--devices", "2", "--device", "h100", "--precision", "bf16", "--json", "-o", bf16)
	if code != 0 {
		t.Fatal(errs)
	}
	var s struct{ Precision string }
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Precision != "bf16" {
		t.Fatalf("search --json: %v: %s", err, out)
	}
	if !strings.Contains(readFile(t, bf16), `"precision": "bf16"`) {
		t.Error("the plan file does not record bf16")
	}
	if code, out, errs := gp(t, "", "explain", bf16); code != 0 || !strings.Contains(out, "precision   bf16: matrix products at 989 TFLOP/s") {
		t.Errorf("explain: exit %d: %s%s", code, out, errs)
	}
	code, _, errs = gp(t, "", "search", model, "--devices", "2", "--device", "v100", "--precision", "bf16")
	if code != 2 || !strings.Contains(errs, "--precision: device v100 has no bf16 rate") {
		t.Errorf("v100 in bf16: exit %d, %q", code, errs)
	}
	cpuPlan := dir + "/cpu-bf16.json"
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "--precision", "bf16", "-o", cpuPlan); code != 0 {
		t.Fatal(errs)
	}
	code, _, errs = gp(t, "", "run", cpuPlan, "--model", model, "--steps", "1", "--backend", "cuda-emulator", "--precision", "fp32")
	if code != 2 || !strings.Contains(errs, "is priced in bf16") {
		t.Errorf("run of a bf16 plan with --precision fp32: exit %d, %q", code, errs)
	}
	code, _, errs = gp(t, "", "run", cpuPlan, "--model", model, "--steps", "1")
	if code != 2 || !strings.Contains(errs, "--precision bf16: the cpu backend computes in float32 only") {
		t.Errorf("run of a bf16 plan on the cpu backend: exit %d, %q", code, errs)
	}
}

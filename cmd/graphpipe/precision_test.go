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

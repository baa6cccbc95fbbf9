package main

import (
	"strings"
	"testing"
)

// TestPrecisionRefusals: --precision bf16 on the cpu backend, and an
// unknown precision, exit 2 naming the flag, in train, run and worker.
func TestPrecisionRefusals(t *testing.T) {
	model := smallModel(t, "mlp")
	for _, c := range [][]string{
		{"train", model, "--steps", "1", "--precision", "bf16"},
		{"run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--precision", "bf16"},
		{"worker", "--nats", "nats://127.0.0.1:1", "--run", "x", "--precision", "bf16"},
		{"train", model, "--steps", "1", "--backend", "cuda-emulator", "--precision", "fp8"},
	} {
		code, _, errs := gp(t, "", c...)
		if code != 2 || !strings.Contains(errs, "--precision") || strings.Count(strings.TrimSpace(errs), "\n") > 1 {
			t.Errorf("%s: exit %d, %q", strings.Join(c, " "), code, errs)
		}
	}
}

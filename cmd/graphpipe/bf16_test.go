package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestBF16RunEmulated: on the CUDA emulator, a 3-stage bf16 run of mmt
// small sends half the bytes over its edges that an fp32 run sends
// (device to device, and over NATS its tensors' bytes halved), trains to
// bf16 train's parameters within 1e-4, and bf16 train's loss after 30
// steps is within 3% of fp32's.
func TestBF16RunEmulated(t *testing.T) {
	needEmulator(t)
	dir := t.TempDir()
	model := smallModel(t, "mmt")
	type edge struct {
		From, To  int
		Bytes     int64
		Transport string
	}
	run := func(prec string, extra ...string) []edge {
		args := append([]string{"run", model, "--devices", "3", "--device", "cpu", "--backend", "cuda-emulator", "--steps", "4",
			"--micro-batch", "4", "--precision", prec, "--json", "--dump", filepath.Join(dir, "run-"+prec+strings.Join(extra, ""))}, extra...)
		code, out, errs := gp(t, "", args...)
		if code != 0 {
			t.Fatalf("run --precision %s: exit %d: %s", prec, code, errs)
		}
		var r struct{ Edges []edge }
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Edges) == 0 {
			t.Fatalf("run --json: %v: %s", err, out)
		}
		return r.Edges
	}
	for _, extra := range [][]string{nil, {"--no-ipc"}} {
		f32, b16 := run("fp32", extra...), run("bf16", extra...)
		for i := range f32 {
			ratio := float64(b16[i].Bytes) / float64(f32[i].Bytes)
			t.Logf("edge %d→%d over %s: %d bytes in fp32, %d in bf16 (%.3f)", f32[i].From, f32[i].To, f32[i].Transport, f32[i].Bytes, b16[i].Bytes, ratio)
			want := 0.5
			if f32[i].Transport == "nats" { // each message's header is the same in both
				want = 0.55
			}
			if b16[i].Transport != f32[i].Transport || ratio > want {
				t.Errorf("edge %d: %d bytes in bf16 for %d in fp32 (over %s and %s)", i, b16[i].Bytes, f32[i].Bytes, b16[i].Transport, f32[i].Transport)
			}
		}
	}
	if code, _, errs := gp(t, "", "train", model, "--backend", "cuda-emulator", "--steps", "4", "--micro-batch", "4", "--precision", "bf16",
		"--dump", filepath.Join(dir, "train-bf16")); code != 0 {
		t.Fatal(errs)
	}
	want := readParams(t, filepath.Join(dir, "train-bf16", "final.safetensors"))
	for _, d := range []string{"run-bf16", "run-bf16--no-ipc"} {
		worst := sameParams(t, readParams(t, filepath.Join(dir, d, "final.safetensors")), want, 1e-4)
		t.Logf("%s against bf16 train: largest relative difference %.3g", d, worst)
	}
	final := map[string]float64{}
	for _, prec := range []string{"fp32", "bf16"} {
		code, out, errs := gp(t, "", "train", model, "--backend", "cuda-emulator", "--steps", "30", "--precision", prec, "--json")
		if code != 0 {
			t.Fatal(errs)
		}
		var r struct{ Losses []float64 }
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Losses) != 30 {
			t.Fatalf("train --json: %v: %s", err, out)
		}
		final[prec] = r.Losses[29]
	}
	rel := math.Abs(final["bf16"]-final["fp32"]) / final["fp32"]
	t.Logf("loss after 30 steps: %.6g in bf16, %.6g in fp32 (%.3g relative)", final["bf16"], final["fp32"], rel)
	if rel > 0.03 || final["bf16"] == final["fp32"] {
		t.Errorf("bf16's loss %v against fp32's %v", final["bf16"], final["fp32"])
	}
}

// TestFusedAttentionTrainsEmulated: train --attention fused on the emulator
// trains as unfused does (float32: within 1e-4 a step), a plan searched
// with it says so and runs so, and the cpu backend refuses it.
func TestFusedAttentionTrainsEmulated(t *testing.T) {
	needEmulator(t)
	model := smallModel(t, "mmt")
	losses := map[string][]float64{}
	for _, a := range []string{"unfused", "fused"} {
		code, out, errs := gp(t, "", "train", model, "--backend", "cuda-emulator", "--steps", "3", "--attention", a, "--json")
		if code != 0 {
			t.Fatalf("--attention %s: exit %d: %s", a, code, errs)
		}
		var r struct{ Losses []float64 }
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Losses) != 3 {
			t.Fatalf("%v: %s", err, out)
		}
		losses[a] = r.Losses
	}
	for i, l := range losses["unfused"] {
		if d := math.Abs(losses["fused"][i]-l) / l; d > 1e-4 {
			t.Errorf("step %d: fused loss %v, unfused %v", i+1, losses["fused"][i], l)
		}
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "--attention", "fused", "-o", p); code != 0 {
		t.Fatal(errs)
	}
	if code, out, errs := gp(t, "", "explain", p); code != 0 || !strings.Contains(out, "attention fused") {
		t.Errorf("explain: exit %d: %s%s", code, out, errs)
	}
	if code, _, errs := gp(t, "", "run", p, "--model", model, "--steps", "1"); code != 2 || !strings.Contains(errs, "--attention fused") {
		t.Errorf("a fused plan on the cpu backend: exit %d: %s", code, errs)
	}
	if code, _, errs := gp(t, "", "run", p, "--model", model, "--steps", "2", "--backend", "cuda-emulator"); code != 0 {
		t.Errorf("a fused plan on the emulator: exit %d: %s", code, errs)
	}
}

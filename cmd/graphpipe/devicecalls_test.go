package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// importTwoTower imports PyTorch's two-tower model (a model@2 file:
// attention by hand, conv2d, batch_norm, pools) into dir at batch 12, with
// softmax cross-entropy, and returns its path.
func importTwoTower(t *testing.T, dir string) string {
	t.Helper()
	model := filepath.Join(dir, "two-tower.json")
	if c, _, e := gp(t, "", "import", "../../onnx/testdata/models/two_tower.onnx", "-o", model,
		"--weights", filepath.Join(dir, "two-tower.safetensors"), "--loss", "softmax_cross_entropy", "--batch", "12"); c != 0 {
		t.Fatal(e)
	}
	return model
}

// widened is the two-tower model at path with more parameters and the same
// values crossing its boundary: its embedding table holding 4 times the
// rows (the tokens drawn from 4 times the range) and its first
// convolution 4 times the channels (batch_norm's with them).
func widened(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, in := range m["inputs"].([]any) {
		if in := in.(map[string]any); in["name"] == "tokens" {
			r := in["range"].([]any)
			r[1] = 4 * r[1].(float64)
		}
	}
	for _, op := range m["ops"].([]any) {
		op := op.(map[string]any)
		switch op["name"] {
		case "emb":
			op["attrs"].(map[string]any)["num"] = 4 * op["attrs"].(map[string]any)["num"].(float64)
		case "conv1":
			op["attrs"].(map[string]any)["out"] = 4 * op["attrs"].(map[string]any)["out"].(float64)
		}
	}
	out := path[:len(path)-len(".json")] + "-wide.json"
	data, _ = json.Marshal(m)
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// stepCalls trains model 3 steps in micro-batches of micro on backend (SGD
// with Nesterov momentum, weight decay and clipping) and returns what the
// last step asked of the device (train --json's device_calls).
func stepCalls(t *testing.T, backend, model string, micro string) cuda.Counts {
	t.Helper()
	c, out, e := gp(t, "", "train", model, "--backend", backend, "--steps", "3", "--micro-batch", micro, "--optimizer", "sgd",
		"--lr", "0.05", "--momentum", "0.9", "--nesterov", "--weight-decay", "1e-4", "--clip-grad-norm", "1", "--json")
	if c != 0 {
		t.Fatal(e)
	}
	var sum struct {
		DeviceCalls *cuda.Counts `json:"device_calls"`
		Conv        string       `json:"conv"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.DeviceCalls == nil {
		t.Fatalf("train --json: no device_calls (%v): %s", err, out)
	}
	if sum.Conv != "im2col" && !strings.HasPrefix(sum.Conv, "cudnn ") {
		t.Errorf("train --json: conv %q, want im2col or cudnn VERSION", sum.Conv)
	}
	return *sum.DeviceCalls
}

// TestDeviceCallBudgetsEmulated: a steady-state step of a one-stage model
// on the CUDA path (counted on the emulator, as a GPU would be asked) waits
// for the device at most twice, allocates nothing (device or pinned
// memory), makes no pageable copy, and copies as many bytes whatever the
// parameters: mmt-small and the same model 4 times as wide, the imported
// two-tower and the same with 4 times the embedding rows and first
// convolution's channels, each in 4 micro-batches. On main before the
// training state moved to the device, mmt-small's step waited 163 times and
// copied 469 KB, pageable, growing with its parameters.
func TestDeviceCallBudgetsEmulated(t *testing.T) {
	needEmulator(t)
	checkDeviceCallBudgets(t, "cuda-emulator")
}

// TestDeviceCallBudgetsOnGPU is TestDeviceCallBudgetsEmulated on a GPU
// (skipped without one): the same counts, asked of the driver.
func TestDeviceCallBudgetsOnGPU(t *testing.T) {
	if _, err := cuda.Available(); err != nil {
		t.Skipf("no GPU to run on: %v", err)
	}
	checkDeviceCallBudgets(t, "cuda")
}

func checkDeviceCallBudgets(t *testing.T, backend string) {
	dir := t.TempDir()
	mmt, wide := filepath.Join(dir, "mmt.json"), filepath.Join(dir, "mmt-wide.json")
	if c, _, e := gp(t, "", "models", "export", "mmt", "--preset", "small", "-o", mmt); c != 0 {
		t.Fatal(e)
	}
	if c, _, e := gp(t, "", "models", "export", "mmt", "--preset", "small", "--hidden", "128", "--ffn", "256", "-o", wide); c != 0 {
		t.Fatal(e)
	}
	tower := importTwoTower(t, dir)
	for _, m := range []struct{ name, base, wide, micro string }{{"mmt-small", mmt, wide, "4"}, {"two-tower", tower, widened(t, tower), "3"}} {
		t.Run(m.name, func(t *testing.T) {
			base, wider := stepCalls(t, backend, m.base, m.micro), stepCalls(t, backend, m.wide, m.micro)
			t.Logf("a step: %+v", base)
			t.Logf("wider: %+v", wider)
			for _, c := range []cuda.Counts{base, wider} {
				if c.Syncs > 2 || c.Allocs != 0 || c.HostAllocs != 0 || c.PageableCopies != 0 {
					t.Errorf("a step waited %d times (at most 2), allocated %d device and %d pinned buffers (none), made %d pageable copies (none)",
						c.Syncs, c.Allocs, c.HostAllocs, c.PageableCopies)
				}
			}
			if base.H2DBytes != wider.H2DBytes || base.D2HBytes != wider.D2HBytes {
				t.Errorf("bytes copied a step: %d up and %d down; the wider model's %d and %d", base.H2DBytes, base.D2HBytes, wider.H2DBytes, wider.D2HBytes)
			}
		})
	}
}

// TestFiftyStepsEmulated: 50 steps of train on the CUDA path (the
// emulator), the optimizer, the clip and the norms on the device, end
// within 1e-5 of the CPU backend's parameters (of each tensor's largest
// value): dlrm and candle-uno with AdamW, a cosine schedule after a warmup
// and clipping (dlrm sparing biases and norms from weight decay), mmt-small
// and the imported two-tower with SGD, Nesterov momentum, weight decay and
// clipping, each in micro-batches.
func TestFiftyStepsEmulated(t *testing.T) {
	needEmulator(t)
	dir := t.TempDir()
	adamw := []string{"--optimizer", "adamw", "--lr", "1e-3", "--lr-schedule", "cosine", "--warmup-steps", "5", "--clip-grad-norm", "0.5"}
	nesterov := []string{"--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--nesterov", "--weight-decay", "1e-4", "--clip-grad-norm", "0.5"}
	tower := importTwoTower(t, dir)
	for _, c := range []struct {
		name, model string
		args        []string
	}{
		{"dlrm", smallModel(t, "dlrm"), append(append([]string(nil), adamw...), "--no-decay-bias-norm", "--micro-batch", "8")},
		{"candle-uno", smallModel(t, "candle-uno"), append(append([]string(nil), adamw...), "--micro-batch", "16")},
		{"mmt-small", smallModel(t, "mmt"), append(append([]string(nil), nesterov...), "--micro-batch", "4")},
		{"two-tower", tower, append(append([]string(nil), nesterov...), "--micro-batch", "4", "--init", filepath.Join(dir, "two-tower.safetensors"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, c.name)
			for _, backend := range []string{"cpu", "cuda-emulator"} {
				args := append([]string{"train", c.model, "--steps", "50", "--backend", backend, "--dump", filepath.Join(out, backend)}, c.args...)
				if code, _, e := gp(t, "", args...); code != 0 {
					t.Fatal(e)
				}
			}
			rel := sameParams(t, readParams(t, filepath.Join(out, "cuda-emulator", "final.safetensors")), readParams(t, filepath.Join(out, "cpu", "final.safetensors")), 1e-5)
			t.Logf("%s after 50 steps, the emulator against the CPU: largest difference %.3g of the tensor's largest value", c.name, rel)
		})
	}
}

// TestCheckpointResumeEmulated: on the CUDA path (the emulator), a run that
// checkpoints (the parameters, buffers and optimizer state brought down
// from the devices) and a run resumed from it (uploaded again) end bit for
// bit where one uninterrupted run ends: mmt-small with Adam on 3 stages,
// the imported two-tower (batch_norm's running statistics) with SGD and
// momentum on 3 stages.
func TestCheckpointResumeEmulated(t *testing.T) {
	needEmulator(t)
	dir := t.TempDir()
	tower := importTwoTower(t, dir)
	for _, c := range []struct {
		name, model string
		args        []string
	}{
		{"mmt-small", smallModel(t, "mmt"), []string{"--optimizer", "adam", "--lr", "1e-3"}},
		{"two-tower", tower, []string{"--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, ck := filepath.Join(dir, c.name), filepath.Join(dir, c.name, "ck")
			plan := filepath.Join(out, "plan.json")
			os.MkdirAll(out, 0o755)
			if code, _, e := gp(t, "", "search", c.model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
				t.Fatal(e)
			}
			run := func(steps string, extra ...string) {
				args := append([]string{"run", plan, "--model", c.model, "--backend", "cuda-emulator", "--steps", steps}, c.args...)
				if code, _, e := gp(t, "", append(args, extra...)...); code != 0 {
					t.Fatal(e)
				}
			}
			run("5", "--dump", filepath.Join(out, "straight"))
			run("3", "--checkpoint", ck, "--checkpoint-every", "3")
			run("5", "--resume", ck, "--dump", filepath.Join(out, "resumed"))
			got, want := readParams(t, filepath.Join(out, "resumed", "final.safetensors")), readParams(t, filepath.Join(out, "straight", "final.safetensors"))
			for name, w := range want {
				for i := range w {
					if math.Float32bits(got[name][i]) != math.Float32bits(w[i]) {
						t.Fatalf("%s[%d]: %v resumed, %v straight", name, i, got[name][i], w[i])
					}
				}
			}
		})
	}
}

// TestDivergenceNamedEmulated: on the CUDA path (the emulator), where the
// finite check reads the squared norms on the device, a run that diverges
// still stops at the step with exit 3 naming the stage, the op and the
// parameter or gradient (found on the slow path, the values brought to the
// host), and so does train; a poisoned batch skipped with --on-nonfinite
// skip leaves train where a training that never saw it ends.
func TestDivergenceNamedEmulated(t *testing.T) {
	needEmulator(t)
	model := smallModel(t, "dlrm")
	named := func(errs string) bool {
		return strings.Contains(errs, `op "`) && (strings.Contains(errs, `parameter "`) || strings.Contains(errs, `the gradient of "`)) &&
			(strings.Contains(errs, "NaN") || strings.Contains(errs, "Inf"))
	}
	code, _, errs := gp(t, "", "run", model, "--devices", "3", "--device", "cpu", "--backend", "cuda-emulator", "--optimizer", "sgd", "--lr", "1e6", "--steps", "10")
	if code != exitDiverged || !strings.Contains(errs, "graphpipe: step 3: non-finite values: stage ") || !named(errs) {
		t.Fatalf("run: exit %d:\n%s", code, errs)
	}
	code, _, errs = gp(t, "", "train", model, "--backend", "cuda-emulator", "--optimizer", "sgd", "--lr", "1e6", "--steps", "10")
	if code != exitDiverged || !strings.Contains(errs, "graphpipe: step 3: non-finite values: op ") || !named(errs) {
		t.Fatalf("train: exit %d:\n%s", code, errs)
	}
	dir := t.TempDir()
	want := neverSaw(t, model, 2, 5)
	t.Setenv(stage.PoisonEnv, "2:dense0.x")
	code, _, errs = gp(t, "", "train", model, "--backend", "cuda-emulator", "--micro-batch", "8", "--steps", "5", "--on-nonfinite", "skip", "--dump", filepath.Join(dir, "train"))
	if code != 0 || !strings.Contains(errs, "step 3: op ") || !strings.Contains(errs, "its update skipped (1 in a row)") {
		t.Fatalf("train --on-nonfinite skip: exit %d: %s", code, errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "train", "final.safetensors")), want, 1e-5)
}

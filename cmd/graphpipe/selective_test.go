package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// bnModel is a model with batch_norm: a sample's loss depends on its
// batch, so selective backprop has no per-sample loss to select by.
const bnModel = `{"format":"graphpipe/model@2","batch_size":8,"seed":1,
 "inputs":[{"name":"x","shape":[4],"dtype":"float32"},{"name":"label","shape":[],"dtype":"int32","range":[0,2]}],
 "ops":[{"name":"fc","op":"linear","inputs":["x"],"attrs":{"out":4}},{"name":"bn","op":"batch_norm","inputs":["fc"]},
  {"name":"loss","op":"softmax_cross_entropy","inputs":["bn","label"]}]}`

// TestSelectiveRefused: bad selective backprop settings exit 2 before
// anything trains, each naming its flag.
func TestSelectiveRefused(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	bn := filepath.Join(dir, "bn.json")
	if err := os.WriteFile(bn, []byte(bnModel), 0o644); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", full); code != 0 {
		t.Fatal(errs)
	}
	train := []string{"train", model, "--steps", "1"}
	run := []string{"run", model, "--devices", "2", "--device", "cpu", "--steps", "1"}
	for _, c := range []struct {
		args []string
		says string
	}{
		{append(train, "--selective-backprop", "0"), "--selective-backprop: must be positive"},
		{append(train, "--selective-backprop", "-2"), "--selective-backprop: must be positive"},
		{append(run, "--selective-backprop", "0"), "--selective-backprop: must be positive"},
		{append(train, "--selective-backprop", "2", "--sb-window", "0"), "--sb-window: must be at least 1"},
		{append(run, "--selective-backprop", "2", "--sb-window", "0"), "--sb-window: must be at least 1"},
		{append(train, "--sb-window", "16"), "--sb-window: needs --selective-backprop"},
		{append(train, "--selective-backprop", "2", "--sb-warmup-epochs", "1"), "--sb-warmup-epochs: needs --data"},
		{[]string{"train", bn, "--steps", "1", "--selective-backprop", "2"}, `--selective-backprop: op "bn": batch_norm computes each sample from the others`},
		{[]string{"run", bn, "--devices", "2", "--device", "cpu", "--steps", "1", "--selective-backprop", "2"}, `--selective-backprop: op "bn"`},
		{append(train, "--selective-backprop", "2", "--backend", "cuda-emulator"), "--selective-backprop: runs on the cpu backend only"},
		{[]string{"run", full, "--model", model, "--steps", "1", "--selective-backprop", "2"}, "--selective-backprop: the plan is priced for a backward pass of every sample"},
		{[]string{"search", model, "--devices", "2", "--device", "cpu", "--selective-backprop", "2", "--backprop-fraction", "2"}, "--backprop-fraction: must be in (0, 1]"},
	} {
		code, _, errs := gp(t, "", c.args...)
		if code != 2 || !strings.Contains(errs, c.says) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", c.args, code, errs, c.says)
		}
	}
}

// TestSelectiveRunEqualsTrain: train and a 3-stage run with
// --selective-backprop 2 keep the same samples each step and end with the
// same losses; both report fewer backprop samples than samples, the
// progress lines the kept share, and the plan is priced for it.
func TestSelectiveRunEqualsTrain(t *testing.T) {
	model := smallModel(t, "mlp")
	sb := []string{"--steps", "4", "--micro-batch", "8", "--selective-backprop", "2", "--sb-window", "64", "--json"}
	type summary struct {
		Losses          []float64 `json:"losses"`
		Samples         int       `json:"samples"`
		BackpropSamples int       `json:"backprop_samples"`
		BackpropPerStep []int     `json:"backprop_per_step"`
	}
	var sums [2]summary
	for i, cmd := range [][]string{{"train", model}, {"run", model, "--devices", "3", "--device", "cpu"}} {
		code, out, errs := gp(t, "", append(cmd, sb...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", cmd[0], code, errs)
		}
		if err := json.Unmarshal([]byte(out), &sums[i]); err != nil {
			t.Fatal(err)
		}
		if s := sums[i]; s.Samples != 128 || s.BackpropSamples >= s.Samples || len(s.BackpropPerStep) != 4 {
			t.Fatalf("%s: %d backprop samples of %d, per step %v", cmd[0], s.BackpropSamples, s.Samples, s.BackpropPerStep)
		}
	}
	tr, rn := sums[0], sums[1]
	if !slices.Equal(tr.BackpropPerStep, rn.BackpropPerStep) {
		t.Fatalf("backprop samples per step: train %v, run %v", tr.BackpropPerStep, rn.BackpropPerStep)
	}
	for i := range tr.Losses {
		if math.Abs(tr.Losses[i]-rn.Losses[i]) > 1e-5*math.Abs(tr.Losses[i]) {
			t.Fatalf("loss %d: train %v, run %v", i, tr.Losses[i], rn.Losses[i])
		}
	}
	code, _, errs := gp(t, "", "train", model, "--steps", "2", "--selective-backprop", "2")
	if code != 0 || !strings.Contains(errs, ", backprop ") {
		t.Fatalf("train's progress lines say nothing of the kept share: %s", errs)
	}
	code, out, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--selective-backprop", "2")
	if code != 0 || !strings.Contains(out, "backprop    selective: priced for 33.3% of the samples") {
		t.Fatalf("search's summary: exit %d, %s%s", code, out, errs)
	}
}

// TestSelectiveProgressLine: a run's progress line shows the share of the
// step's samples that had a backward pass, as the coordinator heard it.
func TestSelectiveProgressLine(t *testing.T) {
	var log strings.Builder
	p := &progress{log: &log, every: 1, steps: 2, batch: 30}
	p.start(0)
	p.backprop(0, 10)
	p.step(0, 1.5)
	if !strings.Contains(log.String(), "loss 1.5, backprop 33%,") {
		t.Fatalf("progress line %q", log.String())
	}
}

// TestSelectiveWarmupPastTheRun: a warm-up of more epochs than any run has
// keeps every sample of every step. Its steps (epochs × steps an epoch)
// once overflowed: 2^63 − 1 epochs were refused as "got -4", and 2^62
// epochs of 4 steps became 0, no warm-up at all, and trained selectively.
func TestSelectiveWarmupPastTheRun(t *testing.T) {
	model := smallModel(t, "mlp")
	data := synthData(t, model, 128, 0) // 4 steps an epoch of the model's 32
	for _, epochs := range []string{"9223372036854775807", "4611686018427387904", "2"} {
		code, out, errs := gp(t, "", "train", model, "--data", data, "--epochs", "2", "--selective-backprop", "1", "--sb-warmup-epochs", epochs, "--json")
		if code != 0 {
			t.Fatalf("--sb-warmup-epochs %s: exit %d: %s", epochs, code, errs)
		}
		var sum trainSummary
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			t.Fatal(err)
		}
		if sum.Samples != 256 || sum.BackpropSamples != sum.Samples {
			t.Errorf("--sb-warmup-epochs %s: %d of %d samples had a backward pass, want all 256", epochs, sum.BackpropSamples, sum.Samples)
		}
	}
}

package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// TestRunEqualsTrainClipped: AdamW with weight decay (biases and norm
// weights exempt), a cosine schedule with warm-up and clipping by the
// global norm, active on every step: graphpipe run on 3 stages ends with
// graphpipe train's parameters within 1e-5, at the same rates, having
// clipped by the same norms.
func TestRunEqualsTrainClipped(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	flags := []string{"--micro-batch", "4", "--steps", "4", "--optimizer", "adamw", "--weight-decay", "0.1", "--no-decay-bias-norm",
		"--lr-schedule", "cosine", "--warmup-steps", "1", "--clip-grad-norm", "0.05", "--json"}
	code, out, errs := gp(t, "", append([]string{"run", model, "--devices", "3", "--device", "cpu", "--dump", filepath.Join(dir, "run")}, flags...)...)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	var run runSummary
	if err := json.Unmarshal([]byte(out), &run); err != nil || run.Stages != 3 {
		t.Fatalf("run: %s (%v)", out, err)
	}
	code, out, errs = gp(t, "", append([]string{"train", model, "--dump", filepath.Join(dir, "train")}, flags...)...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, errs)
	}
	var train trainSummary
	if err := json.Unmarshal([]byte(out), &train); err != nil {
		t.Fatalf("train: %s (%v)", out, err)
	}
	want := []float64{0, 1e-3, 1e-3 * 0.5 * (1 + math.Cos(math.Pi/3)), 1e-3 * 0.5 * (1 + math.Cos(2*math.Pi/3))}
	for k := range want {
		if math.Abs(train.LRs[k]-want[k]) > 1e-10 || run.LRs[k] != train.LRs[k] {
			t.Errorf("step %d: rate %v in train, %v in run, want %v", k, train.LRs[k], run.LRs[k], want[k])
		}
		if g := train.GradNorms[k]; g <= 0.05 || math.Abs(run.GradNorms[k]-g) > 1e-5*g {
			t.Errorf("step %d: global norm %v in train, %v in run: want equal, over the clipping's 0.05", k, g, run.GradNorms[k])
		}
	}
	worst := sameParams(t, readParams(t, filepath.Join(dir, "run", "final.safetensors")), readParams(t, filepath.Join(dir, "train", "final.safetensors")), 1e-5)
	t.Logf("norms %.4g; largest relative difference %.3g", train.GradNorms, worst)
}

// TestOptimizerRefusals: optimizer, schedule and clipping flags no run can
// use are exit 2 with a line naming the flag (then usage's hint), before
// anything starts.
func TestOptimizerRefusals(t *testing.T) {
	model := smallModel(t, "mlp")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--optimizer", "lion"}, `--optimizer: unknown optimizer "lion" (known: sgd, adam, adamw)`},
		{[]string{"--optimizer", "sgd", "--nesterov"}, "--nesterov: needs a --momentum above 0"},
		{[]string{"--optimizer", "adamw", "--momentum", "0.9"}, "--momentum: adamw has no momentum"},
		{[]string{"--weight-decay", "-0.1"}, "--weight-decay: must be a number of at least 0"},
		{[]string{"--lr-schedule", "step"}, `--lr-schedule: unknown schedule "step" (known: constant, linear, cosine)`},
		{[]string{"--warmup-steps", "-1"}, "--warmup-steps: must be at least 0"},
		{[]string{"--clip-grad-norm", "-1"}, "--clip-grad-norm: must be a positive number"},
		{[]string{"--clip-grad-norm", "NaN"}, "--clip-grad-norm: must be a positive number"},
	} {
		for _, cmd := range []string{"train", "run"} {
			code, _, errs := gp(t, "", append([]string{cmd, model, "--device", "cpu", "--devices", "2"}, tc.args...)...)
			if cmd == "train" {
				code, _, errs = gp(t, "", append([]string{cmd, model}, tc.args...)...)
			}
			first, _, _ := strings.Cut(errs, "\n")
			if code != 2 || !strings.Contains(first, tc.want) {
				t.Errorf("%s %v: exit %d, %q; want exit 2 and a line with %q", cmd, tc.args, code, errs, tc.want)
			}
		}
	}
}

// TestPlanForTheOptimizer: run plans memory for its optimizer's state,
// from the catalogue: none for SGD, 4 bytes with momentum, 8 for Adam and
// AdamW (issue 20: run --optimizer sgd planned Adam's 8).
func TestPlanForTheOptimizer(t *testing.T) {
	for _, c := range []struct {
		o    stage.TrainOptions
		want int64
	}{
		{stage.TrainOptions{Optimizer: "sgd"}, search.NoOptimizerState},
		{stage.TrainOptions{Optimizer: "sgd", Momentum: 0.9}, 4},
		{stage.TrainOptions{Optimizer: "adam"}, 8},
		{stage.TrainOptions{Optimizer: "adamw"}, 8},
	} {
		sf := searchFlags{device: "cpu", perNode: 4, devices: 2}
		sf.planFor(c.o)
		o, err := sf.options()
		if err != nil || o.OptimizerBytes != c.want {
			t.Errorf("%+v: plans %d bytes of state (%v), want %d", c.o, o.OptimizerBytes, err, c.want)
		}
	}
}

// TestResumeKeepsTheSchedule: a run of 6 steps under a linear schedule with
// warm-up, clipping and AdamW, resumed from its checkpoint at step 3 under
// another plan, ends with the parameters of 6 uninterrupted steps in one
// process: the rate is a function of the step, and the optimizer's step
// count comes back with its state.
func TestResumeKeepsTheSchedule(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	flags := []string{"--micro-batch", "4", "--steps", "6", "--optimizer", "adamw", "--lr-schedule", "linear", "--warmup-steps", "2", "--clip-grad-norm", "0.05"}
	if code, _, errs := gp(t, "", append([]string{"train", model, "--dump", filepath.Join(dir, "straight")}, flags...)...); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", append([]string{"run", model, "--devices", "3", "--device", "cpu", "--checkpoint", ck, "--checkpoint-every", "3"}, flags...)...); code != 0 {
		t.Fatal(errs)
	}
	if err := os.RemoveAll(filepath.Join(ck, "step-00000006")); err != nil {
		t.Fatal(err)
	}
	code, out, errs := gp(t, "", append([]string{"run", model, "--devices", "4", "--device", "cpu", "--strategy", "spp", "--resume", ck,
		"--dump", filepath.Join(dir, "resumed"), "--json"}, flags...)...)
	if code != 0 || !strings.Contains(errs, "resuming at step 3") {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	var sum runSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil || len(sum.LRs) != 3 || sum.LRs[0] != 1e-3*3.0/4 {
		t.Fatalf("the resumed run's rates %v (%v), want those of steps 3-5, from 7.5e-4", sum.LRs, err)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "resumed", "final.safetensors")), readParams(t, filepath.Join(dir, "straight", "final.safetensors")), 1e-5)
}

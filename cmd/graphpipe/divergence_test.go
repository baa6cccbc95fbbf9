package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// TestDivergenceStops: SGD at lr 1e6 on the small DLRM diverges at step 3.
// run, with two restarts allowed and a checkpoint every step, exits 3 once,
// naming the step, the stage, the op and the NaN, spends no restart, and
// leaves only checkpoints whose every value is finite; train exits 3 too.
func TestDivergenceStops(t *testing.T) {
	model := smallModel(t, "dlrm")
	ck := filepath.Join(t.TempDir(), "ck")
	code, out, errs := gp(t, "", "run", model, "--devices", "3", "--device", "cpu", "--optimizer", "sgd", "--lr", "1e6", "--steps", "10",
		"--restarts", "2", "--checkpoint", ck, "--checkpoint-every", "1", "--json")
	want := "graphpipe: step 3: non-finite values: stage "
	if code != exitDiverged || !strings.Contains(errs, want) || strings.Count(errs, "non-finite") != 1 || out != "" ||
		!strings.Contains(errs, "NaN") && !strings.Contains(errs, "Inf") || strings.Contains(errs, "restarting") ||
		!strings.Contains(errs, "the last finite parameters are checkpoint step-00000002 in "+ck) {
		t.Fatalf("run: exit %d, stdout %q, stderr:\n%s", code, out, errs)
	}
	entries, _ := os.ReadDir(ck)
	saved := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "step-") {
			continue
		}
		shards, _ := filepath.Glob(filepath.Join(ck, e.Name(), "*.safetensors"))
		if len(shards) != 6 {
			t.Errorf("%s: %d shards, want 2 for each of 3 stages", e.Name(), len(shards))
		}
		for _, f := range shards {
			for name, v := range readParams(t, f) {
				if !stage.Finite(v) {
					t.Errorf("%s: %s is not finite", f, name)
				}
			}
		}
		saved++
	}
	if c, err := runtime.LoadCheckpoint(ck, nil); err != nil || c.Manifest.Step != 2 || saved != 2 {
		t.Errorf("%d checkpoints, want steps 1 and 2", saved)
	}
	code, _, errs = gp(t, "", "train", model, "--optimizer", "sgd", "--lr", "1e6", "--steps", "10")
	if code != exitDiverged || !strings.Contains(errs, "graphpipe: step 3: non-finite values: op ") || !strings.Contains(errs, "NaN") {
		t.Fatalf("train: exit %d:\n%s", code, errs)
	}
	// skipping does not help a run whose parameters are ruined: it stops
	// after --max-skips steps in a row
	code, _, errs = gp(t, "", "train", model, "--optimizer", "sgd", "--lr", "1e6", "--steps", "10", "--on-nonfinite", "skip", "--max-skips", "3")
	if code != exitDiverged || !strings.Contains(errs, "step 6: non-finite values again after 3 steps in a row skipped") {
		t.Fatalf("train --max-skips 3: exit %d:\n%s", code, errs)
	}
}

// TestSkipPoisonedBatch: step 3's batch holds a NaN in one input. With
// --on-nonfinite skip, run (4 stages; and 6 devices, one stage on two
// replicas) and train skip that step's update on every stage and end with
// the parameters of a training that never saw that batch (train bit for
// bit, run within float32 tolerance); the summary says which step was
// skipped and carries its loss as null.
func TestSkipPoisonedBatch(t *testing.T) {
	for _, tc := range []struct{ model, input, devices string }{{"dlrm", "dense0.x", "4"}, {"candle-uno", "feat0.x", "6"}} {
		t.Run(tc.model, func(t *testing.T) {
			model := smallModel(t, tc.model)
			dir := t.TempDir()
			want := neverSaw(t, model, 2, 5)
			t.Setenv(stage.PoisonEnv, "2:"+tc.input)
			code, out, errs := gp(t, "", "run", model, "--devices", tc.devices, "--device", "cpu", "--micro-batch", "8", "--steps", "5",
				"--on-nonfinite", "skip", "--dump", filepath.Join(dir, "run"), "--json")
			if code != 0 {
				t.Fatalf("run: exit %d: %s", code, errs)
			}
			var sum struct {
				Stages  int        `json:"stages"`
				Losses  []*float64 `json:"losses"`
				Skipped []int      `json:"skipped_steps"`
			}
			if err := json.Unmarshal([]byte(out), &sum); err != nil || len(sum.Skipped) != 1 || sum.Skipped[0] != 3 ||
				sum.Losses[2] != nil || sum.Losses[3] == nil || sum.Stages < 3 {
				t.Fatalf("summary %s (%v)", out, err)
			}
			sameParams(t, readParams(t, filepath.Join(dir, "run", "final.safetensors")), want, 1e-5)
			code, _, errs = gp(t, "", "train", model, "--micro-batch", "8", "--steps", "5", "--on-nonfinite", "skip", "--dump", filepath.Join(dir, "train"))
			if code != 0 || !strings.Contains(errs, "step 3: op ") || !strings.Contains(errs, "NaN: its update skipped (1 in a row)") {
				t.Fatalf("train: exit %d: %s", code, errs)
			}
			sameParams(t, readParams(t, filepath.Join(dir, "train", "final.safetensors")), want, 0)
			// the progress line counts the skips
			code, _, errs = gp(t, "", "run", model, "--devices", tc.devices, "--device", "cpu", "--micro-batch", "8", "--steps", "5", "--on-nonfinite", "skip")
			if code != 0 || !strings.Contains(errs, "its update skipped on every stage") || !strings.Contains(errs, "step 5/5: loss") || !strings.Contains(errs, ", 1 skipped") {
				t.Fatalf("run's progress: exit %d: %s", code, errs)
			}
		})
	}
}

// neverSaw trains model in one process for steps steps at micro-batch 8,
// leaving out step skip's batch entirely, and returns its parameters.
func neverSaw(t *testing.T, model string, skip, steps int) map[string][]float32 {
	t.Helper()
	b, _ := os.ReadFile(model)
	g, err := dag.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := stage.NewTrainer(g, stage.TrainOptions{Optimizer: "adam", LR: 1e-3, MicroBatch: 8})
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < steps; s++ {
		if s == skip {
			continue
		}
		if _, _, err := tr.Step(s); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string][]float32{}
	for name, v := range tr.Ex.State() {
		out[name] = v.Data
	}
	return out
}

// TestJSONWithNonFiniteValues: run's and train's --json objects encode a
// loss that is not finite as null rather than failing.
func TestJSONWithNonFiniteValues(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	e := evalJSON{Step: 3, Samples: 8, Loss: nan}
	r := runSummary{FinalLoss: ptr(jsonFloat(nan)), Losses: lossList{1, nan, inf, -inf}, Evals: []evalJSON{e}, EvalLoss: finiteOrNil(&e.Loss)}
	tr := trainSummary{FirstLoss: 1, FinalLoss: jsonFloat(inf), Losses: lossList{1, nan, inf}}
	for _, v := range []any{r, tr} {
		b, err := json.Marshal(v)
		if err != nil || !json.Valid(b) || !strings.Contains(string(b), `"losses":[1,null,null`) || strings.Contains(string(b), "eval_loss") {
			t.Errorf("%s (%v)", b, err)
		}
	}
	if b, _ := json.Marshal(r); !strings.Contains(string(b), `"final_loss":null`) || !strings.Contains(string(b), `"evals":[{"step":3,"samples":8,"loss":null}]`) {
		t.Errorf("%s", b)
	}
}

// TestNonFiniteCheckpointRefused: a value no step's loss or gradients
// reveal (an infinite batch-norm running variance from a damaged --init
// file: training-mode batch norm never reads it) reaches the first
// checkpoint; the checkpoint is refused whole, the run exits 3 naming it,
// and nothing is written.
func TestNonFiniteCheckpointRefused(t *testing.T) {
	dir := t.TempDir()
	model, weights := filepath.Join(dir, "m.json"), filepath.Join(dir, "w.safetensors")
	if code, _, errs := gp(t, "", "import", "../../onnx/testdata/models/two_tower.onnx", "-o", model, "--weights", weights,
		"--loss", "softmax_cross_entropy", "--batch", "12"); code != 0 {
		t.Fatal(errs)
	}
	b, _ := os.ReadFile(weights)
	entries, _, err := tensor.DecodeSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name == "bn1.running_var" {
			e.F32[0] = float32(math.Inf(1))
		}
	}
	if b, err = tensor.EncodeSafetensors(entries, nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(weights, b, 0o644)
	ck := filepath.Join(dir, "ck")
	code, _, errs := gp(t, "", "run", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "--init", weights, "--steps", "4",
		"--checkpoint", ck, "--checkpoint-every", "2")
	if code != exitDiverged || !strings.Contains(errs, "graphpipe: step 2: non-finite values: stage ") ||
		!strings.Contains(errs, `bn1.running_var holds a value that is not finite (NaN or Inf)`) || !strings.Contains(errs, "no checkpoint was written") {
		t.Fatalf("exit %d:\n%s", code, errs)
	}
	if _, err := runtime.LoadCheckpoint(ck, nil); err == nil || !strings.Contains(err.Error(), "holds no checkpoint") {
		t.Fatalf("a checkpoint was written: %v", err)
	}
}

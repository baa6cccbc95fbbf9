package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/tensor"
)

// synthData writes n samples of model's synthetic data from sample skip.
func synthData(t *testing.T, model string, n, skip int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "d.safetensors")
	if code, _, errs := gp(t, "", "data", "synth", model, "-o", p, "--samples", strconv.Itoa(n), "--skip", strconv.Itoa(skip)); code != 0 {
		t.Fatal(errs)
	}
	return p
}

// dataSummary is what the tests read of train and run --json.
type dataSummary struct {
	FinalLoss    float64    `json:"final_loss"`
	Losses       []float64  `json:"losses"`
	EvalLoss     *float64   `json:"eval_loss"`
	EvalAccuracy *float64   `json:"eval_accuracy"`
	Evals        []evalJSON `json:"evals"`
}

func decodeSummary(t *testing.T, out string) dataSummary {
	t.Helper()
	var s dataSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return s
}

// TestDataRunEqualsTrain: the imported two-tower model (batch norms,
// embeddings, attention) trained on a dataset for two epochs by a 3-stage
// pipeline of worker processes, evaluating on a held-out set every 25
// steps: the parameters, batch-norm statistics, losses and evaluations of
// train on the same data; eval after the run from the dumped weights gives
// the run's last evaluation.
func TestDataRunEqualsTrain(t *testing.T) {
	dir := t.TempDir()
	model, weights := filepath.Join(dir, "m.json"), filepath.Join(dir, "w.safetensors")
	if code, _, errs := gp(t, "", "import", "../../onnx/testdata/models/two_tower.onnx", "-o", model, "--weights", weights,
		"--loss", "softmax_cross_entropy", "--batch", "12"); code != 0 {
		t.Fatal(errs)
	}
	train, eval := synthData(t, model, 606, 0), synthData(t, model, 150, 606)
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	common := []string{"--init", weights, "--data", train, "--eval-data", eval, "--epochs", "2", "--eval-every", "25",
		"--optimizer", "adam", "--lr", "0.003", "--json"}
	one, three := filepath.Join(dir, "train"), filepath.Join(dir, "run")
	code, out1, errs := gp(t, "", append([]string{"train", model, "--micro-batch", "4", "--dump", one}, common...)...)
	if code != 0 {
		t.Fatal(errs)
	}
	if !strings.Contains(errs, "606 samples in "+train+", 50 steps per epoch of 12 samples (6 left out of each epoch), 2 epochs in 100 steps") {
		t.Errorf("train did not say how the data divides:\n%s", errs)
	}
	code, out3, errs := gp(t, "", append([]string{"run", plan, "--model", model, "--dump", three}, common...)...)
	if code != 0 {
		t.Fatal(errs)
	}
	a, b := decodeSummary(t, out1), decodeSummary(t, out3)
	sameParams(t, readParams(t, filepath.Join(three, "final.safetensors")), readParams(t, filepath.Join(one, "final.safetensors")), 1e-5)
	if len(a.Losses) != 100 || len(b.Losses) != 100 || len(a.Evals) != 4 || len(b.Evals) != 4 {
		t.Fatalf("train: %d losses, %d evaluations; run: %d, %d; want 100 and 4", len(a.Losses), len(a.Evals), len(b.Losses), len(b.Evals))
	}
	for i, e := range a.Evals {
		f := b.Evals[i]
		if e.Step != 25*(i+1) || f.Step != e.Step || e.Samples != 150 || math.Abs(e.Loss-f.Loss) > 1e-5*e.Loss || *e.Accuracy != *f.Accuracy {
			t.Errorf("evaluation %d: train %+v, run %+v", i, e, f)
		}
	}
	if *b.EvalLoss != b.Evals[3].Loss || *b.EvalAccuracy != *b.Evals[3].Accuracy {
		t.Errorf("eval_loss %v, eval_accuracy %v are not the last evaluation's", *b.EvalLoss, *b.EvalAccuracy)
	}
	code, out, errs := gp(t, "", "eval", model, "--init", filepath.Join(three, "final.safetensors"), "--data", eval, "--json")
	if code != 0 {
		t.Fatal(errs)
	}
	var e evalSummary
	json.Unmarshal([]byte(out), &e)
	if e.Samples != 150 || math.Abs(e.Loss-*b.EvalLoss) > 1e-5**b.EvalLoss || *e.Accuracy != *b.EvalAccuracy {
		t.Errorf("graphpipe eval of the run's weights: %+v; the run's last evaluation: %v, %v", e, *b.EvalLoss, *b.EvalAccuracy)
	}
	for _, e := range b.Evals {
		t.Logf("after step %d: eval loss %.6g, accuracy %.4f", e.Step, e.Loss, *e.Accuracy)
	}
}

// TestDataLearns: on teacher-labelled data (the small MMT's, 8 classes),
// training lowers the held-out loss and lifts the accuracy well above the
// most frequent class's share.
func TestDataLearns(t *testing.T) {
	model := smallModel(t, "mmt")
	train, eval := synthData(t, model, 2048, 0), synthData(t, model, 512, 2048)
	code, out, errs := gp(t, "", "train", model, "--data", train, "--eval-data", eval, "--epochs", "3", "--eval-every", "64", "--lr", "0.003", "--json")
	if code != 0 {
		t.Fatal(errs)
	}
	s := decodeSummary(t, out)
	first, last := s.Evals[0], s.Evals[len(s.Evals)-1]
	raw, _ := os.ReadFile(eval)
	entries, _, _ := tensor.DecodeSafetensors(raw)
	counts := map[int32]int{}
	for _, e := range entries {
		if e.Name == "label" {
			for _, c := range e.I32 {
				counts[c]++
			}
		}
	}
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	chance := float64(most) / 512
	t.Logf("eval after step %d: loss %.4f, accuracy %.4f; after step %d: loss %.4f, accuracy %.4f; the most frequent class: %.4f",
		first.Step, first.Loss, *first.Accuracy, last.Step, last.Loss, *last.Accuracy, chance)
	if last.Loss >= first.Loss || *last.Accuracy < 1.6*chance {
		t.Fatalf("no learning: %+v to %+v, chance %.3f", first, last, chance)
	}
}

// TestDataRestartBitIdentical: a worker killed mid-epoch (shuffled data,
// epochs of 7 steps) and the run restarted from its last checkpoint ends
// with the parameters of the run never interrupted, bit for bit.
func TestDataRestartBitIdentical(t *testing.T) {
	model := smallModel(t, "mmt")
	data := synthData(t, model, 16*7+5, 0)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	base := []string{"run", plan, "--model", model, "--data", data, "--steps", "17", "--optimizer", "adam"}
	if code, _, errs := gp(t, "", append(base, "--dump", filepath.Join(dir, "straight"))...); code != 0 {
		t.Fatal(errs)
	}
	os.Setenv(runtime.KillEnv, "1:1:10:after-send")
	defer os.Unsetenv(runtime.KillEnv)
	code, _, errs := gp(t, "", append(base, "--restarts", "1", "--checkpoint", filepath.Join(dir, "ck"), "--checkpoint-every", "4",
		"--dump", filepath.Join(dir, "killed"))...)
	if code != 0 || !strings.Contains(errs, "restarting the workers as generation 2 from the checkpoint at step 8") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "killed", "final.safetensors")), readParams(t, filepath.Join(dir, "straight", "final.safetensors")), 0)
}

// TestBadData: every broken data file is one line naming the flag, file
// and what is wrong, exit 2, before training (or, for a value, before the
// step that reads it), from train and run alike; no restart is spent.
func TestBadData(t *testing.T) {
	model := smallModel(t, "dlrm")     // float and int inputs
	good := synthData(t, model, 64, 0) // two batches
	raw, _ := os.ReadFile(good)
	entries, _, err := tensor.DecodeSafetensors(raw)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, edit func(e []tensor.Named) []tensor.Named) string {
		es := make([]tensor.Named, len(entries))
		for i, e := range entries {
			e.F32, e.I32 = append([]float32(nil), e.F32...), append([]int32(nil), e.I32...)
			es[i] = e
		}
		b, err := tensor.EncodeSafetensors(edit(es), nil)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), name+".safetensors")
		os.WriteFile(p, b, 0o644)
		return p
	}
	find := func(es []tensor.Named, ints bool) int {
		for i, e := range es {
			if (e.I32 != nil) == ints && len(e.Shape) > 1 {
				return i
			}
		}
		t.Fatal("no such tensor")
		return -1
	}
	truncated := filepath.Join(t.TempDir(), "truncated.safetensors")
	os.WriteFile(truncated, raw[:len(raw)-100], 0o644)
	npyF64 := "../../dataset/testdata/numpy/f64.npy"
	for _, tc := range []struct {
		name, path string
		want       []string
	}{
		{"truncated", truncated, []string{"--data " + truncated, "do not hold"}},
		{"float64", npyF64, []string{"--data ../../dataset/testdata/numpy/f64.npy", "<f8", "float32"}},
		{"missing input", write("missing", func(e []tensor.Named) []tensor.Named { return e[1:] }), []string{"missing: the model's input"}},
		{"wrong shape", write("shape", func(e []tensor.Named) []tensor.Named {
			i := find(e, false)
			e[i].Shape = []int{e[i].Shape[0] * e[i].Shape[1]}
			return e
		}), []string{"per sample", "the model's input is"}},
		{"wrong dtype", write("dtype", func(e []tensor.Named) []tensor.Named {
			i := find(e, true)
			e[i].F32, e[i].I32 = make([]float32, len(e[i].I32)), nil
			return e
		}), []string{"is float32; the model's input is int32"}},
		{"id out of range", write("ids", func(e []tensor.Named) []tensor.Named {
			i := find(e, true)
			e[i].I32[39*e[i].Shape[1]+3] = 1 << 20 // read at step 1
			return e
		}), []string{"step 1: ", "row 39: value 3 of the sample, index 1048576, is outside"}},
		{"NaN", write("nan", func(e []tensor.Named) []tensor.Named {
			i := find(e, false)
			e[i].F32[len(e[i].F32)/2] = float32(math.NaN())
			return e
		}), []string{"is NaN (--allow-nonfinite lets it through)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range [][]string{
				{"train", model, "--data", tc.path, "--steps", "3", "--shuffle=false"},
				{"run", model, "--devices", "2", "--device", "cpu", "--data", tc.path, "--steps", "3", "--shuffle=false", "--restarts", "2"},
			} {
				code, _, errs := gp(t, "", cmd...)
				lines := strings.Split(strings.TrimSpace(errs), "\n")
				last := lines[len(lines)-1]
				if code != 2 || strings.Contains(errs, "restarting") {
					t.Fatalf("%s: exit %d, want 2 without a restart:\n%s", cmd[0], code, errs)
				}
				for _, w := range tc.want {
					if !strings.Contains(last, w) {
						t.Errorf("%s: %q lacks %q", cmd[0], last, w)
					}
				}
			}
		})
	}
}

// TestDataChangedMidRun: a --data file cut while a run reads it (cp or
// np.save over it) ends the run with exit 1, the environment's fault,
// naming the file and the tensor: not a crash (SIGBUS), not a refusal of
// the data (exit 2).
func TestDataChangedMidRun(t *testing.T) {
	model := smallModel(t, "mlp")
	data := filepath.Join(t.TempDir(), "train.safetensors")
	if code, _, errs := gp(t, "", "data", "synth", model, "-o", data, "--samples", "4096"); code != 0 {
		t.Fatal(errs)
	}
	p := startRunLogged(t, model, "--devices", "2", "--device", "cpu", "--data", data, "--steps", "100000", "--run", "cut", "--log-every", "1")
	p.waitFor(t, "step 2/100000")
	if err := os.Truncate(data, 4096); err != nil {
		t.Fatal(err)
	}
	code := p.exitCode(t, 30*time.Second)
	errs := p.errs()
	if code != 1 || !strings.Contains(errs, "changed while in use") || !strings.Contains(errs, data+`: tensor "`) || strings.Contains(errs, "SIGBUS") {
		t.Fatalf("exit %d, want 1 naming the file and a tensor:\n%s", code, errs)
	}
}

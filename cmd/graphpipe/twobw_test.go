package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTwoBWRunEqualsTrain: run --schedule 2bw over worker processes (a
// 3-stage pipeline running forwards of the next batch ahead of its
// updates) dumps what train --schedule 2bw dumps, with SGD with momentum
// and with Adam, and not what synchronous training dumps.
func TestTwoBWRunEqualsTrain(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	for _, opt := range [][]string{{"--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"}, {"--optimizer", "adam", "--lr", "0.001"}} {
		run, train, sync := filepath.Join(dir, "run-"+opt[1]), filepath.Join(dir, "train-"+opt[1]), filepath.Join(dir, "sync-"+opt[1])
		common := append([]string{"--micro-batch", "4", "--steps", "4"}, opt...)
		code, out, errs := gp(t, "", append([]string{"run", model, "--devices", "3", "--device", "cpu", "--schedule", "2bw", "--json", "--dump", run}, common...)...)
		if code != 0 {
			t.Fatalf("run: exit %d: %s", code, errs)
		}
		var sum runSummary
		if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.Stages != 3 {
			t.Fatalf("summary: %s (%v)", out, err)
		}
		for _, args := range [][]string{{"--schedule", "2bw", "--dump", train}, {"--dump", sync}} {
			if code, _, errs := gp(t, "", append(append([]string{"train", model}, args...), common...)...); code != 0 {
				t.Fatalf("train %v: %s", args, errs)
			}
		}
		got := readParams(t, filepath.Join(run, "final.safetensors"))
		sameParams(t, got, readParams(t, filepath.Join(train, "final.safetensors")), 1e-5)
		syncParams := readParams(t, filepath.Join(sync, "final.safetensors"))
		worst := 0.0
		for name, w := range syncParams {
			for i := range w {
				worst = max(worst, float64(abs32(got[name][i]-w[i])))
			}
		}
		if worst < 1e-5 {
			t.Errorf("%s: 2bw's parameters within %.3g of synchronous training's", opt[1], worst)
		}
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestTwoBWRefusals: what two weight versions do not run with is refused
// (exit 2), naming the flag; a plan file deeper than its micro-batches
// allow is refused by what reads it.
func TestTwoBWRefusals(t *testing.T) {
	model := smallModel(t, "mmt")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", model, "--schedule", "2bw", "--backend", "cuda-emulator", "--steps", "1"}, "--schedule 2bw: two versions of the weights are kept on the cpu backend only"},
		{[]string{"train", model, "--schedule", "2bw", "--selective-backprop", "1", "--steps", "1"}, "--schedule 2bw: not with --selective-backprop"},
		{[]string{"train", model, "--schedule", "auto-async", "--steps", "1"}, "--schedule auto-async: the planner's choice"},
		{[]string{"train", model, "--schedule", "pipedream", "--steps", "1"}, `--schedule: unknown schedule "pipedream"`},
		{[]string{"run", model, "--devices", "2", "--schedule", "2bw", "--backend", "cuda-emulator", "--steps", "1"}, "--backend cuda-emulator: the plan's schedule 2bw keeps two versions"},
		{[]string{"run", model, "--devices", "2", "--device", "cpu", "--schedule", "2bw", "--selective-backprop", "1", "--steps", "1"}, "--selective-backprop"},
	} {
		code, _, errs := gp(t, "", c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", c.args, code, errs, c.want)
		}
	}
	dir := t.TempDir()
	planPath := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "4", "--device", "cpu", "--micro-batch", "4", "--schedule", "2bw", "-o", planPath); code != 0 {
		t.Fatal(errs)
	}
	raw, err := os.ReadFile(planPath)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p["schedule"] != "2bw" {
		t.Fatalf("the plan's schedule is %v", p["schedule"])
	}
	// one micro-batch a batch: too few for any stage that runs a forward ahead
	p["micro_batch"], p["micro_batches"] = p["batch_size"], 1
	deep := false
	for _, st := range p["stages"].([]any) {
		s := st.(map[string]any)
		s["device_micro_batch"] = p["batch_size"]
		s["in_flight"] = 1
		deep = deep || s["id"].(float64) == 0 && len(p["edges"].([]any)) > 1
	}
	if !deep {
		t.Skip("the plan is too shallow to be made too stale")
	}
	bad, _ := json.Marshal(p)
	bp := filepath.Join(dir, "deep.json")
	os.WriteFile(bp, bad, 0o644)
	for _, cmd := range []string{"sim", "explain"} {
		code, _, errs := gp(t, "", cmd, bp)
		if code != 2 || !strings.Contains(errs, "micro_batches") || !strings.Contains(errs, "2bw needs at least") {
			t.Errorf("%s of a plan too deep for 2bw: exit %d, %q", cmd, code, errs)
		}
	}
}

// TestTwoBWExplainAndSim: explain says what 2bw keeps and costs; sim plays
// several iterations without a flush; search --schedule auto-async says
// which schedule it kept and what the other predicted.
func TestTwoBWExplainAndSim(t *testing.T) {
	model := smallModel(t, "candle-uno")
	dir := t.TempDir()
	planPath := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "4", "--device", "v100", "--micro-batch", "4", "--schedule", "2bw", "-o", planPath); code != 0 {
		t.Fatal(errs)
	}
	code, out, errs := gp(t, "", "explain", planPath)
	if code != 0 || !strings.Contains(out, "schedule 2bw") || !strings.Contains(out, "weights     two versions a stage, no flush between iterations") {
		t.Errorf("explain: exit %d, %s%s", code, out, errs)
	}
	code, out, errs = gp(t, "", "sim", planPath, "--grid")
	if code != 0 || !strings.Contains(out, "no flush: 5 iterations back to back") {
		t.Errorf("sim: exit %d, %s%s", code, out, errs)
	}
	code, out, errs = gp(t, "", "search", model, "--devices", "4", "--device", "v100", "--micro-batch", "4", "--schedule", "auto-async")
	if code != 0 || !strings.Contains(out, "schedule auto-async (stale weights allowed)") {
		t.Errorf("auto-async: exit %d, %s%s", code, out, errs)
	}
}

// TestAutoAsyncTrainsWhatItChose: run --schedule auto-async plans 2bw only
// where the run can train it: a model with buffers, selective backprop and
// a backend that keeps one weight version each train 1f1b (before, each
// chose 2bw and then refused it, exit 2); a sweep job of schedule 2bw that
// its run could not train is refused as the sweep is planned, naming the
// job, rather than failing when it runs.
func TestAutoAsyncTrainsWhatItChose(t *testing.T) {
	mlp := smallModel(t, "mlp")
	dir := t.TempDir()
	bn := filepath.Join(dir, "bn.json")
	if err := os.WriteFile(bn, []byte(bnModel), 0o644); err != nil {
		t.Fatal(err)
	}
	run := []string{"run", "--devices", "2", "--device", "cpu", "--steps", "1", "--schedule", "auto-async"}
	for _, c := range []struct {
		name string
		args []string
		want string // the schedule trained
	}{
		{"mlp", append(run, mlp), "schedule 2bw"},
		{"buffers", append(run, bn), "schedule 1f1b"},
		{"selective backprop", append(run, mlp, "--selective-backprop", "1"), "schedule 1f1b"},
		{"cuda-emulator", append(run, mlp, "--backend", "cuda-emulator"), "schedule 1f1b"},
	} {
		code, _, errs := gp(t, "", c.args...)
		if code != 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, %q; want exit 0 and %q", c.name, code, errs, c.want)
		}
	}
	sw := filepath.Join(dir, "sweep.json")
	os.WriteFile(sw, []byte(`{"format":"graphpipe/sweep@1","jobs":[{"name":"norm","model":"bn.json","steps":1,"schedule":"2bw"}]}`), 0o644)
	code, _, errs := gp(t, "", "sweep", sw, "--devices", "2", "--device", "cpu")
	if code != 2 || !strings.Contains(errs, `job "norm"`) || !strings.Contains(errs, `op "bn" keeps buffers`) {
		t.Errorf("sweep of a 2bw job with buffers: exit %d, %q; want exit 2 naming the job and the op", code, errs)
	}
}

// TestTwoBWCheckpointEveryStep: a 2bw run checkpointing after every step
// ends with its newest two checkpoints and no temporary directory. Its
// stages go on to the next iteration, and write their shards of the next
// checkpoint, while the coordinator still commits this one: the commit's
// pruning once removed them, and the run failed at its second checkpoint
// (exit 1).
func TestTwoBWCheckpointEveryStep(t *testing.T) {
	model := smallModel(t, "mlp")
	ck := filepath.Join(t.TempDir(), "ck")
	code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--schedule", "2bw", "--steps", "6", "--checkpoint", ck, "--checkpoint-every", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	entries, err := os.ReadDir(ck)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != ".lock" {
			names = append(names, e.Name())
		}
	}
	if strings.Join(names, " ") != "step-00000005 step-00000006" {
		t.Errorf("the checkpoint directory holds %v, want the newest two checkpoints alone", names)
	}
}

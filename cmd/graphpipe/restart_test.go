package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/runtime"
)

// TestKilledWorkersRestart kills workers five times in one run, at the named
// points (after a send, between the last gradient and the optimizer step,
// while handing over a checkpoint), with --restarts 5: the run ends with the
// parameters of an uninterrupted run of the same plan, bit for bit.
func TestKilledWorkersRestart(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	base := []string{"run", plan, "--model", model, "--steps", "6", "--optimizer", "adam"}
	if code, _, errs := gp(t, "", append(base, "--dump", filepath.Join(dir, "straight"))...); code != 0 {
		t.Fatal(errs)
	}
	want := readParams(t, filepath.Join(dir, "straight", "final.safetensors"))
	kills := []string{"1:1:1:after-send", "2:0:2:before-step", "3:2:3:during-checkpoint", "4:1:3:after-send", "5:2:4:before-step"}
	os.Setenv(runtime.KillEnv, strings.Join(kills, ","))
	defer os.Unsetenv(runtime.KillEnv)
	code, _, errs := gp(t, "", append(base, "--restarts", "5", "--checkpoint", filepath.Join(dir, "ck"), "--checkpoint-every", "1",
		"--dump", filepath.Join(dir, "killed"))...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if got := strings.Count(errs, "restarting the workers"); got != len(kills) {
		t.Fatalf("%d restarts, want %d:\n%s", got, len(kills), errs)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "killed", "final.safetensors")), want, 0)
	t.Logf("%d kill trials, final parameters bit-identical to the uninterrupted run", len(kills))
}

// TestKilledWorkerWithoutRestarts: restarts off, a killed worker ends the run
// with exit 1, and the last checkpoint still loads.
func TestKilledWorkerWithoutRestarts(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	os.Setenv(runtime.KillEnv, "1:0:2:after-send")
	defer os.Unsetenv(runtime.KillEnv)
	code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "5",
		"--checkpoint", filepath.Join(dir, "ck"), "--checkpoint-every", "1")
	if code != 1 || !strings.Contains(errs, "worker process") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	c, err := runtime.LoadCheckpoint(filepath.Join(dir, "ck"), nil)
	if err != nil || c.Manifest.Step != 2 {
		t.Fatalf("last checkpoint: %v (%+v)", err, c)
	}
}

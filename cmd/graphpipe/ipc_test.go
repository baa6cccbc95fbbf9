package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/runtime"
)

// emulatedPlan is a 3-stage plan of the small MMT (one device a stage: no
// data-parallel stage, whose edges go as bytes), and the model.
func emulatedPlan(t *testing.T, dir string) (model, plan string) {
	t.Helper()
	needEmulator(t)
	model = smallModel(t, "mmt")
	plan = filepath.Join(dir, "plan.json")
	if c, _, e := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); c != 0 {
		t.Fatal(e)
	}
	return model, plan
}

// edgesOf is run --json's edges, each edge's transport checked: want on
// every edge, and at least one edge.
func edgesOf(t *testing.T, out, want string) []runtime.EdgeTime {
	t.Helper()
	var sum runSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Stages != 3 || len(sum.Edges) == 0 {
		t.Fatalf("%d stages, %d edges reported: %s", sum.Stages, len(sum.Edges), out)
	}
	for _, e := range sum.Edges {
		if string(e.Transport) != want || e.Bytes <= 0 || e.Measured <= 0 {
			t.Errorf("edge %d (stage %d to %d): %s, %d bytes, %g s; want %s, bytes and time", e.Edge, e.From, e.To, e.Transport, e.Bytes, e.Measured, want)
		}
	}
	return sum.Edges
}

// TestIPCRunEqualsTrain: a 3-stage run whose workers share a host on the
// CUDA emulator moves every edge's tensors device to device (run --json
// says ipc on each) and ends with train's parameters: on the CPU within
// 1e-5 (SGD: Adam's update of a near-zero gradient magnifies the
// emulator's last-bit differences from the CPU's kernels), on the emulator
// bit for bit; with --no-ipc every edge goes over NATS and the parameters
// are the same, bit for bit.
func TestIPCRunEqualsTrain(t *testing.T) {
	dir := t.TempDir()
	model, plan := emulatedPlan(t, dir)
	common := []string{"--steps", "3", "--optimizer", "sgd", "--lr", "0.05"}
	for _, backend := range []string{"cpu", "cuda-emulator"} {
		if c, _, e := gp(t, "", append([]string{"train", model, "--micro-batch", "4", "--backend", backend, "--dump", filepath.Join(dir, backend)}, common...)...); c != 0 {
			t.Fatal(e)
		}
	}
	run := append([]string{"run", plan, "--model", model, "--backend", "cuda-emulator", "--json"}, common...)
	c, out, e := gp(t, "", append(run, "--dump", filepath.Join(dir, "ipc"))...)
	if c != 0 {
		t.Fatal(e)
	}
	edges := edgesOf(t, out, "ipc")
	ipc := readParams(t, filepath.Join(dir, "ipc", "final.safetensors"))
	worst := sameParams(t, ipc, readParams(t, filepath.Join(dir, "cpu", "final.safetensors")), 1e-5)
	sameParams(t, ipc, readParams(t, filepath.Join(dir, "cuda-emulator", "final.safetensors")), 0)
	c, out, e = gp(t, "", append(run, "--no-ipc", "--dump", filepath.Join(dir, "nats"))...)
	if c != 0 {
		t.Fatal(e)
	}
	edgesOf(t, out, "nats")
	sameParams(t, readParams(t, filepath.Join(dir, "nats", "final.safetensors")), ipc, 0)
	t.Logf("%d edges by IPC; parameters within %.2g of train's on the CPU, and --no-ipc's bit for bit", len(edges), worst)
}

// TestIPCKilledWorkersRestart: workers killed after a send (an activation,
// a gradient: device tensors whose copies were not all acknowledged) and
// before a step, restarted from the checkpoints, end with the parameters of
// an uninterrupted run over the same IPC links, bit for bit.
func TestIPCKilledWorkersRestart(t *testing.T) {
	dir := t.TempDir()
	model, plan := emulatedPlan(t, dir)
	base := []string{"run", plan, "--model", model, "--backend", "cuda-emulator", "--steps", "5", "--optimizer", "adam", "--json"}
	c, out, e := gp(t, "", append(base, "--dump", filepath.Join(dir, "straight"))...)
	if c != 0 {
		t.Fatal(e)
	}
	edgesOf(t, out, "ipc")
	want := readParams(t, filepath.Join(dir, "straight", "final.safetensors"))
	kills := []string{"1:0:1:after-send", "2:2:2:after-send", "3:1:3:before-step"}
	os.Setenv(runtime.KillEnv, strings.Join(kills, ","))
	defer os.Unsetenv(runtime.KillEnv)
	c, out, e = gp(t, "", append(base, "--restarts", "3", "--checkpoint", filepath.Join(dir, "ck"), "--checkpoint-every", "1",
		"--dump", filepath.Join(dir, "killed"))...)
	if c != 0 {
		t.Fatalf("exit %d: %s", c, e)
	}
	if got := strings.Count(e, "restarting the workers"); got != len(kills) {
		t.Fatalf("%d restarts, want %d:\n%s", got, len(kills), e)
	}
	edgesOf(t, out, "ipc")
	sameParams(t, readParams(t, filepath.Join(dir, "killed", "final.safetensors")), want, 0)
}

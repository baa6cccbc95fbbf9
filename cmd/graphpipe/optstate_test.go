package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
)

// runJSON runs graphpipe with args and decodes run --json's object.
func runJSON(t *testing.T, args ...string) runSummary {
	t.Helper()
	code, out, errs := gp(t, "", args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errs)
	}
	var sum runSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("%v: %s (%v)", args, out, err)
	}
	return sum
}

// stageMemory is run --json's memory entries of stage s.
func stageMemory(sum runSummary, s int) []runtime.WorkerMemory {
	var out []runtime.WorkerMemory
	for _, m := range sum.Memory {
		if m.Stage == s {
			out = append(out, m)
		}
	}
	return out
}

// TestRunShardedEqualsTrain: the run, mlp small on 4 CPU workers
// (a stage of one and a stage of 3 replicas) with Adam and clipping, its
// state sharded: after 10 steps it ends with graphpipe train's parameters
// and global norms, within 1e-5; run --json's memory has an entry per
// worker, and each of the 3 replicas holds at most 0.4 of the optimizer
// state the same stage's replicas hold with --optimizer-state replicated.
func TestRunShardedEqualsTrain(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	flags := []string{"--steps", "10", "--optimizer", "adam", "--clip-grad-norm", "0.5", "--json"}
	train := filepath.Join(dir, "train")
	code, out, errs := gp(t, "", append([]string{"train", model, "--dump", train}, flags...)...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, errs)
	}
	var want trainSummary
	if err := json.Unmarshal([]byte(out), &want); err != nil {
		t.Fatal(err)
	}
	wantParams := readParams(t, filepath.Join(train, "final.safetensors"))
	held := map[string][]runtime.WorkerMemory{}
	for _, state := range []string{"sharded", "replicated"} {
		dump := filepath.Join(dir, state)
		sum := runJSON(t, append([]string{"run", model, "--devices", "4", "--device", "cpu", "--optimizer-state", state, "--dump", dump}, flags...)...)
		worst := sameParams(t, readParams(t, filepath.Join(dump, "final.safetensors")), wantParams, 1e-5)
		for k, g := range want.GradNorms {
			if math.Abs(sum.GradNorms[k]-g) > 1e-5*g {
				t.Errorf("%s: step %d's global norm %v, train's %v", state, k, sum.GradNorms[k], g)
			}
		}
		if len(sum.Memory) != 4 {
			t.Fatalf("%s: %d memory entries, want one per worker: %+v", state, len(sum.Memory), sum.Memory)
		}
		for _, m := range sum.Memory {
			if m.ParameterBytes <= 0 || m.OptimizerStateBytes <= 0 || m.PeakRSSBytes <= 0 {
				t.Errorf("%s: worker %d reports %+v", state, m.Worker, m)
			}
		}
		held[state] = stageMemory(sum, 1)
		t.Logf("%s: largest relative difference %.3g; stage 1 holds %+v", state, worst, held[state])
	}
	rep, sh := held["replicated"], held["sharded"]
	if len(rep) != 3 || len(sh) != 3 {
		t.Fatalf("stage 1 has %d replicas replicated, %d sharded: want the plan's 3", len(rep), len(sh))
	}
	for i, m := range sh {
		if m.OptimizerState != "sharded" || float64(m.OptimizerStateBytes) > 0.4*float64(rep[i].OptimizerStateBytes) || m.ParameterBytes != rep[i].ParameterBytes {
			t.Errorf("replica %d sharded %+v, replicated %+v: want at most 0.4 of the state, every parameter", i, m, rep[i])
		}
	}
}

// TestCheckpointAcrossShardings: a checkpoint written under a plan whose
// stage of 3 replicas shards its optimizer state resumes under one that
// replicates it, and the reverse; each ends 6 steps with the parameters of
// a run not interrupted, within 1e-5; the checkpoint keys the state by
// parameter name, whole, as any other.
func TestCheckpointAcrossShardings(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	straight := filepath.Join(dir, "straight")
	if code, _, errs := gp(t, "", "train", model, "--steps", "6", "--optimizer", "adam", "--dump", straight); code != 0 {
		t.Fatal(errs)
	}
	want := readParams(t, filepath.Join(straight, "final.safetensors"))
	for _, c := range []struct{ first, then string }{{"sharded", "replicated"}, {"replicated", "sharded"}} {
		t.Run(c.first+"-then-"+c.then, func(t *testing.T) {
			ck, out := filepath.Join(dir, "ck-"+c.first), filepath.Join(dir, "out-"+c.then)
			if code, _, errs := gp(t, "", "run", model, "--devices", "4", "--device", "cpu", "--optimizer-state", c.first, "--optimizer", "adam",
				"--steps", "4", "--checkpoint", ck, "--checkpoint-every", "2"); code != 0 {
				t.Fatal(errs)
			}
			cp, err := runtime.LoadCheckpoint(ck, nil)
			if err != nil {
				t.Fatal(err)
			}
			for name, p := range cp.Params {
				if m := cp.Optim[name+".exp_avg"]; m != nil && len(m) != len(p.Data) {
					t.Fatalf("%s.exp_avg holds %d values, the parameter %d: not whole", name, len(m), len(p.Data))
				}
			}
			if code, _, errs := gp(t, "", "run", model, "--devices", "4", "--device", "cpu", "--optimizer-state", c.then, "--optimizer", "adam",
				"--steps", "6", "--resume", ck, "--dump", out); code != 0 {
				t.Fatal(errs)
			}
			sameParams(t, readParams(t, filepath.Join(out, "final.safetensors")), want, 1e-5)
		})
	}
}

// TestRunHostOffloadEmulated: on the CUDA path (the emulator), a plan
// whose stages keep their optimizer state in host memory (search
// --optimizer-state host) trains to graphpipe train's parameters within
// 1e-5, its stages stepping on the host; and each stage's copies between
// host and device in a step, beyond what the same plan with its state on
// the devices copies, are the ones the plan priced (host_copy_bytes: the
// gradients down, the weights up) within 5%.
func TestRunHostOffloadEmulated(t *testing.T) {
	needEmulator(t)
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	// SGD with momentum: Adam's update divides by the root of gradients
	// that attention's key bias gets only as rounding noise, and the
	// emulator's kernels round otherwise than the CPU's (as in
	// TestFiftyStepsEmulated)
	flags := []string{"--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--steps", "4", "--micro-batch", "4", "--json"}
	train := filepath.Join(dir, "train")
	if code, _, errs := gp(t, "", append([]string{"train", model, "--dump", train}, flags...)...); code != 0 {
		t.Fatal(errs)
	}
	hostPlan, onDevice := filepath.Join(dir, "host.json"), filepath.Join(dir, "device.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "--optimizer-state", "host", "-o", hostPlan); code != 0 {
		t.Fatal(errs)
	}
	p := readPlan(t, hostPlan)
	for i := range p.Stages { // the same plan, its state on the devices
		st := &p.Stages[i]
		if st.StateName() != "host" || st.HostCopyBytes != 8*st.Params {
			t.Fatalf("stage %d: %s, %d bytes over the host link for %d parameters: want host, 8 a parameter", i, st.StateName(), st.HostCopyBytes, st.Params)
		}
		st.OptimizerState, st.HostCopyBytes, st.StateSavedBytes = "", 0, 0
	}
	if err := os.WriteFile(onDevice, p.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	calls := map[string][]stageCalls{}
	for _, c := range []struct{ name, plan string }{{"host", hostPlan}, {"device", onDevice}} {
		dump := filepath.Join(dir, c.name)
		sum := runJSON(t, append([]string{"run", c.plan, "--model", model, "--backend", "cuda-emulator", "--dump", dump, "--json"}, flags[:8]...)...)
		sameParams(t, readParams(t, filepath.Join(dump, "final.safetensors")), readParams(t, filepath.Join(train, "final.safetensors")), 1e-5)
		calls[c.name] = sum.DeviceCalls
		for _, m := range sum.Memory {
			if m.OptimizerState != map[string]string{"host": "host", "device": "replicated"}[c.name] || m.OptimizerStateBytes <= 0 {
				t.Errorf("%s: worker %d holds %+v", c.name, m.Worker, m)
			}
		}
	}
	for s, st := range readPlan(t, hostPlan).Stages {
		h, d := calls["host"][s], calls["device"][s]
		extra := h.H2DBytes + h.D2HBytes - d.H2DBytes - d.D2HBytes
		if dev := math.Abs(float64(extra-st.HostCopyBytes)) / float64(st.HostCopyBytes); dev > 0.05 {
			t.Errorf("stage %d copied %d bytes more a step with its state in host memory (%d up, %d down), the plan priced %d: %.1f%% apart",
				s, extra, h.H2DBytes-d.H2DBytes, h.D2HBytes-d.D2HBytes, st.HostCopyBytes, 100*dev)
		}
		t.Logf("stage %d: %d bytes more a step (%d up, %d down), priced %d", s, extra, h.H2DBytes-d.H2DBytes, h.D2HBytes-d.D2HBytes, st.HostCopyBytes)
	}
}

// readPlan reads a plan file.
func readPlan(t *testing.T, path string) *plan.Plan {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.DecodePlan(data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunShardedEmulated: the sharded run of TestRunShardedEqualsTrain on
// the CUDA path (the emulator: the reduce-scatter's sums and the
// all-gather's parameters through pinned staging, the norms and the update
// over the shard's pieces on the device) ends with train's parameters
// within 1e-5, each replica of the stage of 3 holding a third of its
// optimizer state on its device.
func TestRunShardedEmulated(t *testing.T) {
	needEmulator(t)
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	flags := []string{"--steps", "10", "--optimizer", "adam", "--clip-grad-norm", "0.5"}
	train := filepath.Join(dir, "train")
	if code, _, errs := gp(t, "", append([]string{"train", model, "--dump", train}, flags...)...); code != 0 {
		t.Fatal(errs)
	}
	dump := filepath.Join(dir, "run")
	sum := runJSON(t, append([]string{"run", model, "--devices", "4", "--device", "cpu", "--backend", "cuda-emulator", "--optimizer-state", "sharded",
		"--dump", dump, "--json"}, flags...)...)
	worst := sameParams(t, readParams(t, filepath.Join(dump, "final.safetensors")), readParams(t, filepath.Join(train, "final.safetensors")), 1e-5)
	reps := stageMemory(sum, 1)
	if len(reps) != 3 {
		t.Fatalf("stage 1: %d replicas, want 3", len(reps))
	}
	for _, m := range reps {
		if m.OptimizerState != "sharded" || m.OptimizerStateBytes > 8*(m.ParameterBytes/4)/3+8 {
			t.Errorf("replica %d: %+v, want about a third of Adam's 8 bytes a parameter", m.Replica, m)
		}
	}
	t.Logf("largest relative difference %.3g; stage 1: %+v", worst, reps)
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/plan"
)

// twoCPUs writes a cluster file of two CPU kinds into dir: 2 devices of the
// cpu profile and 2 of a copy of it twice as slow (cpu-slow.json, beside
// it), and returns its path.
func twoCPUs(t *testing.T, dir string) string {
	t.Helper()
	slow := plan.Profiles["cpu"]
	slow.Name, slow.PeakFLOPs, slow.MemBW = "cpu-slow", slow.PeakFLOPs/2, slow.MemBW/2
	if err := os.WriteFile(filepath.Join(dir, "cpu-slow.json"), plan.EncodeDevice(slow), 0o644); err != nil {
		t.Fatal(err)
	}
	cluster := filepath.Join(dir, "cpus.json")
	if err := os.WriteFile(cluster, []byte(`{"format": "graphpipe/cluster@1",
 "nodes": [{"count": 1, "devices_per_node": 2, "device": "cpu"},
           {"count": 1, "devices_per_node": 2, "device": "cpu-slow.json"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return cluster
}

// TestRunOnTwoDeviceKinds: a plan for two CPU profiles (search --cluster)
// runs on CPU workers started with those profiles (--device-profile), each
// stage on a worker of its kind, and trains what one process trains
// (within 1e-5); a worker of a profile the plan has no stage left for is
// refused, exit 2.
func TestRunOnTwoDeviceKinds(t *testing.T) {
	model := smallModel(t, "dlrm")
	dir := t.TempDir()
	cluster := twoCPUs(t, dir)
	planPath := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--cluster", cluster, "--micro-batch", "8", "--optimizer", "sgd", "-o", planPath); code != 0 {
		t.Fatal(errs)
	}
	data, err := os.ReadFile(planPath)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.DecodePlan(data)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, s := range p.Stages {
		kinds[s.Kind] += len(s.Devices)
	}
	if p.Cluster == nil || kinds["cpu"] != 2 || kinds["cpu-slow"] != 2 {
		t.Fatalf("the plan's stages use %v devices of each kind, want 2 cpu and 2 cpu-slow", kinds)
	}
	profiles := []string{"cpu-slow.json", "cpu", "cpu", "cpu-slow.json"} // joining in no kind's order
	out, logs := kindsRun(t, model, planPath, "kinds1", filepath.Join(dir, "run"), profiles, 0)
	if !strings.Contains(out, `"format"`) {
		t.Fatalf("run printed %q", out)
	}
	stageOf := regexp.MustCompile(`stage (\d+) of the plan's`)
	for i, log := range logs {
		m := stageOf.FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("worker %d does not say its stage: %s", i, log)
		}
		s, _ := strconv.Atoi(m[1])
		if want := strings.TrimSuffix(profiles[i], ".json"); p.Stages[s].Kind != want {
			t.Errorf("worker %d computes as %s but was given stage %d, of kind %s", i, want, s, p.Stages[s].Kind)
		}
	}
	if c, _, e := gp(t, "", "train", model, "--micro-batch", "8", "--steps", "3", "--optimizer", "sgd", "--lr", "0.05", "--dump", filepath.Join(dir, "train")); c != 0 {
		t.Fatal(e)
	}
	sameParams(t, readParams(t, filepath.Join(dir, "run", "final.safetensors")), readParams(t, filepath.Join(dir, "train", "final.safetensors")), 1e-5)

	// three cpu workers for two cpu stages: the third is refused
	_, errs := kindsRunFailing(t, model, planPath, "kinds2", filepath.Join(dir, "refused"), []string{"cpu", "cpu", "cpu"})
	if !strings.Contains(errs, "computes as cpu, but no stage left to take runs on cpu") {
		t.Errorf("stderr %q does not refuse the third cpu worker", errs)
	}
}

// kindsRun runs plan planPath of model for 3 SGD steps with --workers
// external over a NATS server process, one worker per entry of profiles
// (--device-profile, a file relative to the plan's directory), and returns
// run's stdout and each worker's stderr; the run must exit with code.
func kindsRun(t *testing.T, model, planPath, runID, dump string, profiles []string, code int) (string, []string) {
	t.Helper()
	out, errs, logs := kindsRunCode(t, model, planPath, runID, dump, profiles)
	if code == 0 && errs != "" && out == "" {
		t.Fatalf("run: %s", errs)
	}
	return out, logs
}

// kindsRunFailing is kindsRun for a run that must exit 2; it returns its
// stdout and stderr.
func kindsRunFailing(t *testing.T, model, planPath, runID, dump string, profiles []string) (string, string) {
	t.Helper()
	out, errs, _ := kindsRunCode(t, model, planPath, runID, dump, profiles)
	return out, errs
}

func kindsRunCode(t *testing.T, model, planPath, runID, dump string, profiles []string) (string, string, []string) {
	t.Helper()
	self, _ := os.Executable()
	url, token, stop := startTestNATS(t)
	defer stop()
	var wg sync.WaitGroup
	var code int
	var out, errs string
	wg.Add(1)
	go func() {
		defer wg.Done()
		code, out, errs = gp(t, "", "run", planPath, "--model", model, "--steps", "3", "--optimizer", "sgd", "--lr", "0.05",
			"--nats", url, "--nats-token", token, "--workers", "external", "--run", runID, "--dump", dump, "--json", "--join-timeout", "60s")
	}()
	var procs []*exec.Cmd
	stderrs := make([]*bytes.Buffer, len(profiles))
	for i, prof := range profiles {
		if strings.HasSuffix(prof, ".json") {
			prof = filepath.Join(filepath.Dir(planPath), prof)
		}
		w := exec.Command(self, "worker", "--nats", url, "--run", runID, "--device-profile", prof)
		w.Env = append(os.Environ(), tokenEnv+"="+token)
		stderrs[i] = &bytes.Buffer{}
		w.Stderr = stderrs[i]
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, w)
		time.Sleep(100 * time.Millisecond) // join in this order
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the run did not finish")
	}
	logs := make([]string, len(procs))
	for i, w := range procs {
		if code != 0 {
			w.Process.Kill()
		}
		w.Wait()
		logs[i] = stderrs[i].String()
	}
	if code != 0 && code != 2 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	if code == 2 && len(logs) > 0 {
		return out, errs, logs
	}
	if code != 0 {
		t.Fatalf("run: exit %d: %s\n%s", code, errs, fmt.Sprint(logs))
	}
	return out, errs, logs
}

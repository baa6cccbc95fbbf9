package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/tensor"
)

// sweepProc is graphpipe sweep as one task: its stderr, and its stdout.
type sweepProc struct {
	*runProc
	stdout logBuffer
}

// slurmTask is the environment srun gives task rank of n on one node
// (localhost) of job job's step 0.
func slurmTask(job string, rank, n int) []string {
	return []string{"SLURM_JOB_ID=" + job, "SLURM_STEP_ID=0", fmt.Sprint("SLURM_PROCID=", rank), fmt.Sprint("SLURM_NTASKS=", n),
		"SLURM_NODEID=0", fmt.Sprint("SLURM_LOCALID=", rank), "SLURM_JOB_NODELIST=localhost"}
}

// sweepTaskProc starts graphpipe sweep as one task: this test binary, in
// dir, with env added to its own.
func sweepTaskProc(t *testing.T, dir string, env []string, args ...string) *sweepProc {
	t.Helper()
	self, _ := os.Executable()
	p := &sweepProc{runProc: &runProc{Cmd: exec.Command(self, append([]string{"sweep"}, args...)...)}}
	p.Dir, p.Env, p.Stderr, p.Stdout = dir, append(append(os.Environ(), "GRAPHPIPE_TEST_MAIN=1"), env...), &p.stderr, &p.stdout
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	return p
}

// sweepOnTasks starts a sweep on n faked Slurm tasks of a job of its own,
// task 0 last, and returns them by rank.
func sweepOnTasks(t *testing.T, dir string, n int, args ...string) ([]*sweepProc, string) {
	t.Helper()
	job := fmt.Sprint(time.Now().UnixNano() % 1e9)
	procs := make([]*sweepProc, n)
	for rank := n - 1; rank >= 0; rank-- {
		procs[rank] = sweepTaskProc(t, dir, slurmTask(job, rank, n), args...)
	}
	return procs, "slurm-" + job + "-0-0"
}

// TestSweepOnTasks (issue 51): 'srun --ntasks 4 graphpipe sweep SWEEP
// --run', its tasks faked: task 0 plans the sweep for the 4 tasks and runs
// it over the other 3, each an agent of the launch's pool, and one agent
// of its own; each job ends with the parameters `train` of that job alone
// makes (within 1e-5); every task exits 0 once task 0 says the sweep is
// over, and the rendezvous file is gone.
func TestSweepOnTasks(t *testing.T) {
	dir := t.TempDir()
	exportModel(t, dir, "mmt.json", "mmt", "--preset", "small")
	exportModel(t, dir, "mlp.json", "mlp", "--preset", "small")
	path := writeSweep(t, dir,
		`"name": "mmt", "model": "mmt.json", "steps": 4, "lr": 0.002`,
		`"name": "mlp", "model": "mlp.json", "steps": 4, "optimizer": "adamw", "lr": 0.003, "weight_decay": 0.01`)
	trains := map[string][]string{
		"mmt": {"mmt.json", "--optimizer", "adam", "--lr", "0.002"},
		"mlp": {"mlp.json", "--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01"},
	}
	out := filepath.Join(dir, "out")
	procs, key := sweepOnTasks(t, dir, 4, path, "--device", "cpu", "--run", "--out", out, "--json")
	for rank, p := range procs {
		if code := p.exitCode(t, 60*time.Second); code != 0 {
			t.Fatalf("task %d exited %d:\n%s", rank, code, p.errs())
		}
	}
	zero := procs[0].errs()
	if !strings.Contains(zero, "task 0 of 4 (SLURM_PROCID 0) runs sweep "+key+"; the other tasks serve as agents of pool "+key) {
		t.Fatalf("task 0 did not say it runs the sweep:\n%s", zero)
	}
	joined := 0
	for rank, p := range procs[1:] {
		errs := p.errs()
		if !strings.Contains(errs, "serving as an agent of pool "+key) || !strings.Contains(errs, "task 0 says the sweep is over") {
			t.Fatalf("task %d did not serve the sweep to its end:\n%s", rank+1, errs)
		}
		joined += strings.Count(errs, "joined run "+key+"-")
	}
	var s sweepOut
	if err := json.Unmarshal([]byte(procs[0].stdout.String()), &s); err != nil {
		t.Fatalf("%v: %s", err, procs[0].stdout.String())
	}
	widest := 0
	for _, j := range s.Jobs {
		widest = max(widest, j.Devices)
		if j.Measured == nil || j.Measured.State != "ended" {
			t.Fatalf("%s: %+v", j.Name, j.Measured)
		}
		want := filepath.Join(dir, "train-"+j.Name)
		tr := trains[j.Name]
		if code, _, errs := gp(t, "", append([]string{"train", filepath.Join(dir, tr[0]), "--steps", "4", "--dump", want}, tr[1:]...)...); code != 0 {
			t.Fatal(errs)
		}
		worst := sameParams(t, readParams(t, filepath.Join(out, j.Name, "final.safetensors")), readParams(t, filepath.Join(want, "final.safetensors")), 1e-5)
		t.Logf("%s: on %d devices, worst relative difference from train %.2g", j.Name, j.Devices, worst)
	}
	// a job on more than one device takes the other tasks' agents: all
	// but task 0's own
	if widest < 2 || joined < widest-1 {
		t.Fatalf("the widest job on %d devices, and the other tasks' agents joined %d jobs' workers:\n%s", widest, joined, zero)
	}
	if rv, _ := filepath.Glob(filepath.Join(dir, ".graphpipe-*")); len(rv) != 0 {
		t.Fatalf("the rendezvous file is left: %v", rv)
	}
}

// TestSweepOnTasksFailed: a sweep whose job fails (its data holds a NaN,
// which only reading the row finds: data that is no dataset is refused as
// the sweep is loaded) exits 1 in task 0, and the other tasks exit
// non-zero too, naming the sweep's failure.
func TestSweepOnTasksFailed(t *testing.T) {
	dir := t.TempDir()
	exportModel(t, dir, "mlp.json", "mlp", "--preset", "small")
	raw, err := os.ReadFile(synthData(t, filepath.Join(dir, "mlp.json"), 64, 0))
	if err != nil {
		t.Fatal(err)
	}
	es, _, err := tensor.DecodeSafetensors(raw)
	if err != nil {
		t.Fatal(err)
	}
	for i := range es {
		if es[i].F32 != nil {
			es[i].F32[0] = float32(math.NaN())
		}
	}
	bad, err := tensor.EncodeSafetensors(es, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(dir, "bad.safetensors"), string(bad))
	path := writeSweep(t, dir, `"name": "bad", "model": "mlp.json", "steps": 2, "data": "bad.safetensors"`)
	procs, key := sweepOnTasks(t, dir, 3, path, "--device", "cpu", "--run", "--out", filepath.Join(dir, "out"))
	if code := procs[0].exitCode(t, 60*time.Second); code != 1 || !strings.Contains(procs[0].errs(), `sweep: "bad" failed`) {
		t.Fatalf("task 0 exited %d:\n%s", code, procs[0].errs())
	}
	for rank, p := range procs[1:] {
		code := p.exitCode(t, 30*time.Second)
		if errs := p.errs(); code != 1 || !strings.Contains(errs, "graphpipe: sweep "+key+` failed: sweep: "bad" failed`) {
			t.Fatalf("task %d of the failed sweep exited %d:\n%s", rank+1, code, errs)
		}
	}
}

// TestSweepOnTasksRefused: flags that do not fit the tasks are exit 2 in
// one line naming the flag.
func TestSweepOnTasksRefused(t *testing.T) {
	dir := t.TempDir()
	exportModel(t, dir, "m.json", "mlp", "--preset", "small")
	path := writeSweep(t, dir, `"name": "a", "model": "m.json", "steps": 1`)
	cluster := filepath.Join(dir, "cluster.json")
	writeTestFile(t, cluster, `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 3, "device": "cpu"}]}`)
	run := []string{path, "--run", "--out", filepath.Join(dir, "out")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"--devices", []string{"--devices", "2"}, "--devices 2: the sweep's tasks are 3 (SLURM_NTASKS 3), one per device"},
		{"--devices-per-node", []string{"--devices-per-node", "1"}, "--devices-per-node 1: the sweep's tasks are 3 on each node (SLURM_NTASKS)"},
		{"--cluster", []string{"--cluster", cluster}, "--cluster " + cluster + ": a sweep of tasks plans for its tasks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := sweepTaskProc(t, dir, slurmTask("7", 1, 3), append(run, tc.args...)...)
			code := p.exitCode(t, 30*time.Second)
			first, _, _ := strings.Cut(p.errs(), "\n")
			if code != 2 || !strings.HasPrefix(first, "graphpipe: "+tc.want) || strings.Count(p.errs(), "\n") > 2 {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and a line starting %q", code, p.errs(), tc.want)
			}
		})
	}
}

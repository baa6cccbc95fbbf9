package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// sweepScript is the sbatch script of a sweep on the allocation's 3
// tasks, each line of its log labelled with the task's rank.
const sweepScript = `#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=3
#SBATCH --output=sweep-%j.log
srun --label graphpipe sweep sweep.json --device cpu --run --out out "$@"
`

// sweepJobs are the sweep's jobs, as the sweep file says them and as
// train's flags.
var sweepJobs = []struct{ name, spec string }{
	{"a", `"optimizer": "adamw", "lr": 0.003, "weight_decay": 0.01`},
	{"b", `"optimizer": "sgd", "lr": 0.01, "momentum": 0.9`},
}

var sweepTrain = map[string][]string{
	"a": {"--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01"},
	"b": {"--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9"},
}

// submitSweep submits sweepScript with args in a directory of its own: a
// sweep of sweepJobs on the small mlp, steps each.
func (r *slurmRun) submitSweep(t *testing.T, name string, steps int, args ...string) *job {
	t.Helper()
	j := &job{r: r, dir: filepath.Join(r.dir, name), prefix: "sweep"}
	if err := os.Mkdir(j.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exportModel(t, j.dir, "mlp.json", "mlp", "--preset", "small")
	var specs []string
	for _, s := range sweepJobs {
		specs = append(specs, fmt.Sprintf(`"name": %q, "model": "mlp.json", "steps": %d, %s`, s.name, steps, s.spec))
	}
	writeSweep(t, j.dir, specs...)
	if err := os.WriteFile(filepath.Join(j.dir, "sweep.sbatch"), []byte(sweepScript), 0o755); err != nil {
		t.Fatal(err)
	}
	j.start(t, "sweep.sbatch", args...)
	return j
}

// sameAsTrain checks that each job of the sweep ended with the parameters
// `train` of that job alone makes (within 1e-5), and returns the sweep as
// it ran (DIR/sweep.json).
func (j *job) sameAsTrain(t *testing.T, steps int) sweepOut {
	t.Helper()
	var s sweepOut
	data, err := os.ReadFile(filepath.Join(j.dir, "out", "sweep.json"))
	if err != nil || json.Unmarshal(data, &s) != nil {
		t.Fatalf("no sweep.json (%v); the job's log:\n%s", err, j.log(t))
	}
	for _, sj := range s.Jobs {
		want := filepath.Join(j.dir, "train-"+sj.Name)
		if code, _, errs := gp(t, "", append([]string{"train", filepath.Join(j.dir, "mlp.json"), "--steps", strconv.Itoa(steps), "--dump", want}, sweepTrain[sj.Name]...)...); code != 0 {
			t.Fatal(errs)
		}
		got := filepath.Join(j.dir, "out", sj.Name, "final.safetensors")
		if _, err := os.Stat(got); err != nil {
			t.Fatalf("%s: %v; the job's log:\n%s", sj.Name, err, j.log(t))
		}
		worst := sameParams(t, readParams(t, got), readParams(t, filepath.Join(want, "final.safetensors")), 1e-5)
		t.Logf("%s: on %d devices, worst relative difference from train %.2g", sj.Name, sj.Devices, worst)
	}
	if rv, _ := filepath.Glob(filepath.Join(j.dir, ".graphpipe-*")); len(rv) != 0 {
		t.Fatalf("the rendezvous file is left: %v", rv)
	}
	return s
}

// sweep: 'srun graphpipe sweep SWEEP --run' on the allocation's 3 tasks:
// task 0 runs the sweep, the other two serve as agents until it is over
// and exit 0; each job ends with train's parameters.
func (r *slurmRun) sweep(t *testing.T) {
	j := r.submitSweep(t, "sweep", 6)
	if code := j.wait(t); code != 0 {
		t.Fatalf("sbatch --wait exited %d: %s\nthe job's log:\n%s", code, j.out.String(), j.log(t))
	}
	log := j.log(t)
	key := "slurm-" + j.id(t) + "-0-0"
	if !strings.Contains(log, "task 0 of 3 (SLURM_PROCID 0) runs sweep "+key) || strings.Count(log, "task 0 says the sweep is over: leaving") != 2 {
		t.Fatalf("the log does not say task 0 runs the sweep and 2 tasks serve it to its end:\n%s", log)
	}
	j.sameAsTrain(t, 6)
}

// sweepTaskKilled: with --restarts, a task SIGKILLed while its agent
// trains a job (not merely joined it) is a lost agent: that job restarts from its checkpoint on
// the agent left and ends with train's parameters; the sweep ends well.
func (r *slurmRun) sweepTaskKilled(t *testing.T) {
	const steps = 400
	j := r.submitSweep(t, "sweep-killed", steps, "--restarts", "1", "--checkpoint-every", "20", "--heartbeat-timeout", "1s")
	id := j.id(t)
	// the task whose agent trains: one that joined too late to confirm its
	// offer is released, not trained on
	training := regexp.MustCompile(`(?m)^\s*([12]): graphpipe worker: run slurm-` + id + `-0-0-(\w+) \(generation 1\): training`)
	j.waitLog(t, "(generation 1): training")
	m := training.FindStringSubmatch(j.log(t))
	if m == nil {
		t.Fatalf("no task but 0 trains a job:\n%s", j.log(t))
	}
	rank, _ := strconv.Atoi(m[1])
	pid := taskPIDOf(t, id, rank, "\x00sweep\x00sweep.json\x00")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code := j.wait(t) // srun's status is the killed task's
	log := j.log(t)
	host, _ := os.Hostname()
	if !strings.Contains(log, fmt.Sprintf("task %d (SLURM_PROCID %d, host %s, pid %d) is gone: its agent is lost to the sweep", rank, rank, host, pid)) {
		t.Fatalf("sbatch exited %d; the log does not say task %d is gone:\n%s", code, rank, log)
	}
	runLog, _ := os.ReadFile(filepath.Join(j.dir, "out", m[2], "run.log"))
	if !strings.Contains(string(runLog), "restarting the workers as generation 2") {
		t.Fatalf("job %s, whose agent task %d was, did not restart:\n%s\nthe job's log:\n%s", m[2], rank, runLog, log)
	}
	s := j.sameAsTrain(t, steps)
	for _, sj := range s.Jobs {
		if sj.Measured == nil || sj.Measured.State != "ended" {
			t.Fatalf("%s: %+v", sj.Name, sj.Measured)
		}
	}
	t.Logf("task %d (pid %d) killed while its agent trained %s; sbatch exited %d; the job restarted and ended as train's", rank, pid, m[2], code)
}

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
)

// sweepOut is the part of sweep --json the tests read.
type sweepOut struct {
	Format      string  `json:"format"`
	MakespanS   float64 `json:"makespan_s"`
	OneAtATimeS float64 `json:"one_at_a_time_s"`
	EqualSplitS float64 `json:"equal_split_s"`
	LowerBoundS float64 `json:"lower_bound_s"`
	PeakDevices int     `json:"peak_devices"`
	Measured    float64 `json:"measured_makespan_s"`
	Replans     int     `json:"replans"`
	Jobs        []struct {
		Name       string  `json:"name"`
		Steps      int     `json:"steps"`
		Devices    int     `json:"devices"`
		DeviceIDs  []int   `json:"device_ids"`
		StartS     float64 `json:"start_s"`
		EndS       float64 `json:"end_s"`
		IterationS float64 `json:"iteration_s"`
		Measured   *struct {
			State string  `json:"state"`
			Run   string  `json:"run"`
			EndS  float64 `json:"end_s"`
		} `json:"measured"`
	} `json:"jobs"`
}

// writeSweep writes a sweep file of jobs (each a JSON object's fields) in
// dir and returns its path.
func writeSweep(t *testing.T, dir string, jobs ...string) string {
	t.Helper()
	path := filepath.Join(dir, "sweep.json")
	writeTestFile(t, path, `{"format": "graphpipe/sweep@1", "jobs": [{`+strings.Join(jobs, "}, {")+`}]}`)
	return path
}

// exportModel writes zoo model name with flags to dir/file.
func exportModel(t *testing.T, dir, file, name string, flags ...string) {
	t.Helper()
	if code, _, errs := gp(t, "", append([]string{"models", "export", name, "-o", filepath.Join(dir, file)}, flags...)...); code != 0 {
		t.Fatal(errs)
	}
}

// TestSweepPaperModels (issue 51): 8 jobs of the paper's models at two
// sizes, several learning rates, optimizers and step counts on 32 v100:
// the schedule ends at least 1.4× sooner than one job at a time; no two
// jobs overlapping in time share a device, so at no moment do the jobs
// hold more than 32; each job's end - start is its steps times the
// iteration `graphpipe search` predicts for it on that many devices.
func TestSweepPaperModels(t *testing.T) {
	dir := t.TempDir()
	exportModel(t, dir, "mmt.json", "mmt")
	exportModel(t, dir, "mmt-half.json", "mmt", "--layers", "4")
	exportModel(t, dir, "dlrm.json", "dlrm")
	exportModel(t, dir, "dlrm-half.json", "dlrm", "--branches", "4", "--sparse-branches", "4")
	exportModel(t, dir, "candle-uno.json", "candle-uno")
	exportModel(t, dir, "candle-half.json", "candle-uno", "--branches", "4")
	type job struct{ name, model, optimizer, extra string }
	jobs := []job{
		{"mmt-lr1e-4", "mmt.json", "adam", `"steps": 2000, "lr": 0.0001`},
		{"mmt-lr3e-4", "mmt.json", "adam", `"steps": 2000, "lr": 0.0003`},
		{"mmt-half", "mmt-half.json", "adam", `"steps": 4000, "lr": 0.0003`},
		{"dlrm-sgd", "dlrm.json", "sgd", `"steps": 20000, "lr": 0.01, "momentum": 0.9`},
		{"dlrm-adam", "dlrm.json", "adam", `"steps": 20000, "lr": 0.001`},
		{"dlrm-half", "dlrm-half.json", "adam", `"steps": 40000, "lr": 0.001`},
		{"candle-uno", "candle-uno.json", "adam", `"steps": 30000, "lr": 0.0001`},
		{"candle-half", "candle-half.json", "adam", `"steps": 30000, "lr": 0.0001, "after": ["candle-uno"]`},
	}
	var specs []string
	for _, j := range jobs {
		specs = append(specs, fmt.Sprintf(`"name": %q, "model": %q, "optimizer": %q, %s`, j.name, j.model, j.optimizer, j.extra))
	}
	path := writeSweep(t, dir, specs...)
	code, out, errs := gp(t, "", "sweep", path, "--devices", "32", "--device", "v100", "--json", "--chart", filepath.Join(dir, "sweep.svg"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var s sweepOut
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("makespan %.0f s, one at a time %.0f s (%.2f×), equal split %.0f s (%.2f×), lower bound %.0f s",
		s.MakespanS, s.OneAtATimeS, s.OneAtATimeS/s.MakespanS, s.EqualSplitS, s.EqualSplitS/s.MakespanS, s.LowerBoundS)
	if s.Format != sweepFormat || s.OneAtATimeS < 1.4*s.MakespanS || s.PeakDevices > 32 || s.LowerBoundS > s.MakespanS {
		t.Fatalf("%+v", s)
	}
	for i, a := range s.Jobs {
		for _, b := range s.Jobs[i+1:] {
			if a.StartS < b.EndS-1e-6 && b.StartS < a.EndS-1e-6 && shareDevice(a.DeviceIDs, b.DeviceIDs) {
				t.Fatalf("%s and %s share a device at once", a.Name, b.Name)
			}
		}
		if a.Name == "candle-half" && a.StartS < s.Jobs[6].EndS {
			t.Fatalf("candle-half starts at %g s, before candle-uno ends at %g s", a.StartS, s.Jobs[6].EndS)
		}
		iter := searchedIteration(t, filepath.Join(dir, jobs[i].model), a.Devices, jobs[i].optimizer)
		if got, want := a.EndS-a.StartS, float64(a.Steps)*iter; math.Abs(got-want) > 0.05*want {
			t.Errorf("%s on %d devices: %g s, but %d steps of search's %g s make %g s", a.Name, a.Devices, got, a.Steps, iter, want)
		}
	}
	if svg, err := os.ReadFile(filepath.Join(dir, "sweep.svg")); err != nil || !strings.Contains(string(svg), "dlrm-half") {
		t.Errorf("the chart: %v", err)
	}
}

// shareDevice says whether two device lists meet.
func shareDevice(a, b []int) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// searchedIteration is `graphpipe search MODEL --devices k --device v100`'s
// iteration time for the optimizer's state.
func searchedIteration(t *testing.T, model string, k int, optimizer string) float64 {
	t.Helper()
	code, out, errs := gp(t, "", "search", model, "--devices", strconv.Itoa(k), "--device", "v100", "--optimizer", optimizer, "--json")
	if code != 0 {
		t.Fatalf("search %s on %d: %s", model, k, errs)
	}
	var p struct {
		IterationS float64 `json:"iteration_s"`
	}
	json.Unmarshal([]byte(out), &p)
	return p.IterationS
}

// TestSweepRefuses: a sweep file that is not whole is exit 2 naming the
// job and the field, and flags that do not go together are refused.
func TestSweepRefuses(t *testing.T) {
	dir := t.TempDir()
	exportModel(t, dir, "m.json", "mlp", "--preset", "small")
	if code, _, errs := gp(t, "", "data", "synth", filepath.Join(dir, "m.json"), "--samples", "32", "-o", filepath.Join(dir, "d.safetensors")); code != 0 {
		t.Fatal(errs)
	}
	cases := []struct {
		name string
		job  string
		args []string
		says string
	}{
		{"steps", `"name": "a", "model": "m.json", "steps": 0`, nil, `job "a": steps: must be between 1`},
		{"unknown field", `"name": "a", "model": "m.json", "steps": 1, "lerning_rate": 1`, nil, `unknown field "lerning_rate"`},
		{"optimizer", `"name": "a", "model": "m.json", "steps": 1, "optimizer": "lion"`, nil, `job "a": optimizer: unknown optimizer "lion"`},
		{"momentum", `"name": "a", "model": "m.json", "steps": 1, "momentum": 0.9`, nil, `job "a": momentum: adam has no momentum`},
		{"lr schedule", `"name": "a", "model": "m.json", "steps": 1, "lr_schedule": "step"`, nil, `job "a": lr_schedule:`},
		{"model", `"name": "a", "model": "nowhere.json", "steps": 1`, nil, `job "a": model: `},
		{"cycle", `"name": "a", "model": "m.json", "steps": 1, "after": ["b"]}, {"name": "b", "model": "m.json", "steps": 1, "after": ["a"]`, nil, "in a cycle"},
		{"micro-batch", `"name": "a", "model": "m.json", "steps": 1, "micro_batch": 5`, nil, `job "a": --micro-batch: 5 does not divide`},
		{"op times flag", `"name": "a", "model": "m.json", "steps": 1`, []string{"--op-times", "x.json"}, "--op-times: op times are one model's"},
		{"out without run", `"name": "a", "model": "m.json", "steps": 1`, []string{"--out", dir}, "--out: only with --run"},
		{"run without out", `"name": "a", "model": "m.json", "steps": 1`, []string{"--run"}, "--run: needs --out DIR"},
		{"external workers", `"name": "a", "model": "m.json", "steps": 1`, []string{"--run", "--out", dir, "--workers", "external"}, "use local or pool:NAME"},
		{"tasks without a task environment", `"name": "a", "model": "m.json", "steps": 1`, []string{"--run", "--out", dir, "--workers", "tasks"}, "--workers tasks: no task environment here"},
		{"tasks without --run", `"name": "a", "model": "m.json", "steps": 1`, []string{"--workers", "tasks"}, "--workers: only with --run"},
		// the counts planned for were once taken before the devices were
		// checked: past 4096 a job's search named a count it tried (5000),
		// and a count near 2^63 never ended
		// its run refused it: the sweep once planned it and failed it as
		// it started, exit 1, after the jobs before it had trained
		{"precision on the cpu backend", `"name": "a", "model": "m.json", "steps": 1, "precision": "bf16"`, []string{"--run", "--out", dir}, `job "a": precision bf16: the cpu backend computes in float32 only`},
		// a dataset its run could not read was found as the job started
		// (exit 1, after the jobs before it had trained)
		{"data missing", `"name": "a", "model": "m.json", "steps": 1, "data": "nowhere.safetensors"`, []string{"--run", "--out", dir}, `job "a": data `},
		{"data not the model's", `"name": "a", "model": "m.json", "steps": 1, "data": "m.json"`, []string{"--run", "--out", dir}, `job "a": data `},
		{"data under a batch", `"name": "a", "model": "m.json", "steps": 1, "batch": 64, "data": "d.safetensors"`, []string{"--run", "--out", dir}, "d.safetensors: 32 samples do not make one batch of 64"},
		{"devices", `"name": "a", "model": "m.json", "steps": 1`, []string{"--devices", "100000"}, "--devices: must be between 1 and 4096, got 100000"},
		{"devices past 2^62", `"name": "a", "model": "m.json", "steps": 1`, []string{"--devices", "9223372036854775807"}, "got 9223372036854775807"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeSweep(t, dir, c.job)
			code, out, errs := gp(t, "", append([]string{"sweep", path, "--devices", "2", "--device", "cpu"}, c.args...)...)
			if code != 2 || out != "" || !strings.Contains(errs, c.says) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 saying %q", code, out, errs, c.says)
			}
		})
	}
}

// TestSweepRun (issue 51): three small jobs on 4 CPU devices trained by
// sweep --run each end with the parameters `train` of that job alone
// makes (within 1e-5), every job's worker killed once on the way (with
// --restarts 1: a restart from its checkpoint, not a lost job), each
// job's outputs under DIR/NAME as run --dump writes them beside its run
// --json, and the JSON carries the measured makespan.
func TestSweepRun(t *testing.T) {
	dir := t.TempDir()
	exportModel(t, dir, "mmt.json", "mmt", "--preset", "small")
	exportModel(t, dir, "candle.json", "candle-uno", "--preset", "small")
	exportModel(t, dir, "mlp.json", "mlp", "--preset", "small")
	type job struct {
		name, model string
		train       []string
	}
	jobs := []job{
		{"mmt", "mmt.json", []string{"--optimizer", "adam", "--lr", "0.002"}},
		{"candle", "candle.json", []string{"--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9"}},
		{"mlp.2", "mlp.json", []string{"--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.01"}},
	}
	path := writeSweep(t, dir,
		`"name": "mmt", "model": "mmt.json", "steps": 6, "lr": 0.002`,
		`"name": "candle", "model": "candle.json", "steps": 6, "optimizer": "sgd", "lr": 0.01, "momentum": 0.9`,
		`"name": "mlp.2", "model": "mlp.json", "steps": 6, "optimizer": "adamw", "lr": 0.003, "weight_decay": 0.01, "after": ["candle"]`)
	os.Setenv(runtime.KillEnv, "1:0:3:before-step") // worker 0 of each job's first generation, in its third step
	defer os.Unsetenv(runtime.KillEnv)
	out := filepath.Join(dir, "out")
	code, stdout, errs := gp(t, "", "sweep", path, "--devices", "4", "--device", "cpu", "--run", "--out", out, "--json",
		"--restarts", "1", "--checkpoint-every", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	os.Unsetenv(runtime.KillEnv)
	var s sweepOut
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatal(err)
	}
	if s.Measured <= 0 {
		t.Fatalf("measured makespan %g", s.Measured)
	}
	t.Logf("planned makespan %.3g s, measured %.3g s (%.2f×), %d re-plans", s.MakespanS, s.Measured, s.Measured/s.MakespanS, s.Replans)
	for i, j := range jobs {
		got := s.Jobs[i]
		if got.Measured == nil || got.Measured.State != "ended" || got.Measured.Run != filepath.Join(out, j.name, "run.json") {
			t.Fatalf("%s: %+v", j.name, got.Measured)
		}
		var r struct {
			Recoveries []json.RawMessage `json:"recoveries"`
		}
		data, err := os.ReadFile(got.Measured.Run)
		if err != nil || json.Unmarshal(data, &r) != nil || len(r.Recoveries) != 1 {
			t.Fatalf("%s: run.json %v, %d recoveries, want the one restart", j.name, err, len(r.Recoveries))
		}
		want := filepath.Join(dir, "train-"+j.name)
		if code, _, errs := gp(t, "", append([]string{"train", filepath.Join(dir, j.model), "--steps", "6", "--dump", want}, j.train...)...); code != 0 {
			t.Fatal(errs)
		}
		worst := sameParams(t, readParams(t, filepath.Join(out, j.name, "final.safetensors")), readParams(t, filepath.Join(want, "final.safetensors")), 1e-5)
		t.Logf("%s: on %d devices, worst relative difference from train %.2g", j.name, got.Devices, worst)
		for _, f := range []string{"losses.json", "init.safetensors", "plan.json", "run.log"} {
			if _, err := os.Stat(filepath.Join(out, j.name, f)); err != nil {
				t.Error(err)
			}
		}
	}
	for _, f := range []string{"sweep.json", "sweep.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestSweepRunFailure: a job that fails skips the job that waits for it,
// the other trains, and the sweep exits 1 naming both.
func TestSweepRunFailure(t *testing.T) {
	dir := t.TempDir()
	exportModel(t, dir, "mlp.json", "mlp", "--preset", "small")
	path := writeSweep(t, dir,
		`"name": "a", "model": "mlp.json", "steps": 3`,
		`"name": "b", "model": "mlp.json", "steps": 3, "after": ["a"]`,
		`"name": "c", "model": "mlp.json", "steps": 3, "seed": 9`)
	os.Setenv("GRAPHPIPE_TEST_CRASH_WORKER", "1") // every worker dies at once: every job fails
	defer os.Unsetenv("GRAPHPIPE_TEST_CRASH_WORKER")
	code, stdout, errs := gp(t, "", "sweep", path, "--devices", "2", "--device", "cpu", "--run", "--out", filepath.Join(dir, "out"), "--json")
	if code != 1 || !strings.Contains(errs, `"a", "c" failed; skipped, waiting for a job that failed: "b"`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var s sweepOut
	if err := json.Unmarshal([]byte(stdout), &s); err != nil || s.Jobs[1].Measured.State != "skipped" || s.Jobs[0].Measured.State != "failed" {
		t.Fatalf("%v: %s", err, stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "c", "model.json")); err != nil {
		t.Errorf("a job with a seed of its own runs its model reseeded: %v", err)
	}
}

// TestSweepCluster: a cluster file of one kind is its devices (the JSON
// names them, in snake_case throughout); one of two kinds is refused.
func TestSweepCluster(t *testing.T) {
	dir := t.TempDir()
	exportModel(t, dir, "m.json", "mlp", "--preset", "small")
	path := writeSweep(t, dir, `"name": "a", "model": "m.json", "steps": 10`, `"name": "b", "model": "m.json", "steps": 20`)
	one := filepath.Join(dir, "one.json")
	writeTestFile(t, one, `{"format": "graphpipe/cluster@1", "nodes": [{"count": 2, "devices_per_node": 2, "device": "cpu"}]}`)
	code, out, errs := gp(t, "", "sweep", path, "--cluster", one, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["devices"] != 4.0 || doc["devices_per_node"] != 2.0 || doc["device"] != "cpu" || doc["format"] != sweepFormat {
		t.Fatalf("%s", out)
	}
	if bad := badKeys(doc, ""); len(bad) > 0 {
		t.Errorf("keys not in snake_case: %v", bad)
	}
	two := filepath.Join(dir, "two.json")
	writeTestFile(t, two, `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 2, "device": "v100"}, {"count": 1, "devices_per_node": 2, "device": "a100"}]}`)
	if code, _, errs := gp(t, "", "sweep", path, "--cluster", two); code != 2 || !strings.Contains(errs, "a sweep plans devices of one kind, and it has 2") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// TestOnBusyNode: where a profile measured core sharing, a sweep's job
// meets every device of its node busy, whatever its own count; a profile
// that measured none (a GPU's) is priced as it is.
func TestOnBusyNode(t *testing.T) {
	cpu := plan.Profiles["cpu"]
	cpu.CoreSlowdown = plan.NewSlowdowns(1, 1.2, 1.7, 2.4)
	busy := onBusyNode(cpu, 4)
	for k := 1; k <= 4; k++ {
		if busy.Slowdown(k) != 2.4 {
			t.Errorf("%d workers: ×%g, want the busy node's ×2.4", k, busy.Slowdown(k))
		}
	}
	if busy.Slowdown(8) != 4.8 { // past the node, time-sliced as before
		t.Errorf("8 workers: ×%g", busy.Slowdown(8))
	}
	if v := plan.Profiles["v100"]; onBusyNode(v, 4) != v {
		t.Error("a GPU's profile changed")
	}
}

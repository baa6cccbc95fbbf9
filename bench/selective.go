package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/graphpipe/graphpipe/chart"
)

// The Selective-Backprop section: graphpipe train and a 3-stage graphpipe
// run on scikit-learn's handwritten digits (digits.go), each with and
// without --selective-backprop 2, evaluated after every epoch: the
// accuracy against the training time (evaluations aside) and against the
// samples that had a backward pass, and the time to a target accuracy.

// sbSetup is what the section trains: the model, the data's split, the
// run's length and selectivity.
type sbSetup struct {
	layers, hidden, batch int
	micro                 int // the pipeline's micro-batch
	train                 int // images to train on; the rest evaluate
	epochs, rounds        int
	beta                  float64
}

func sbSetupFor(c Config) sbSetup {
	s := sbSetup{layers: 3, hidden: 512, batch: 64, micro: 8, train: 1437, epochs: 20, rounds: 3, beta: 2}
	if c.Quick {
		s.epochs, s.rounds = 6, 1
	}
	return s
}

// sbArm is one way of training: train or run, with or without selective
// backprop; what it measured, by evaluation (after each epoch).
type sbArm struct {
	label string
	args  []string
	sb    bool
	acc   []float64   // each evaluation's accuracy
	steps []int       // the steps before each evaluation
	secs  [][]float64 // per round, the training seconds before each evaluation
	kept  []int64     // the samples with a backward pass before each evaluation
	seen  []int64     // the samples before each evaluation
	step  []float64   // per round, the median step's seconds
	plan  string      // a run's stages, as explain words them
}

// sbSummary is what the section reads of train --json and run --json.
type sbSummary struct {
	Evals []struct {
		Step     int     `json:"step"`
		Accuracy float64 `json:"accuracy"`
	} `json:"evals"`
	IterationS      []float64 `json:"iteration_s"`
	Batch           int       `json:"batch_size"`
	BackpropPerStep []int     `json:"backprop_per_step"`
	Samples         int64     `json:"samples"`
	BackpropSamples int64     `json:"backprop_samples"`
}

// SelectiveSection measures Selective-Backprop on real data (see above).
// Without scikit-learn's digits on this machine (Debian's
// python3-sklearn), the section says so and measures nothing.
func SelectiveSection(c Config) (*Section, error) {
	s := &Section{Name: "selective-backprop", Title: "Selective-Backprop on real data: scikit-learn's handwritten digits",
		Columns: []string{"training", "final accuracy", "backprop samples", "median step (ms)", "target", "time to target (s)", "epochs to target", "backprop samples to target"}}
	path := findDigits()
	if path == "" {
		s.Notes = append(s.Notes, "Not measured: scikit-learn's digits are not on this machine (apt-get install python3-sklearn puts them in "+DigitsPaths[0]+").")
		return s, nil
	}
	set := sbSetupFor(c)
	dir, bin, err := graphpipeWorkdir("graphpipe-sb-bench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	files, err := writeSBFiles(dir, path, set)
	if err != nil {
		return nil, err
	}
	arms := sbArms(set, files)
	for r := 0; r < set.rounds; r++ {
		for _, a := range arms {
			c.Log("selective backprop: round %d of %d: %s", r+1, set.rounds, a.label)
			if err := a.measure(bin, set); err != nil {
				return nil, err
			}
		}
	}
	for _, a := range arms[2:] {
		if a.plan, err = sbPlan(bin, files, set, a.sb); err != nil {
			return nil, err
		}
	}
	s.Intro = sbIntro(set, path, arms)
	target := sbTarget(arms[0])
	for _, a := range arms {
		s.Rows = append(s.Rows, a.row(target))
	}
	s.Notes = sbNotes(arms, target)
	s.Chart = sbChart("selective-backprop-time", "Digits: evaluation accuracy against training time", arms, func(a *sbArm) []float64 { return a.medianSecs() })
	s.Below = []*Chart{sbChart("selective-backprop-samples", "Digits: evaluation accuracy against samples with a backward pass", arms,
		func(a *sbArm) []float64 { return intsToFloats(a.kept) })}
	return s, nil
}

// sbFiles are the section's inputs on disk.
type sbFiles struct{ model, train, eval string }

// writeSBFiles writes the model and the digits, split by a fixed seed.
func writeSBFiles(dir, path string, set sbSetup) (sbFiles, error) {
	f := sbFiles{filepath.Join(dir, "digits-mlp.json"), filepath.Join(dir, "train.safetensors"), filepath.Join(dir, "eval.safetensors")}
	d, err := loadDigits(path)
	if err != nil {
		return f, err
	}
	tr, ev := d.split(1, set.train)
	if err := tr.write(f.train); err != nil {
		return f, err
	}
	if err := ev.write(f.eval); err != nil {
		return f, err
	}
	return f, os.WriteFile(f.model, []byte(digitsMLP(set.layers, set.hidden, set.batch)), 0o644)
}

// sbArms are the four ways of training, each an epoch between evaluations.
func sbArms(set sbSetup, f sbFiles) []*sbArm {
	perEpoch := set.train / set.batch
	common := []string{"--data", f.train, "--eval-data", f.eval, "--epochs", fmt.Sprint(set.epochs), "--eval-every", fmt.Sprint(perEpoch), "--json"}
	sb := []string{"--selective-backprop", fmt.Sprint(set.beta)}
	run := []string{"run", f.model, "--devices", "3", "--device", "cpu", "--micro-batch", fmt.Sprint(set.micro)}
	train := []string{"train", f.model}
	cat := func(parts ...[]string) []string { return slices.Concat(parts...) }
	return []*sbArm{
		{label: "train", args: cat(train, common)},
		{label: fmt.Sprintf("train --selective-backprop %g", set.beta), args: cat(train, common, sb), sb: true},
		{label: "run, 3 stages", args: cat(run, common)},
		{label: fmt.Sprintf("run, 3 stages, --selective-backprop %g", set.beta), args: cat(run, common, sb), sb: true},
	}
}

// measure runs the arm once and adds what it measured.
func (a *sbArm) measure(bin string, set sbSetup) error {
	out, err := graphpipeOut(bin, a.args...)
	if err != nil {
		return err
	}
	var sum sbSummary
	if err := json.Unmarshal(out, &sum); err != nil {
		return fmt.Errorf("graphpipe %s: %v", a.args[0], err)
	}
	var acc, secs []float64
	var steps []int
	var kept, seen []int64
	for _, e := range sum.Evals {
		if e.Step > len(sum.IterationS) {
			return fmt.Errorf("graphpipe %s: an evaluation after step %d of %d", a.args[0], e.Step, len(sum.IterationS))
		}
		t, k := 0.0, int64(0)
		for i := 0; i < e.Step; i++ {
			t += sum.IterationS[i]
			if sum.BackpropPerStep != nil {
				k += int64(sum.BackpropPerStep[i])
			} else {
				k += int64(sum.Batch)
			}
		}
		acc, secs, steps, kept = append(acc, e.Accuracy), append(secs, t), append(steps, e.Step), append(kept, k)
		seen = append(seen, int64(e.Step)*int64(sum.Batch))
	}
	if a.acc != nil && !slices.Equal(a.acc, acc) {
		return fmt.Errorf("graphpipe %s: the accuracies changed between rounds", a.args[0])
	}
	a.acc, a.steps, a.kept, a.seen = acc, steps, kept, seen
	a.secs = append(a.secs, secs)
	a.step = append(a.step, medianOf(sum.IterationS))
	return nil
}

// medianSecs is, per evaluation, the median over the rounds of the
// training seconds before it.
func (a *sbArm) medianSecs() []float64 {
	out := make([]float64, len(a.acc))
	for i := range out {
		var v []float64
		for _, r := range a.secs {
			v = append(v, r[i])
		}
		out[i] = medianOf(v)
	}
	return out
}

// reach is the first evaluation at or above target, -1 for none.
func (a *sbArm) reach(target float64) int {
	for i, v := range a.acc {
		if v >= target {
			return i
		}
	}
	return -1
}

// row is the arm's row of the table.
func (a *sbArm) row(target float64) []string {
	last := len(a.acc) - 1
	r := []string{a.label, fmt.Sprintf("%.4f", a.acc[last]), sbShare(a.kept[last], a.seen[last]), fmt.Sprintf("%.3g", 1000*medianOf(a.step)), fmt.Sprintf("%.3f", target)}
	if i := a.reach(target); i >= 0 {
		return append(r, fmt.Sprintf("%.3g", a.medianSecs()[i]), fmt.Sprint(i+1), fmt.Sprint(a.kept[i]))
	}
	return append(r, "not reached", "-", "-")
}

// sbShare is n of samples, with its share.
func sbShare(n, samples int64) string {
	return fmt.Sprintf("%d (%.1f%%)", n, 100*float64(n)/float64(max(1, samples)))
}

// sbTarget is the accuracy the times are measured to: standard training's
// final accuracy less a point, rounded down to half a point.
func sbTarget(full *sbArm) float64 {
	return math.Floor((full.acc[len(full.acc)-1]-0.01)*200) / 200
}

func sbIntro(set sbSetup, path string, arms []*sbArm) string {
	return fmt.Sprintf("scikit-learn's handwritten digits (%s, from Debian's python3-sklearn: 1797 8×8 images of 0-9, pixels scaled to [0, 1]), "+
		"shuffled by a fixed seed into %d to train on and %d to evaluate on; an MLP of %d linear+ReLU layers of %d and a linear head "+
		"(two products a layer backward, one forward: the backward dominates), batch %d, Adam at 1e-3, %d epochs, evaluated after each. "+
		"`graphpipe train` in one process and `graphpipe run --devices 3 --device cpu --micro-batch %d` (3 stages, one worker process each, over NATS), "+
		"each with and without `--selective-backprop %g` (window 1024, no warm-up). Times are the steps' own (train --json's and run --json's iteration_s, "+
		"evaluations aside), the median over %d rounds; the accuracies are the same every round. Run stages: %s; %s.",
		path, set.train, 1797-set.train, set.layers, set.hidden, set.batch, set.epochs, set.micro, set.beta, set.rounds, arms[2].plan, arms[3].plan)
}

// sbNotes state the claims with the figures measured.
func sbNotes(arms []*sbArm, target float64) []string {
	full, sb := arms[0], arms[1]
	last := len(full.acc) - 1
	note := fmt.Sprintf("After %d epochs, train --selective-backprop reaches %.2f%% against standard training's %.2f%% (%+.2f points) with %.1f%% of its backprop samples",
		last+1, 100*sb.acc[last], 100*full.acc[last], 100*(sb.acc[last]-full.acc[last]), 100*float64(sb.kept[last])/float64(full.kept[last]))
	var ratios []string
	for _, pair := range [][2]*sbArm{{arms[0], arms[1]}, {arms[2], arms[3]}} {
		a, b := pair[0].reach(target), pair[1].reach(target)
		if a < 0 || b < 0 {
			continue
		}
		ratios = append(ratios, fmt.Sprintf("%s %.3g s against %.3g s (%.2f×)", pair[1].label, pair[1].medianSecs()[b], pair[0].medianSecs()[a], pair[0].medianSecs()[a]/pair[1].medianSecs()[b]))
	}
	note += fmt.Sprintf("; to %.1f%% accuracy: %s.", 100*target, strings.Join(ratios, "; "))
	same := slices.Equal(arms[1].acc, arms[3].acc) && slices.Equal(arms[1].kept, arms[3].kept)
	return []string{note, fmt.Sprintf("The 3-stage run with selective backprop keeps the samples train keeps and evaluates as it does: %v (every evaluation's accuracy and backprop samples equal).", same)}
}

// sbChart draws accuracy against x, a line per arm.
func sbChart(name, title string, arms []*sbArm, x func(*sbArm) []float64) *Chart {
	line := &chart.Line{Title: title}
	for _, a := range arms {
		line.Series = append(line.Series, chart.Series{Label: a.label, X: x(a), Y: a.acc})
	}
	return lineChart(name, line)
}

// sbPlan is the 3-stage run's plan as the section words it: the ops of each
// stage, on how many devices.
func sbPlan(bin string, f sbFiles, set sbSetup, sb bool) (string, error) {
	args := []string{"search", f.model, "--devices", "3", "--device", "cpu", "--micro-batch", fmt.Sprint(set.micro), "--json"}
	if sb {
		args = append(args, "--selective-backprop", fmt.Sprint(set.beta))
	}
	out, err := graphpipeOut(bin, args...)
	if err != nil {
		return "", err
	}
	var p struct {
		Stages      int     `json:"stages"`
		IterationS  float64 `json:"iteration_s"`
		BackpropFra float64 `json:"backprop_fraction"`
	}
	if err := json.Unmarshal(out, &p); err != nil {
		return "", err
	}
	what := "without"
	if sb {
		what = fmt.Sprintf("priced for %.0f%% backprop", 100*p.BackpropFra)
	}
	return fmt.Sprintf("%s, %d stages, %.3g ms an iteration predicted", what, p.Stages, 1000*p.IterationS), nil
}

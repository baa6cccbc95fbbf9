package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// comparison is `graphpipe compare --json`'s object.
type comparison struct {
	Format   string        `json:"format"`   // compareFormat
	Baseline string        `json:"baseline"` // the first run's label
	Runs     []comparedRun `json:"runs"`
}

// comparedRun is one run beside the baseline. Speedups are throughputs over
// the baseline's: samples per median iteration, measured and predicted.
type comparedRun struct {
	File             string   `json:"file"`
	Label            string   `json:"label"`
	Model            string   `json:"model"`
	Strategy         string   `json:"strategy"`
	Device           string   `json:"device"`
	Emulated         string   `json:"emulated,omitempty"`
	Stages           int      `json:"stages"`
	Steps            int      `json:"steps"`
	FirstLoss        *float64 `json:"first_loss,omitempty"`
	FinalLoss        *float64 `json:"final_loss,omitempty"`
	MedianIterS      float64  `json:"median_iteration_s"`
	MedianSamplesPS  float64  `json:"median_samples_per_s"`
	PredictedIterS   float64  `json:"predicted_iteration_s"`
	Speedup          float64  `json:"speedup"`
	PredictedSpeedup float64  `json:"predicted_speedup"`
}

// decodeRun reads one `graphpipe run --json` object: its format tag, and the
// fields compare needs, whole and positive.
func decodeRun(data []byte) (*runSummary, error) {
	var tag struct {
		Format string `json:"format"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&tag); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if tag.Format != runFormat {
		return nil, notARun(tag.Format)
	}
	var s runSummary
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("a %s object that does not decode: %v", runFormat, err)
	}
	switch {
	case !(s.MeasuredIterS > 0):
		return nil, fmt.Errorf("measured_iteration_s: must be positive, got %g", s.MeasuredIterS)
	case !(s.PredictedIter > 0):
		return nil, fmt.Errorf("predicted_iteration_s: must be positive, got %g", s.PredictedIter)
	case s.Batch < 1:
		return nil, fmt.Errorf("batch_size: must be positive, got %d", s.Batch)
	case math.IsInf(float64(s.Batch)/s.MeasuredIterS, 0) || math.IsInf(float64(s.Batch)/s.PredictedIter, 0):
		return nil, fmt.Errorf("batch_size %d over an iteration of %g s (predicted %g s): not a finite rate", s.Batch, s.MeasuredIterS, s.PredictedIter)
	}
	return &s, nil
}

// otherOutputs are the documents graphpipe writes that compare does not
// read, by format tag: what a file given to it is, when it is one of them.
var otherOutputs = map[string]string{
	trainFormat:         "the output of graphpipe train --json (one process; it measures no pipeline iteration)",
	evalFormat:          "the output of graphpipe eval --json",
	searchFormat:        "the output of graphpipe search --json",
	simFormat:           "the output of graphpipe sim --json (a prediction, nothing measured)",
	inspectFormat:       "the output of graphpipe inspect --json",
	compareFormat:       "the output of graphpipe compare --json",
	metricsFormat:       "a line of graphpipe run --metrics",
	profileFormat:       "the output of graphpipe profile --json",
	"graphpipe/plan@1":  "a plan file (graphpipe search -o)",
	"graphpipe/model@1": "a model file",
	"graphpipe/model@2": "a model file",
}

// notARun says what a file of format is, and what compare reads instead.
func notARun(format string) error {
	what, known := otherOutputs[format]
	if !known {
		return fmt.Errorf("format: is %q, want %q (the output of graphpipe run --json)", format, runFormat)
	}
	return fmt.Errorf("format: is %q, %s; compare reads what graphpipe run --json prints (%q), a pipeline run's median iteration, measured and predicted: run the model with graphpipe run --json and compare those", format, what, runFormat)
}

// compareRuns sets every run beside the first. Throughput comes from the
// median iteration, not from samples/s over the whole run, which counts the
// workers' start-up and, over a short run, moves with it.
func compareRuns(files []string, runs []*runSummary) comparison {
	c := comparison{Format: compareFormat}
	labels := runLabels(files, runs)
	c.Baseline = labels[0]
	base := runs[0]
	baseRate := float64(base.Batch) / base.MeasuredIterS
	basePred := float64(base.Batch) / base.PredictedIter
	for i, r := range runs {
		cr := comparedRun{File: files[i], Label: labels[i], Model: r.Model, Strategy: r.Strategy, Device: r.Device, Emulated: r.Emulated,
			Stages: r.Stages, Steps: r.Steps, FinalLoss: (*float64)(r.FinalLoss), MedianIterS: r.MeasuredIterS,
			MedianSamplesPS: float64(r.Batch) / r.MeasuredIterS, PredictedIterS: r.PredictedIter}
		if len(r.Losses) > 0 {
			cr.FirstLoss = &r.Losses[0]
		}
		cr.Speedup = cr.MedianSamplesPS / baseRate
		cr.PredictedSpeedup = float64(r.Batch) / r.PredictedIter / basePred
		c.Runs = append(c.Runs, cr)
	}
	return c
}

// runLabels names each run by its strategy, and by its file where two
// strategies are the same.
func runLabels(files []string, runs []*runSummary) []string {
	count := map[string]int{}
	for _, r := range runs {
		count[r.Strategy]++
	}
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Strategy
		if count[r.Strategy] > 1 || r.Strategy == "" {
			out[i] = strings.TrimSuffix(filepath.Base(files[i]), ".json")
		}
	}
	return out
}

func printComparison(w io.Writer, c comparison) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTAGES\tSTEPS\tLOSS\tMEDIAN ITERATION S\tSAMPLES/S AT MEDIAN\tPREDICTED S")
	for _, r := range c.Runs {
		loss := "none (emulated)"
		if r.FirstLoss != nil && r.FinalLoss != nil {
			loss = fmt.Sprintf("%.4f → %.4f", *r.FirstLoss, *r.FinalLoss)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.4g\t%.4g\t%.4g\n", r.Label, r.Stages, r.Steps, loss, r.MedianIterS, r.MedianSamplesPS, r.PredictedIterS)
	}
	tw.Flush()
	for _, r := range c.Runs[1:] {
		fmt.Fprintf(w, "%s/%s: %.3f measured (median iterations), %.3f predicted\n", r.Label, c.Baseline, r.Speedup, r.PredictedSpeedup)
	}
}

func newCompareCmd(stdin io.Reader) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "compare BASELINE RUN...",
		Short: "Set runs (graphpipe run --json outputs) beside a baseline: loss, median iteration, speedup measured and predicted",
		Long: `Read the objects 'graphpipe run --json' printed and set every run beside
the first, the baseline: its loss, its median iteration time (measured and
predicted) and its throughput over the baseline's, from the median iteration
(samples per iteration over its median time), not from samples/s over the
whole run, which counts the workers' start-up. One file may be - for
standard input.`,
		Example: "  graphpipe run spp.json --model m.json --steps 60 --json > run-spp.json\n  graphpipe run gpp.json --model m.json --steps 60 --json > run-gpp.json\n  graphpipe compare run-spp.json run-gpp.json",
		Args: func(cmd *cobra.Command, a []string) error {
			if len(a) < 2 {
				return usagef("%s takes a baseline and at least one run to set beside it, got %d file(s)", cmd.CommandPath(), len(a))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, a []string) error {
			runs := make([]*runSummary, len(a))
			for i, path := range a {
				data, name, err := readInput(path, stdin)
				if err != nil {
					return err
				}
				if runs[i], err = decodeRun(data); err != nil {
					return inputf("%s: %v", name, err)
				}
			}
			c := compareRuns(a, runs)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(c)
			}
			printComparison(cmd.OutOrStdout(), c)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

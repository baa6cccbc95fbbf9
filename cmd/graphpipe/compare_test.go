package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompare (issue 22, item 5): compare sets run --json outputs beside the
// first, from their median iteration times (not samples/s over the run, which
// counts the workers' start-up), measured and predicted, in text and JSON.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, s runSummary) string {
		b, _ := json.Marshal(s)
		path := filepath.Join(dir, name)
		os.WriteFile(path, b, 0o644)
		return path
	}
	loss := []float64{2.5, 1.5}
	spp := write("run-spp.json", runSummary{Format: runFormat, Model: "mmt", Strategy: "spp", Device: "cpu", Stages: 3, Steps: 2, Batch: 16,
		Losses: loss, FinalLoss: ptr(jsonFloat(loss[1])), SamplesPerS: 1000, MeasuredIterS: 0.008, PredictedIter: 0.004})
	gpp := write("run-gpp.json", runSummary{Format: runFormat, Model: "mmt", Strategy: "gpp", Device: "cpu", Stages: 3, Steps: 2, Batch: 16,
		Losses: loss, FinalLoss: ptr(jsonFloat(loss[1])), SamplesPerS: 900, MeasuredIterS: 0.005, PredictedIter: 0.002})
	code, out, errs := gp(t, "", "compare", spp, gpp)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// 0.008/0.005 measured: 1.6 although samples/s over the runs say 0.9
	for _, want := range []string{"gpp/spp: 1.600 measured (median iterations), 2.000 predicted", "2.5000 → 1.5000", "2000", "3200"} {
		if !strings.Contains(out, want) {
			t.Errorf("compare does not say %q:\n%s", want, out)
		}
	}
	code, out, errs = gp(t, "", "compare", spp, gpp, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var c comparison
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Format != compareFormat || len(c.Runs) != 2 || c.Baseline != "spp" {
		t.Fatalf("compare --json: %s (%v)", out, err)
	}
	if r := c.Runs[1]; math.Abs(r.Speedup-1.6) > 1e-9 || math.Abs(r.PredictedSpeedup-2) > 1e-9 || r.MedianSamplesPS != 3200 {
		t.Errorf("gpp: %+v", r)
	}
	// two runs of one strategy go by their files' names
	if _, out, _ := gp(t, "", "compare", spp, spp); !strings.Contains(out, "run-spp/run-spp: 1.000") {
		t.Errorf("same strategy twice:\n%s", out)
	}
	bad := write("train.json", runSummary{Model: "mmt", MeasuredIterS: 1, PredictedIter: 1, Batch: 1})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"compare", spp}, "takes a baseline and at least one run"},
		{[]string{"compare", spp, bad}, bad + `: format: is "", want "graphpipe/run@1"`},
		{[]string{"compare", spp, filepath.Join(dir, "missing.json")}, "missing.json: cannot read"},
		{[]string{"compare", spp, write("zero.json", runSummary{Format: runFormat, Batch: 4, PredictedIter: 1})}, "measured_iteration_s: must be positive"},
	} {
		if code, _, errs := gp(t, "", tc.args...); code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d %q, want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// FuzzDecodeRun: compare's reader refuses, or returns a run it can divide by.
func FuzzDecodeRun(f *testing.F) {
	loss := 1.0
	b, _ := json.Marshal(runSummary{Format: runFormat, Strategy: "gpp", Stages: 2, Steps: 1, Batch: 8, Losses: []float64{loss}, FinalLoss: ptr(jsonFloat(loss)), MeasuredIterS: 0.1, PredictedIter: 0.1})
	f.Add(b)
	f.Add([]byte(`{"format":"graphpipe/run@1","batch_size":1,"measured_iteration_s":1e-300,"predicted_iteration_s":1e300}`))
	f.Add([]byte(`{"format":"graphpipe/run@1","batch_size":9000000000000000000,"measured_iteration_s":1e-300,"predicted_iteration_s":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRun(data)
		if err != nil {
			return
		}
		c := compareRuns([]string{"a", "b"}, []*runSummary{r, r})
		if s := c.Runs[1].Speedup; !(s > 0) || math.IsInf(s, 0) {
			t.Fatalf("speedup %v of a run over itself", s)
		}
	})
}

// TestCompareNamesWhatItWasGiven: compare given train --json's output (or
// a plan) says what it was given and what it reads instead, exit 2; it
// said "not a JSON object: cannot unmarshal object into ... blas".
func TestCompareNamesWhatItWasGiven(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	code, out, errs := gp(t, "", "train", model, "--steps", "2", "--json")
	if code != 0 {
		t.Fatal(errs)
	}
	train := filepath.Join(dir, "train.json")
	os.WriteFile(train, []byte(out), 0o644)
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct{ file, want string }{
		{train, train + `: format: is "graphpipe/train@1", the output of graphpipe train --json (one process; it measures no pipeline iteration); compare reads what graphpipe run --json prints ("graphpipe/run@1")`},
		{plan, plan + `: format: is "graphpipe/plan@1", a plan file (graphpipe search -o); compare reads what graphpipe run --json prints`},
	} {
		code, _, errs := gp(t, "", "compare", tc.file, tc.file)
		if code != 2 || !strings.HasPrefix(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("exit %d: %q\nwant exit 2 and one line starting %q", code, errs, tc.want)
		}
	}
}

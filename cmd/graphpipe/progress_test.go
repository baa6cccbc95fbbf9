package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeClock advances by step at every reading.
type fakeClock struct {
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time { c.t = c.t.Add(c.step); return c.t }

// TestProgressCountsFromTheResume (issue 22, item 3): after a resume at step
// 900, ten steps in one second of a 32-sample batch are 320 samples/s, not
// 910 steps' worth, and the 90 left take 9 s.
func TestProgressCountsFromTheResume(t *testing.T) {
	var log bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0), step: 100 * time.Millisecond}
	p := &progress{log: &log, every: 10, steps: 1000, batch: 32, now: clock.now}
	p.start(900)
	for i := int64(900); i < 910; i++ {
		p.step(i, 1.5)
	}
	want := "step 901/1000: loss 1.5, 320 samples/s, ETA 10s\nstep 910/1000: loss 1.5, 320 samples/s, ETA 9s\n"
	if log.String() != want {
		t.Fatalf("progress:\n%s\nwant:\n%s", log.String(), want)
	}
}

var stepLine = regexp.MustCompile(`^step (\d+)/(\d+): loss [^,]+(?:, lr [^,]+)?, ([0-9.e+]+) samples/s, ETA (\d+)s$`)

// TestProgressAfterResume (issue 22, item 3): a run resumed at step 8 of 10
// reports, at its last step, about the samples/s its summary measures (two
// steps' worth), not ten steps' worth over the same time.
func TestProgressAfterResume(t *testing.T) {
	model := smallModel(t, "mlp")
	ck := filepath.Join(t.TempDir(), "ck")
	if code, _, errs := gp(t, "", "run", model, "--devices", "2", "--steps", "8", "--checkpoint", ck, "--checkpoint-every", "8"); code != 0 {
		t.Fatal(errs)
	}
	code, out, errs := gp(t, "", "run", model, "--devices", "2", "--steps", "10", "--resume", ck)
	if code != 0 {
		t.Fatal(errs)
	}
	var last float64
	var lines []string
	for _, l := range strings.Split(errs, "\n") {
		if m := stepLine.FindStringSubmatch(l); m != nil {
			lines = append(lines, m[1])
			last, _ = strconv.ParseFloat(m[3], 64)
		}
	}
	if strings.Join(lines, " ") != "9 10" {
		t.Fatalf("step lines for steps %v, want 9 and 10:\n%s", lines, errs)
	}
	var summary float64
	if _, err := fmt.Sscanf(out[strings.Index(out, "→"):], "→ %f, %f samples/s", new(float64), &summary); err != nil {
		t.Fatalf("summary %q: %v", out, err)
	}
	t.Logf("last step line %.4g samples/s, summary %.4g", last, summary)
	if !(last < 2.5*summary) {
		t.Errorf("the last step line says %.4g samples/s, the summary %.4g: the rate counts steps before the resume", last, summary)
	}
}

// TestLogEveryAndMetrics (issue 22, item 11): without a terminal, run prints
// the first step, every --log-every'th and the last; --metrics gets one JSON
// line for each of them, with the loss and samples/s. By default a run of 20
// steps prints about ten lines, not twenty.
func TestLogEveryAndMetrics(t *testing.T) {
	model := smallModel(t, "mlp")
	metrics := filepath.Join(t.TempDir(), "metrics.jsonl")
	steps := func(errs string) string {
		var s []string
		for _, l := range strings.Split(errs, "\n") {
			if m := stepLine.FindStringSubmatch(l); m != nil {
				s = append(s, m[1])
			}
		}
		return strings.Join(s, " ")
	}
	code, _, errs := gp(t, "", "run", model, "--devices", "2", "--steps", "7", "--log-every", "3", "--metrics", metrics)
	if code != 0 {
		t.Fatal(errs)
	}
	if got := steps(errs); got != "1 3 6 7" {
		t.Errorf("step lines %q, want 1 3 6 7:\n%s", got, errs)
	}
	f, err := os.Open(metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m metricsLine
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		if m.Format != metricsFormat || m.Loss == nil || !(*m.Loss > 0) || !(m.SamplesPerS > 0) || m.Steps != 7 || m.Time == "" {
			t.Errorf("metrics line %q", sc.Text())
		}
		got = append(got, m.Step)
	}
	if fmt.Sprint(got) != "[1 3 6 7]" {
		t.Errorf("metrics for steps %v, want [1 3 6 7]", got)
	}
	code, _, errs = gp(t, "", "run", model, "--devices", "2", "--steps", "20")
	if code != 0 {
		t.Fatal(errs)
	}
	if got := steps(errs); got != "1 2 4 6 8 10 12 14 16 18 20" {
		t.Errorf("default step lines %q", got)
	}
}

// TestEmulatedRunSaysNoLoss (issue 22, item 10): an emulated run's progress
// shows no "loss 0" and says once that no loss is computed; its summary says
// "1 stage", and its JSON holds no losses.
func TestEmulatedRunSaysNoLoss(t *testing.T) {
	model := smallModel(t, "mlp")
	code, out, errs := gp(t, "", "run", model, "--devices", "1", "--emulate", "v100", "--steps", "2", "--log-every", "1")
	if code != 0 {
		t.Fatal(errs)
	}
	if strings.Contains(errs, "loss 0") || !strings.Contains(errs, "no loss is computed") || !strings.Contains(errs, "step 2/2: ") {
		t.Errorf("progress:\n%s", errs)
	}
	if !strings.Contains(out, "2 steps on 1 stage,") || strings.Contains(out, "1 stages") || !strings.Contains(out, "no loss computed") {
		t.Errorf("summary: %s", out)
	}
	code, out, errs = gp(t, "", "run", model, "--devices", "1", "--emulate", "v100", "--steps", "2", "--json")
	if code != 0 {
		t.Fatal(errs)
	}
	if strings.Contains(out, `"losses"`) || strings.Contains(out, `"final_loss"`) || !strings.Contains(out, `"emulated":"v100"`) {
		t.Errorf("emulated JSON: %s", out)
	}
	code, out, errs = gp(t, "", "run", model, "--devices", "1", "--device", "cpu", "--steps", "1")
	if code != 0 || !strings.Contains(out, "1 step on 1 stage,") {
		t.Errorf("exit %d: %s %s", code, out, errs)
	}
	code, out, errs = gp(t, "", "train", model, "--steps", "1")
	if code != 0 || !strings.Contains(out, "mlp: 1 step, loss") {
		t.Errorf("train: exit %d: %s %s", code, out, errs)
	}
}

// TestMetricsHoldEvaluations (issue 22, item 11): with --eval-data, every
// evaluation is a metrics line of its own, with the eval figures the run's
// JSON ends with.
func TestMetricsHoldEvaluations(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	data, metrics := filepath.Join(dir, "data.safetensors"), filepath.Join(dir, "metrics.jsonl")
	if code, _, errs := gp(t, "", "data", "synth", model, "-o", data, "--samples", "64"); code != 0 {
		t.Fatal(errs)
	}
	code, out, errs := gp(t, "", "run", model, "--devices", "2", "--steps", "4", "--data", data, "--eval-data", data, "--eval-every", "2",
		"--metrics", metrics, "--json")
	if code != 0 {
		t.Fatal(errs)
	}
	var sum runSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.EvalLoss == nil {
		t.Fatalf("run --json: %s (%v)", out, err)
	}
	var evals []string
	for _, l := range strings.Split(strings.TrimSpace(readFile(t, metrics)), "\n") {
		var m metricsLine
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m.EvalLoss != nil {
			evals = append(evals, fmt.Sprintf("%d %.6g", m.Step, *m.EvalLoss))
		}
	}
	if want := fmt.Sprintf("2 %.6g", sum.Evals[0].Loss); len(evals) != 2 || evals[0] != want || evals[1] != fmt.Sprintf("4 %.6g", *sum.EvalLoss) {
		t.Errorf("evaluations in the metrics: %v; the run's: %+v", evals, sum.Evals)
	}
}

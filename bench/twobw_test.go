package bench

import (
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/search"
)

// TestTwoBWSection regenerates the pipedream-2bw section: on each of the
// paper's three models 2bw plans at least as fast as 1f1b (the issue's
// bar), 1f1b's own plan priced as 2bw is priced (not refused), and the
// committed BENCHMARKS.md has the section's heading and columns. Six
// searches, seconds: run in -short too, the bar being the issue's.
func TestTwoBWSection(t *testing.T) {
	s, err := TwoBWSection(Config{Quick: true, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rows) != 3 {
		t.Fatalf("%d rows, want mmt, dlrm and candle-uno", len(s.Rows))
	}
	for _, r := range s.Rows {
		if len(r) != len(s.Columns) {
			t.Errorf("%s: %d cells for %d columns", r[0], len(r), len(s.Columns))
		}
		ratio, err := strconv.ParseFloat(strings.TrimSuffix(r[7], "×"), 64)
		if err != nil || ratio < 1 {
			t.Errorf("%s: 2bw / 1f1b %q, want at least 1", r[0], r[7])
		}
		if r[8] == "-" {
			t.Errorf("%s: 1f1b's plan not priced as 2bw: %s", r[0], r[9])
		}
	}
	md := strings.Split(s.Markdown(), "\n")
	report, err := os.ReadFile("../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(report)
	at := strings.Index(text, md[0]+"\n")
	if at < 0 {
		t.Fatalf("BENCHMARKS.md lacks %q", md[0])
	}
	header := "| " + strings.Join(s.Columns, " | ") + " |"
	if !strings.Contains(text[at:], header) {
		t.Errorf("BENCHMARKS.md's %q table does not have the columns %s", md[0], header)
	}
}

// TestAsTwoBW: 1f1b's plan priced under 2bw keeps its stages, each holding
// a float32 second version of its weights and copying the newest into it
// before its step, as search prices them; with no fill or drain to pay it
// predicts more samples/s than under 1f1b. A plan too deep for its
// micro-batches is refused, not priced.
func TestAsTwoBW(t *testing.T) {
	g, err := Paper("candle-uno")
	if err != nil {
		t.Fatal(err)
	}
	one, err := search.Search(g, options("v100", 32, 512, 0, "gpp", "1f1b"))
	if err != nil {
		t.Fatal(err)
	}
	two, err := asTwoBW(one)
	if err != nil {
		t.Fatal(err)
	}
	if two.Schedule != "2bw" || len(two.Stages) != len(one.Stages) || one.Schedule != "1f1b" {
		t.Fatalf("priced %s (%d stages) from %s (%d stages)", two.Schedule, len(two.Stages), one.Schedule, len(one.Stages))
	}
	for i, st := range two.Stages {
		was := one.Stages[i]
		if d := st.StaticBytes - was.StaticBytes; d != 4*was.Params {
			t.Errorf("stage %d: %d bytes more, want %d (a float32 copy of %d parameters)", i, d, 4*was.Params, was.Params)
		}
		want := 8 * float64(was.Params) / one.Device.MemBW
		if d := st.FlushS - was.FlushS; math.Abs(d-want) > 1e-9*want {
			t.Errorf("stage %d: flush %g s longer, want %g", i, d, want)
		}
	}
	if two.Predicted.SamplesPerS <= one.Predicted.SamplesPerS || two.Predicted.PeakMemory <= one.Predicted.PeakMemory {
		t.Errorf("as 2bw: %.4g samples/s at %d bytes, 1f1b %.4g at %d", two.Predicted.SamplesPerS, two.Predicted.PeakMemory,
			one.Predicted.SamplesPerS, one.Predicted.PeakMemory)
	}

	deep := *one
	deep.BatchSize, deep.MicroBatches = deep.MicroBatch, 1 // a batch of one micro-batch, depth 4
	if _, err := asTwoBW(&deep); err == nil || !strings.Contains(err.Error(), "too deep") {
		t.Errorf("depth %d on 1 micro-batch a batch: %v, want too deep", one.Predicted.Depth, err)
	}
}

// TestTwoBWRows: a schedule's row holds the medians of its runs' measured
// and predicted iterations and its last run's losses; the note sets 2bw's
// measured ratio beside its predicted one; the digits verdict names each
// schedule's end.
func TestTwoBWRows(t *testing.T) {
	run := func(meas, pred float64, loss ...float64) twoBWRun {
		return twoBWRun{MeasuredIterS: meas, PredictedIter: pred, Losses: loss, Stages: 3}
	}
	runs := map[string][]twoBWRun{
		"1f1b": {run(0.010, 0.020, 2), run(0.030, 0.020, 1.5), run(0.020, 0.020, 1.25)},
		"2bw":  {run(0.015, 0.015, 2), run(0.016, 0.015, 1.5), run(0.040, 0.015, 1.125)},
	}
	got := twoBWRow("mmt", "2bw", runs["2bw"])
	want := []string{"mmt", "2bw", "3", "16", "15", "1.125", "-", "-"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("row %q, want %q", got, want)
	}
	if note, want := twoBWMeasured("mmt", 3, runs), "mmt on 3 workers: 2bw's median iteration is 0.800× 1f1b's measured, 0.750× predicted."; note != want {
		t.Errorf("note %q, want %q", note, want)
	}
	digits := run(0.1, 0.1, 0.5)
	digits.Evals = append(digits.Evals, struct {
		Step     int     `json:"step"`
		Samples  int     `json:"samples"`
		Loss     float64 `json:"loss"`
		Accuracy float64 `json:"accuracy"`
	}{Step: 22, Loss: 0.25, Accuracy: 0.9375})
	rows := [][]string{got, twoBWRow("digits (real), 4 epochs", "2bw", []twoBWRun{digits})}
	if v, want := digitsVerdict(rows), "2bw ends at evaluation loss 0.25, accuracy 0.9375"; v != want {
		t.Errorf("verdict %q, want %q", v, want)
	}
}

// TestTwoBWCPUSection runs the measured 2bw section's quick form when
// asked (GRAPHPIPE_BENCH_2BW=1; GRAPHPIPE_BENCH_FULL=1 for the report's):
// minutes of 3-worker runs over NATS.
func TestTwoBWCPUSection(t *testing.T) {
	if os.Getenv("GRAPHPIPE_BENCH_2BW") == "" {
		t.Skip("set GRAPHPIPE_BENCH_2BW=1 to run the measured 2bw section")
	}
	s, err := TwoBWCPUSection(Config{Quick: os.Getenv("GRAPHPIPE_BENCH_FULL") == "", Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Rows {
		if len(r) != len(s.Columns) || r[3] == "NaN" || r[3] == "0" {
			t.Errorf("row %q", r)
		}
	}
	t.Log("\n" + s.Markdown())
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/chart"
)

// TestTimelines: a run draws its measured timeline (--timeline) and traces
// it (--trace); sim draws the plan's simulated timeline with that measured
// one under it (--measured). Each picture names its time axis, its stages
// with their devices, and the colours of its legend.
func TestTimelines(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	plan, trace, png, svg := filepath.Join(dir, "plan.json"), filepath.Join(dir, "trace.json"), filepath.Join(dir, "run.png"), filepath.Join(dir, "sim.svg")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", "run", plan, "--model", model, "--steps", "2", "--trace", trace, "--timeline", png); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	if code, _, errs := gp(t, "", "sim", plan, "--svg", svg, "--measured", trace); code != 0 {
		t.Fatalf("sim: exit %d: %s", code, errs)
	}
	in := inspect(t, png)
	if in.Format != chart.PNG || !in.Has("Title: measured: mmt, gpp plan on 3 cpu") || !in.Has("x axis: time (ms); y axis: stage (devices)") {
		t.Errorf("run --timeline: %+v", in)
	}
	in = inspect(t, svg)
	for _, want := range []string{"simulated: mmt, gpp plan on 3 cpu", "measured (" + trace + "): iteration", "time (ms)", "stage (devices)",
		"stage 0 (device 0)", "forward", "backward", "send", "receive", "idle (bubble)"} {
		if !in.Has(want) {
			t.Errorf("sim --svg --measured lacks %q: %q", want, in.Texts)
		}
	}
	tr, _ := os.ReadFile(trace)
	for _, want := range []string{`"cat": "forward"`, `"cat": "receive"`, `"name": "activations 0"`} {
		if !strings.Contains(string(tr), want) {
			t.Errorf("the run's trace lacks %s", want)
		}
	}
	// a measured trace that is not this plan's, or not a trace
	other := filepath.Join(dir, "other.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "--micro-batch", "4", "-o", other); code != 0 {
		t.Fatal(errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", other, "--svg", svg, "--measured", trace}, "--measured " + trace + ": the trace has 3 stages, the plan 2: a trace of another plan"},
		{[]string{"sim", plan, "--svg", svg, "--measured", plan}, "--measured " + plan + ": trace: no traceEvents array"},
		{[]string{"sim", plan, "--measured", trace}, "--measured: draws under the simulated timeline: give --svg FILE"},
		{[]string{"sim", plan, "--svg", svg, "--measured", filepath.Join(dir, "none.json")}, "--measured " + filepath.Join(dir, "none.json") + ": cannot read"},
		{[]string{"run", plan, "--model", model, "--timeline", filepath.Join(dir, "t.jpg")}, "--timeline " + filepath.Join(dir, "t.jpg") + ": a chart is written as .svg or .png"},
	} {
		code, out, errs := gp(t, "", c.args...)
		if first, _, _ := strings.Cut(errs, "\n"); code != 2 || out != "" || !strings.Contains(first, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and the line %q", c.args, code, out, errs, c.want)
		}
	}
}

func inspect(t *testing.T, path string) *chart.Info {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	in, err := chart.Inspect(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return in
}

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// zooPlans are the plans TestZooPlansGolden pins: every zoo model, each
// strategy and schedule, a custom batch, a forced micro-batch and the grouped
// DP past 64 devices. A refactoring of the planner must leave every one of
// them the same byte for byte.
var zooPlans = []struct {
	name  string
	model []string // models export arguments
	args  []string // search arguments
}{
	{"mmt-32v100", []string{"mmt"}, []string{"--devices", "32", "--device", "v100"}},
	{"mmt-32v100-spp", []string{"mmt"}, []string{"--devices", "32", "--device", "v100", "--strategy", "spp"}},
	{"mmt-128v100", []string{"mmt"}, []string{"--devices", "128", "--device", "v100"}},
	{"mmt-16a100-zb", []string{"mmt"}, []string{"--devices", "16", "--device", "a100", "--schedule", "zb"}},
	{"dlrm-16v100", []string{"dlrm"}, []string{"--devices", "16", "--device", "v100"}},
	{"dlrm-8h100-gpipe", []string{"dlrm"}, []string{"--devices", "8", "--device", "h100", "--schedule", "gpipe"}},
	{"candle-uno-8v100", []string{"candle-uno"}, []string{"--devices", "8", "--device", "v100"}},
	{"candle-uno-16v100-depth", []string{"candle-uno"}, []string{"--devices", "16", "--device", "v100", "--schedule", "1f1b-depth"}},
	{"case-study-4v100", []string{"case-study"}, []string{"--devices", "4", "--device", "v100"}},
	{"transformer-32v100", []string{"transformer"}, []string{"--devices", "32", "--device", "v100"}},
	{"transformer-8v100-exact", []string{"transformer"}, []string{"--devices", "8", "--device", "v100", "--strategy", "spp-exact"}},
	{"mlp-small-4cpu", []string{"mlp", "--preset", "small"}, []string{"--devices", "4", "--device", "cpu"}},
	{"mmt-small-3cpu-mb", []string{"mmt", "--preset", "small"}, []string{"--devices", "3", "--device", "cpu", "--micro-batch", "2"}},
	{"mmt-8v100-batch4096", []string{"mmt"}, []string{"--devices", "8", "--device", "v100", "--batch", "4096", "--recompute", "off"}},
	{"transformer-8h100-bf16", []string{"transformer"}, []string{"--devices", "8", "--device", "h100", "--devices-per-node", "8", "--precision", "bf16"}},
}

// searchLine is explain's one line that measures this machine.
var searchLine = regexp.MustCompile(`(?m)^search +[0-9.]+ s,`)

// searchSeconds is the plan file's one field that measures this machine.
var searchSeconds = regexp.MustCompile(`"seconds": [0-9.e+-]+,`)

// TestZooPlansGolden: the zoo's plans, and explain's rendering of them, equal
// testdata/plans/*.golden (go test -update rewrites them).
func TestZooPlansGolden(t *testing.T) {
	for _, c := range zooPlans {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			model, plan := filepath.Join(dir, "model.json"), filepath.Join(dir, "plan.json")
			if code, _, errs := gp(t, "", append([]string{"models", "export"}, append(c.model, "-o", model)...)...); code != 0 {
				t.Fatal(errs)
			}
			if code, _, errs := gp(t, "", append([]string{"search", model, "-o", plan}, c.args...)...); code != 0 {
				t.Fatal(errs)
			}
			code, text, errs := gp(t, "", "explain", plan)
			if code != 0 {
				t.Fatal(errs)
			}
			text = searchLine.ReplaceAllString(text, "search      (time not pinned),")
			compareGolden(t, filepath.Join("testdata", "plans", c.name+".plan.golden"), searchSeconds.ReplaceAllString(readFile(t, plan), `"seconds": 0,`))
			compareGolden(t, filepath.Join("testdata", "plans", c.name+".explain.golden"), text)
		})
	}
}

func compareGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("differs from %s (go test -run %s -update rewrites it after a deliberate change):\n%s", golden, t.Name(), firstDiff(string(want), got))
	}
}

// firstDiff names the first line where got leaves want.
func firstDiff(want, got string) string {
	line, i := 1, 0
	for ; i < len(want) && i < len(got) && want[i] == got[i]; i++ {
		if want[i] == '\n' {
			line++
		}
	}
	return "first difference at line " + strconv.Itoa(line)
}

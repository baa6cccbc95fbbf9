package main

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHandBrokenPlans: eight plans broken by hand, each refused by run, sim
// and explain (given the model) with exit 2 and one line naming the plan
// file, the stage where there is one, and the field; nothing is started.
func TestHandBrokenPlans(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	good := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "-o", good); code != 0 {
		t.Fatal(errs)
	}
	data, _ := os.ReadFile(good)
	for _, tc := range []struct {
		name string
		edit func(p map[string]any)
		want string // what the error line says after the file's name
		// alone: what sim says without --model where it differs ("-": it
		// cannot tell, so it simulates the plan)
		alone string
	}{
		{"an op twice", func(p map[string]any) {
			planStage(p, 1)["ops"] = append(planStage(p, 1)["ops"].([]any), planStage(p, 0)["ops"].([]any)[0])
		}, "stage 1: ops: op ", ""},
		{"an op missing", func(p map[string]any) { ops := planStage(p, 0)["ops"].([]any); planStage(p, 0)["ops"] = ops[1:] }, "stages: op ", "stages: hold 56 ops in all, but the model has 57 (model.ops)"},
		{"an unknown op", func(p map[string]any) { planStage(p, 1)["ops"].([]any)[0] = "no-such-op" }, `stage 1: ops: op "no-such-op" is not an op of model`, "-"},
		{"an unknown schedule", func(p map[string]any) { p["schedule"] = "weird" }, `schedule: unknown schedule "weird"`, ""},
		{"in_flight -1", func(p map[string]any) { planStage(p, 0)["in_flight"] = -1 }, "stage 0: in_flight: must be between 1 and", ""},
		{"10^9 devices", func(p map[string]any) { p["devices"] = 1e9 }, "devices: must be between 1 and 4096", ""},
		{"a wrong device_micro_batch", func(p map[string]any) { planStage(p, 2)["device_micro_batch"] = 3 }, "stage 2: device_micro_batch: is 3", ""},
		{"a negative forward_s", func(p map[string]any) { planStage(p, 1)["forward_s"] = -0.5 }, "stage 1: forward_s: must be a finite number, not negative, got -0.5", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p map[string]any
			if err := json.Unmarshal(data, &p); err != nil {
				t.Fatal(err)
			}
			tc.edit(p)
			bad, _ := json.MarshalIndent(p, "", " ")
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			os.WriteFile(path, bad, 0o644)
			for _, args := range [][]string{
				{"run", path, "--model", model, "--steps", "2", "--run", "broken"},
				{"sim", path, "--model", model},
				{"explain", path, "--model", model},
			} {
				code, out, errs := gp(t, "", args...)
				want := path + ": " + tc.want
				if code != 2 || !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 || out != "" {
					t.Errorf("%s: exit %d, stderr %q, want 2 and one line starting %q", args[0], code, errs, want)
				}
			}
			code, _, errs := gp(t, "", "sim", path)
			switch {
			case tc.alone == "-" && code != 0:
				t.Errorf("sim without --model: exit %d, %s", code, errs)
			case tc.alone != "-" && (code != 2 || !strings.HasPrefix(errs, path+": "+cmp.Or(tc.alone, tc.want))):
				t.Errorf("sim without --model: exit %d, stderr %q, want 2 and %q", code, errs, cmp.Or(tc.alone, tc.want))
			}
			if n := workersOf("broken"); n != 0 {
				t.Errorf("%d workers were started", n)
			}
		})
	}
}

func planStage(p map[string]any, i int) map[string]any {
	return p["stages"].([]any)[i].(map[string]any)
}

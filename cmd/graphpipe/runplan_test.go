package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRunPlansForItsWorkers (issue 22, item 2): run MODEL without --device
// plans for what its workers are (local CPU workers: cpu, not v100), says so,
// and prints the plan it chose (stages, devices, micro-batch, prediction)
// before it trains; --device still chooses, and an emulated run plans for
// the devices it emulates.
func TestRunPlansForItsWorkers(t *testing.T) {
	model := smallModel(t, "mlp")
	for _, tc := range []struct {
		args       []string
		device     string
		wantStderr []string
	}{
		{[]string{"--devices", "2"}, "cpu", []string{"plan        gpp for mlp on 2 × cpu (searched for this run)", "--device cpu: the local workers compute on the CPU",
			"micro-batch ", "predicted   ", " s per iteration"}},
		{[]string{"--devices", "2", "--device", "a100"}, "a100", []string{"on 2 × a100 (searched for this run)"}},
		{[]string{"--devices", "2", "--emulate", "h100"}, "h100", []string{"on 2 × h100", "--device h100: the devices --emulate names"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := gp(t, "", append([]string{"run", model, "--steps", "2", "--json"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var sum runSummary
			if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.Device != tc.device {
				t.Errorf("planned for %q, want %q (%v)", sum.Device, tc.device, err)
			}
			for _, w := range tc.wantStderr {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr does not say %q:\n%s", w, errs)
				}
			}
			if !strings.Contains(errs, "stages      ") || strings.Index(errs, "plan        ") > strings.Index(errs, "stages      ") {
				t.Errorf("no stage line after the plan line:\n%s", errs)
			}
		})
	}
}

// TestGPUProfile: a GPU's name from its driver maps onto the built-in
// profile of its family, or the nearest one, or none.
func TestGPUProfile(t *testing.T) {
	for _, tc := range []struct {
		gpu, want string
		exact     bool
	}{
		{"NVIDIA H100 80GB HBM3", "h100", true},
		{"NVIDIA H200", "h100", false},
		{"NVIDIA A100-SXM4-40GB", "a100", true},
		{"Tesla V100-SXM2-16GB", "v100", true},
		{"NVIDIA GeForce RTX 4090", "", false},
	} {
		if got, exact := gpuProfile(tc.gpu); got != tc.want || exact != tc.exact {
			t.Errorf("%s: %q %v, want %q %v", tc.gpu, got, exact, tc.want, tc.exact)
		}
	}
}

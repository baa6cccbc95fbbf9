package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMaxStepsEnv: GRAPHPIPE_MAX_STEPS=N stops train and run after N steps
// from where they start, saying so; a shortened run still checkpoints, so
// that the README's resume runs as shown; a bad value is exit 2.
func TestMaxStepsEnv(t *testing.T) {
	model := smallModel(t, "mlp")
	ck := filepath.Join(t.TempDir(), "ck")
	t.Setenv(maxStepsEnv, "3")
	code, out, errs := gp(t, "", "train", model, "--steps", "100")
	if code != 0 || !strings.Contains(out, "3 steps") || !strings.Contains(errs, "GRAPHPIPE_MAX_STEPS=3: training steps 1 to 3 of 100") {
		t.Errorf("train: exit %d %q %q", code, out, errs)
	}
	code, out, errs = gp(t, "", "run", model, "--devices", "2", "--steps", "10000", "--checkpoint", ck, "--checkpoint-every", "100")
	if code != 0 || !strings.Contains(out, "3 steps on") {
		t.Fatalf("run: exit %d %q %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(ck, "step-00000003", "manifest.json")); err != nil {
		t.Fatalf("no checkpoint at step 3: %v", err)
	}
	code, out, errs = gp(t, "", "run", model, "--devices", "2", "--steps", "10000", "--resume", ck)
	if code != 0 || !strings.Contains(out, "3 steps on") || !strings.Contains(errs, "training steps 4 to 6 of 10000") {
		t.Errorf("resume: exit %d %q %q", code, out, errs)
	}
	t.Setenv(maxStepsEnv, "0")
	if code, _, errs := gp(t, "", "train", model); code != 2 || !strings.Contains(errs, "GRAPHPIPE_MAX_STEPS: must be a positive number of steps") {
		t.Errorf("bad value: exit %d %q", code, errs)
	}
}

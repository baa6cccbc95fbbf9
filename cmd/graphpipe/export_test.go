package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
)

// writeTestCheckpoint writes a small checkpoint at step into dir.
func writeTestCheckpoint(t *testing.T, dir string, step int) {
	t.Helper()
	c := &runtime.Checkpoint{Manifest: runtime.Manifest{Step: step, Model: "m", ModelHash: strings.Repeat("ab", 32), Optimizer: "sgd", OptStep: step},
		Params: map[string]*stage.Value[float32]{"fc.weight": {Shape: []int{2, 2}, Data: []float32{1, 2, 3, float32(step)}}},
		Optim:  map[string][]float32{}}
	if err := runtime.WriteCheckpoint(dir, c); err != nil {
		t.Fatal(err)
	}
}

// TestExportIntoItsCheckpointRefused: export -o naming a file inside the
// checkpoint it reads (a shard, the manifest, a new file there, a link
// into it) is exit 2 and leaves the checkpoint whole; it used to replace
// the shard it read. A file beside the checkpoints in the same directory
// is fine.
func TestExportIntoItsCheckpointRefused(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	writeTestCheckpoint(t, ck, 2)
	step := filepath.Join(ck, "step-00000002")
	link := filepath.Join(t.TempDir(), "link.safetensors")
	if err := os.Symlink(filepath.Join(step, "params-000.safetensors"), link); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{filepath.Join(step, "params-000.safetensors"), filepath.Join(step, "manifest.json"), filepath.Join(step, "new.safetensors"), link,
		filepath.Join(ck, ".", "step-00000002", "..", "step-00000002", "optim-000.safetensors")} {
		code, _, errs := gp(t, "", "export", ck, "-o", out)
		if code != 2 || !strings.Contains(errs, "-o "+out+": is inside checkpoint step-00000002 of "+ck) {
			t.Fatalf("-o %s: exit %d\n%s", out, code, errs)
		}
		c, err := runtime.LoadCheckpoint(ck, func(step int, why error) { t.Errorf("step %d damaged: %v", step, why) })
		if err != nil || c.Params["fc.weight"].Data[3] != 2 {
			t.Fatalf("after -o %s: %v", out, err)
		}
	}
	beside := filepath.Join(ck, "export.safetensors")
	if code, _, errs := gp(t, "", "export", ck, "-o", beside); code != 0 {
		t.Fatalf("-o beside the checkpoints: exit %d\n%s", code, errs)
	}
}

// TestExportStepMismatch: a checkpoint directory whose manifest says
// another step (step 30's, renamed step-00000040) is skipped, naming both
// steps, for the one before: it was read as step 40's and said step 30.
func TestExportStepMismatch(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	writeTestCheckpoint(t, ck, 20)
	writeTestCheckpoint(t, ck, 30)
	if err := os.Rename(filepath.Join(ck, "step-00000030"), filepath.Join(ck, "step-00000040")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "w.safetensors")
	code, _, errs := gp(t, "", "export", ck, "-o", out)
	if code != 0 || !strings.Contains(errs, "checkpoint at step 40 is not whole (directory step-00000040 is step 40, but its manifest says step 30): using the one before") {
		t.Fatalf("exit %d\n%s", code, errs)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/runtime"
)

// TestCheckpointResumeUnderAnotherPlan: a run checkpoints every step and
// stops at 4; resuming under another plan (other devices, spp) to step 6
// ends with the parameters of 6 uninterrupted steps. It holds for both
// layouts of a sharded checkpoint: shards the workers wrote themselves
// (they see the directory), and shards they streamed to the coordinator
// (runtime.StreamEnv), which resume to the same bits. A truncated newest
// checkpoint makes the resume fall back to the one before; export writes
// the newest whole one; with none whole, run exits 1.
func TestCheckpointResumeUnderAnotherPlan(t *testing.T) {
	model := smallModel(t, "mmt")
	dir := t.TempDir()
	if code, _, errs := gp(t, "", "train", model, "--micro-batch", "4", "--steps", "6", "--dump", filepath.Join(dir, "straight")); code != 0 {
		t.Fatal(errs)
	}
	want := readParams(t, filepath.Join(dir, "straight", "final.safetensors"))
	resumed := map[string]map[string][]float32{}
	for _, tc := range []struct{ layout, stream, by string }{{"workers", "", "worker"}, {"streamed", "1", "coordinator"}} {
		t.Run(tc.layout, func(t *testing.T) {
			t.Setenv(runtime.StreamEnv, tc.stream)
			ck := filepath.Join(dir, "ck-"+tc.layout)
			if code, _, errs := gp(t, "", "run", model, "--devices", "3", "--device", "cpu", "--micro-batch", "4", "--steps", "4",
				"--checkpoint", ck, "--checkpoint-every", "1"); code != 0 {
				t.Fatal(errs)
			}
			entries, _ := os.ReadDir(ck)
			var names []string
			for _, e := range entries {
				if !strings.HasPrefix(e.Name(), ".") { // .lock: the run's hold on the directory
					names = append(names, e.Name())
				}
			}
			if strings.Join(names, " ") != "step-00000003 step-00000004" {
				t.Fatalf("checkpoints kept: %v, want the last two", names)
			}
			c, err := runtime.LoadCheckpoint(ck, nil)
			if err != nil || len(c.Manifest.Shards) != 6 || c.Manifest.Shards[0].By != tc.by {
				t.Fatalf("manifest %+v (%v): want 6 shards written by the %s", c.Manifest, err, tc.by)
			}
			resume := func(from string) (int, string) {
				out := filepath.Join(dir, "resumed-"+tc.layout)
				os.RemoveAll(out)
				code, _, errs := gp(t, "", "run", model, "--devices", "4", "--device", "cpu", "--strategy", "spp", "--micro-batch", "4",
					"--steps", "6", "--resume", from, "--dump", out)
				if code == 0 {
					got := readParams(t, filepath.Join(out, "final.safetensors"))
					sameParams(t, got, want, 1e-5)
					if resumed[tc.layout] == nil {
						resumed[tc.layout] = got
					}
				}
				return code, errs
			}
			if code, errs := resume(ck); code != 0 || !strings.Contains(errs, "resuming at step 4") {
				t.Fatalf("resume: exit %d %s", code, errs)
			}
			// truncate the newest checkpoint: the resume falls back to step 3
			newest := filepath.Join(ck, "step-00000004", "params-001.safetensors")
			b, _ := os.ReadFile(newest)
			os.WriteFile(newest, b[:len(b)/2], 0o644)
			if code, errs := resume(ck); code != 0 || !strings.Contains(errs, "not whole") || !strings.Contains(errs, "resuming at step 3") {
				t.Fatalf("fallback: exit %d %s", code, errs)
			}
			export := filepath.Join(dir, "model-"+tc.layout+".safetensors")
			if code, _, errs := gp(t, "", "export", ck, "-o", export); code != 0 {
				t.Fatal(errs)
			}
			if got := readParams(t, export); len(got) != len(want) {
				t.Fatalf("export holds %d parameters, want %d", len(got), len(want))
			}
			// nothing whole: exit 1 with a clear error
			os.Remove(filepath.Join(ck, "step-00000003", "manifest.json"))
			if code, errs := resume(ck); code != 1 || !strings.Contains(errs, "none of the 2 checkpoints") {
				t.Fatalf("no whole checkpoint: exit %d %s", code, errs)
			}
		})
	}
	if len(resumed) == 2 {
		sameParams(t, resumed["streamed"], resumed["workers"], 0)
	}
}

// TestCheckpointManifestAndAnotherModel: a checkpoint's manifest names the
// run that wrote it and the model's seed; --resume with another model's
// checkpoint is refused with exit 2 before any worker starts.
func TestCheckpointManifestAndAnotherModel(t *testing.T) {
	model := smallModel(t, "mlp")
	ck := filepath.Join(t.TempDir(), "ck")
	if code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "2", "--checkpoint", ck, "--run", "writer", "--seed", "7"); code != 0 {
		t.Fatal(errs)
	}
	c, err := runtime.LoadCheckpoint(ck, nil)
	if err != nil || c.Manifest.Run != "writer" || c.Manifest.Seed != 7 {
		t.Fatalf("manifest %+v (%v): want run writer, seed 7", c.Manifest, err)
	}
	other := smallModel(t, "candle-uno")
	code, _, errs := gp(t, "", "run", other, "--devices", "2", "--device", "cpu", "--steps", "4", "--resume", ck, "--run", "reader")
	if code != 2 || !strings.Contains(errs, "--resume "+ck+": checkpoint step-2 was made for model \"mlp\"") || strings.Count(errs, "\n") != 1 {
		t.Fatalf("exit %d: %q", code, errs)
	}
	if n := workersOf("reader"); n != 0 {
		t.Fatalf("%d workers started", n)
	}
}

// TestResumeUnderAnotherOptimizer: a checkpoint holding Adam's moments does
// not resume under SGD (the moments would be dropped unseen): exit 2, one
// line naming the checkpoint and the optimizer to resume with.
func TestResumeUnderAnotherOptimizer(t *testing.T) {
	model := smallModel(t, "mlp")
	ck := filepath.Join(t.TempDir(), "ck")
	if code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "2", "--optimizer", "adam", "--checkpoint", ck, "--checkpoint-every", "2"); code != 0 {
		t.Fatal(errs)
	}
	code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "4", "--optimizer", "sgd", "--resume", ck)
	want := "--resume " + ck + ": checkpoint step-2 holds adam's optimizer state, and this run's --optimizer is sgd: resume with --optimizer adam\n"
	if code != 2 || errs != want {
		t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, errs, want)
	}
	if code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "4", "--optimizer", "adam", "--resume", ck); code != 0 {
		t.Errorf("the same optimizer: %s", errs)
	}
}

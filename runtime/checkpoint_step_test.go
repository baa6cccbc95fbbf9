package runtime

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/tensor"
)

// TestCheckpointStepAgreesWithManifest: a checkpoint directory whose
// manifest is of another step (a manifest copied over, a directory
// renamed) is not whole, the refusal naming both steps; the one before is
// taken. A directory named by hand without the leading zeros loads.
func TestCheckpointStepAgreesWithManifest(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int{30, 40} {
		if err := WriteCheckpoint(dir, sampleCheckpoint(step)); err != nil {
			t.Fatal(err)
		}
	}
	m30 := mustRead(t, filepath.Join(stepDir(dir, 30), "manifest.json"))
	if err := os.WriteFile(filepath.Join(stepDir(dir, 40), "manifest.json"), m30, 0o644); err != nil {
		t.Fatal(err)
	}
	var why error
	c, err := LoadCheckpoint(dir, func(step int, err error) {
		if step == 40 {
			why = err
		}
	})
	var se *StepMismatchError
	if err != nil || c.Manifest.Step != 30 || !errors.As(why, &se) || se.DirStep != 40 || se.Manifest != 30 ||
		!strings.Contains(why.Error(), "step-00000040 is step 40, but its manifest says step 30") {
		t.Fatalf("loaded %v (%v); step 40 skipped for %v: want it refused naming 40 and 30", c, err, why)
	}
	if looksWhole(stepDir(dir, 40), 40) == nil {
		t.Error("prune counts the mismatched checkpoint as whole")
	}
	// a whole checkpoint of step 30 renamed step-00000040: alone, no
	// checkpoint at all (it was read as step 40's and resumed at 30)
	renamed := t.TempDir()
	if err := WriteCheckpoint(renamed, sampleCheckpoint(30)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(stepDir(renamed, 30), stepDir(renamed, 40)); err != nil {
		t.Fatal(err)
	}
	why = nil
	_, err = LoadCheckpoint(renamed, func(_ int, err error) { why = err })
	if err == nil || !strings.Contains(err.Error(), "none of the 1 checkpoints") || !errors.As(why, &se) {
		t.Fatalf("step 30 renamed step 40: %v (skipped for %v)", err, why)
	}
	// a name a person wrote: step-7, its manifest step 7
	other := t.TempDir()
	if err := WriteCheckpoint(other, sampleCheckpoint(7)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(stepDir(other, 7), filepath.Join(other, "step-7")); err != nil {
		t.Fatal(err)
	}
	if c, err := LoadCheckpoint(other, nil); err != nil || c.Manifest.Step != 7 {
		t.Fatalf("step-7: %v, %v", c, err)
	}
}

// TestManifestRecordsStages: a manifest records the stages that complete
// its checkpoint; one whose shards leave a stage out, or name one past
// them, is refused, and a writer that gathered too few shards commits
// nothing. Manifests written before the field load as they did.
func TestManifestRecordsStages(t *testing.T) {
	dir := t.TempDir()
	if err := WriteCheckpoint(dir, sampleCheckpoint(3)); err != nil {
		t.Fatal(err)
	}
	good := mustRead(t, filepath.Join(stepDir(dir, 3), "manifest.json"))
	m, err := DecodeManifest(good)
	if err != nil || m.Stages != 1 {
		t.Fatalf("written manifest: stages %d, %v; want 1", m.Stages, err)
	}
	for _, tc := range []struct {
		stages int
		want   string
	}{
		{2, "stage 1 of 2 has none"},
		{-1, "stages: must be between"},
	} {
		bad := m
		bad.Stages = tc.stages
		data, _ := json.Marshal(bad)
		if _, err := DecodeManifest(data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("stages %d: %v, want %q", tc.stages, err, tc.want)
		}
	}
	past := m
	past.Shards = append([]Shard(nil), m.Shards...)
	for _, sh := range m.Shards {
		sh.Stage, sh.File = 1, strings.Replace(sh.File, "000", "001", 1)
		past.Shards = append(past.Shards, sh)
	}
	data, _ := json.Marshal(past)
	if _, err := DecodeManifest(data); err == nil || !strings.Contains(err.Error(), "past the 1 stages") {
		t.Errorf("a shard past the stages: %v", err)
	}
	old := m
	old.Stages = 0
	data, _ = json.Marshal(old)
	if _, err := DecodeManifest(data); err != nil {
		t.Errorf("a manifest from before stages were recorded: %v", err)
	}
	short := m
	short.Step, short.Stages = 4, 2
	tmp := filepath.Join(dir, ".step-00000004.tmp-test")
	os.Mkdir(tmp, 0o755)
	if err := commitCheckpoint(dir, tmp, &short); err == nil || !strings.Contains(err.Error(), "stage 1 of 2 has none") {
		t.Errorf("a commit with stage 1's shards missing: %v", err)
	}
	if _, err := os.Stat(stepDir(dir, 4)); err == nil {
		t.Error("the incomplete checkpoint was committed")
	}
}

// TestCommitLeavesTheNextCheckpointBeingWritten: committing step 2 removes
// the temporary directories writers that died left behind (an earlier
// step's, another run's or generation's) but not the next step's of the
// same writers: without a flush (2bw) a stage goes on and writes its shard
// of step 3 while the coordinator still commits step 2. Pruning it made
// run --schedule 2bw --checkpoint-every 1 fail at its second checkpoint
// ("shard params-000.safetensors: ... no such file or directory").
func TestCommitLeavesTheNextCheckpointBeingWritten(t *testing.T) {
	dir := t.TempDir()
	tmp := tmpStepDir(dir, 2, "tok", 1)
	next := tmpStepDir(dir, 3, "tok", 1)
	dead := []string{tmpStepDir(dir, 1, "tok", 1), tmpStepDir(dir, 3, "tok", 0), tmpStepDir(dir, 3, "other", 1), filepath.Join(dir, ".step-00000005.tmp-0a1b2c3d")}
	for _, d := range append([]string{tmp, next}, dead...) {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w1 := []tensor.Named{{Name: "fc.weight", Shape: []int{2}, F32: []float32{1, 2}}}
	sh, err := writeShard(tmp, shardFile(shardParams, 0), func(w io.Writer) error { return streamNamed(w, w1) })
	if err != nil {
		t.Fatal(err)
	}
	opt, err := writeShard(tmp, shardFile(shardOptim, 0), func(w io.Writer) error { return streamNamed(w, nil) })
	if err != nil {
		t.Fatal(err)
	}
	sh.By, opt.By = byWorker, byWorker
	m := Manifest{Step: 2, Model: "m", Stages: 1, Shards: []Shard{sh, opt}}
	if err := commitCheckpoint(dir, tmp, &m); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(next); err != nil {
		t.Errorf("the next step's checkpoint, being written, was removed: %v", err)
	}
	for _, d := range dead {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s, a dead writer's, was left", filepath.Base(d))
		}
	}
}

//go:build unix

package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOutputsFollowUmask (issue 22, item 8): the files the commands write
// are 0666 less the umask, as os.Create's and the checkpoints' are, not 0600.
func TestOutputsFollowUmask(t *testing.T) {
	model := smallModel(t, "mlp")
	for _, umask := range []int{0o022, 0o027} {
		old := syscall.Umask(umask)
		dir := t.TempDir()
		p := func(name string) string { return filepath.Join(dir, name) }
		for _, args := range [][]string{
			{"models", "export", "mlp", "--preset", "small", "-o", p("model.json")},
			{"search", model, "--devices", "2", "--device", "cpu", "-o", p("plan.json")},
			{"sim", p("plan.json"), "--trace", p("trace.json"), "--svg", p("timeline.svg")},
			{"explain", p("plan.json"), "--svg", p("stages.svg")},
			{"train", model, "--steps", "2", "--dump", p("dump")},
			{"run", p("plan.json"), "--model", model, "--steps", "2", "--checkpoint", p("ck"), "--metrics", p("metrics.jsonl"), "--trace", p("run-trace.json")},
			{"export", p("ck"), "-o", p("trained.safetensors")},
		} {
			if code, _, errs := gp(t, "", args...); code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errs)
			}
		}
		syscall.Umask(old)
		want := fs.FileMode(0o666 &^ umask)
		n := 0
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			n++
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
				t.Errorf("umask %03o: %s is %v, want %v", umask, path, st.Mode().Perm(), want)
			}
			return nil
		})
		if n < 14 {
			t.Errorf("umask %03o: %d files written, want at least 14", umask, n)
		}
	}
}

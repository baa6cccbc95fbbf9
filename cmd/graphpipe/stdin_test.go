package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestEveryFileTakesStdin (issue 22, item 1): every command that reads a
// file reads standard input for "-", run included (it read stdin twice and
// failed with "the file is empty"); a second "-" in one command line is
// refused, naming standard input, instead of reading nothing.
func TestEveryFileTakesStdin(t *testing.T) {
	dir := t.TempDir()
	modelPath := smallModel(t, "mlp")
	model := readFile(t, modelPath)
	planPath := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", modelPath, "--devices", "2", "--device", "cpu", "-o", planPath); code != 0 {
		t.Fatal(errs)
	}
	optimes := filepath.Join(dir, "optimes.json")
	if code, _, errs := gp(t, "", "profile", "--model", modelPath, "--quick", "-o", optimes); code != 0 {
		t.Fatal(errs)
	}
	profile := filepath.Join(dir, "cpu.json")
	if err := os.WriteFile(profile, plan.EncodeDevice(plan.Profiles["cpu"]), 0o644); err != nil {
		t.Fatal(err)
	}
	init := filepath.Join(dir, "dump")
	if code, _, errs := gp(t, "", "train", modelPath, "--steps", "1", "--dump", init); code != 0 {
		t.Fatal(errs)
	}
	runJSON := filepath.Join(dir, "run.json")
	code, out, errs := gp(t, "", "run", modelPath, "--devices", "2", "--steps", "2", "--json")
	if code != 0 {
		t.Fatal(errs)
	}
	os.WriteFile(runJSON, []byte(out), 0o644)
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{model, []string{"validate", "-"}},
		{model, []string{"inspect", "-"}},
		{model, []string{"search", "-", "--devices", "2", "--device", "cpu"}},
		{model, []string{"train", "-", "--steps", "1"}},
		{model, []string{"run", "-", "--devices", "2", "--steps", "2"}},
		{readFile(t, planPath), []string{"run", "-", "--model", modelPath, "--steps", "2"}},
		{model, []string{"run", planPath, "--model", "-", "--steps", "2"}},
		{readFile(t, planPath), []string{"sim", "-"}},
		{readFile(t, planPath), []string{"explain", "-"}},
		{model, []string{"profile", "--model", "-", "--quick"}},
		{readFile(t, optimes), []string{"search", modelPath, "--devices", "2", "--device", "cpu", "--op-times", "-"}},
		{readFile(t, profile), []string{"search", modelPath, "--devices", "2", "--device", "-"}},
		{readFile(t, filepath.Join(init, "final.safetensors")), []string{"train", modelPath, "--steps", "1", "--init", "-"}},
		{out, []string{"compare", "-", runJSON}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if code, _, errs := gp(t, tc.stdin, tc.args...); code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
		})
	}
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{readFile(t, planPath), []string{"run", "-", "--model", "-"}},
		{model, []string{"search", "-", "--op-times", "-"}},
		{model, []string{"train", "-", "--init", "-"}},
		{out, []string{"compare", "-", "-"}},
	} {
		t.Run("twice "+strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errs := gp(t, tc.stdin, tc.args...)
			if code != 2 || !strings.Contains(errs, "standard input was read already") {
				t.Fatalf("exit %d, %q: want 2 and standard input named", code, errs)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

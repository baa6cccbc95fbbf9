package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusedBeforeWork: an output flag that names a file which cannot be
// written fails before any work (exit 2, naming the flag), and one that fails
// at the end names its flag, not a temporary file; so do other flags and
// files a command cannot use.
func TestRefusedBeforeWork(t *testing.T) {
	model := smallModel(t, "mlp")
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing", "x")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", model, "--devices", "2", "--device", "cpu", "--trace", missing}, "--trace " + missing + ": directory " + filepath.Dir(missing) + ": no such file or directory"},
		{[]string{"run", model, "--devices", "2", "--device", "cpu", "--profile", dir}, "--profile " + dir + ": is a directory, not a file"},
		{[]string{"search", model, "--device", "cpu", "-o", filepath.Join(file, "p.json")}, file + " is not a directory"},
		{[]string{"profile", "--model", model, "--quick", "-o", missing}, "-o " + missing + ": directory"},
		{[]string{"sim", plan, "--trace", missing}, "--trace " + missing + ": cannot write: no such file or directory"},
		{[]string{"sim", plan, "--svg", missing}, "--svg " + missing + ": cannot write"},
		{[]string{"explain", plan, "--svg", missing}, "--svg " + missing + ": cannot write"},
		{[]string{"models", "export", "mlp", "-o", missing}, "-o " + missing + ": cannot write"},
		{[]string{"search", model, "--devices-per-node", "0"}, "--devices-per-node: must be positive, got 0"},
		{[]string{"run", model, "--device", "cpu", "--resume", missing}, "--resume " + missing + ": not a directory of checkpoints"},
		{[]string{"export", missing, "-o", file}, "DIR " + missing + ": not a directory of checkpoints"},
		{[]string{"worker", "--nats", "bogus://x", "--run", "r"}, `--nats bogus://x: scheme "bogus": want nats, tls, ws or wss`},
		{[]string{"run", model, "--device", "cpu", "--nats", "nats://"}, "--nats nats://: no host"},
		{[]string{"run", model, "--device", "cpu", "--checkpoint", filepath.Join(file, "ck")}, "--checkpoint " + filepath.Join(file, "ck") + ": not a directory"},
		{[]string{"sim", model}, "not a plan but a model file (graphpipe/model@1)"},
		{[]string{"explain", file}, file + ": not a plan: the file is empty"},
	} {
		code, out, errs := gp(t, "", tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) || strings.Contains(errs, ".tmp") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
}

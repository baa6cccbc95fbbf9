package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// exitCase is one fault and what every command that meets it exits with.
type exitCase struct {
	fault string
	want  int
	runs  [][]string // one command line per command that can meet it
	says  string     // what its one line says
}

// TestExitCodes holds every command to the README's table of exit
// statuses: each documented status has faults here, and the same fault
// gives the same status in every command that can meet it (an empty
// checkpoint directory and a missing one, from export and from run; a
// refused token from run and from worker; --batch 0 wherever it is a flag).
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	model := smallModel(t, "mlp")
	dlrm := smallModel(t, "dlrm")
	empty, missing := filepath.Join(dir, "empty"), filepath.Join(dir, "missing")
	os.Mkdir(empty, 0o755)
	damaged := filepath.Join(dir, "damaged")
	if code, _, errs := gp(t, "", "run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--checkpoint", damaged); code != 0 {
		t.Fatal(errs)
	}
	os.WriteFile(filepath.Join(damaged, "step-00000001", "params-000.safetensors"), []byte("cut"), 0o644)
	url, token, stop := startTestNATS(t)
	defer stop()
	out := filepath.Join(dir, "out.safetensors")
	cases := []exitCase{
		{"nothing wrong", 0, [][]string{{"validate", model}}, ""},
		{"no plan fits, found by searching", 1, [][]string{{"search", model, "--devices", "2", "--device", "cpu", "--memory-gb", "0.0001", "--optimizer-state", "replicated"}}, "no gpp plan of"},
		{"an op that fits no device, refused before any search", 2, [][]string{{"search", model, "--devices", "2", "--device", "cpu", "--memory-gb", "0.000001"}}, `no plan fits: memory: op "mlp.fc1" alone needs`},
		{"a NATS server that does not answer", 1, [][]string{
			{"run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--nats", "nats://127.0.0.1:1", "--workers", "external"},
			{"worker", "--nats", "nats://127.0.0.1:1", "--run", "r", "--connect-wait", "0"}}, "no servers available"},
		{"no coordinator for --join-timeout", 1, [][]string{
			{"worker", "--nats", url, "--nats-token", token, "--run", "nosuchrun", "--join-timeout", "1s"}}, "run nosuchrun: no coordinator heard for 1s"},
		{"every checkpoint damaged", 1, [][]string{
			{"export", damaged, "-o", out},
			{"run", model, "--devices", "2", "--device", "cpu", "--steps", "3", "--resume", damaged}}, "none of the 1 checkpoints"},
		{"a missing file", 2, [][]string{{"validate", missing}, {"import", missing, "-o", out}, {"train", missing}}, "cannot read"},
		{"a token the server refuses", 2, [][]string{
			{"run", model, "--devices", "2", "--device", "cpu", "--steps", "1", "--nats", url, "--nats-token", "wrong", "--workers", "external"},
			{"worker", "--nats", url, "--nats-token", "wrong", "--run", "r"}}, "Authorization Violation"},
		{"a checkpoint directory that holds none", 2, [][]string{
			{"export", empty, "-o", out},
			{"run", model, "--devices", "2", "--device", "cpu", "--steps", "3", "--resume", empty}}, "not a directory of checkpoints"},
		{"a checkpoint directory that is not there", 2, [][]string{
			{"export", missing, "-o", out},
			{"run", model, "--devices", "2", "--device", "cpu", "--steps", "3", "--resume", missing}}, "not a directory of checkpoints"},
		{"--batch 0", 2, [][]string{
			{"train", model, "--batch", "0"}, {"run", model, "--devices", "2", "--batch", "0"}, {"search", model, "--devices", "2", "--batch", "0"},
			{"profile", "--model", model, "--batch", "0"}, {"import", missing, "--batch", "0"}, {"models", "export", "mlp", "--batch", "0"}}, "--batch: must be positive, got 0"},
		{"--batch -8 (not blamed on --micro-batch)", 2, [][]string{{"train", model, "--batch", "-8"}, {"run", model, "--devices", "2", "--batch", "-8"}}, "--batch: must be positive, got -8"},
		{"--epochs 0", 2, [][]string{{"train", model, "--epochs", "0"}, {"run", model, "--devices", "2", "--epochs", "0"}}, "--epochs: must be positive, got 0"},
		{"training diverged", 3, [][]string{
			{"train", dlrm, "--optimizer", "sgd", "--lr", "1e6", "--steps", "10"},
			{"run", dlrm, "--devices", "2", "--device", "cpu", "--optimizer", "sgd", "--lr", "1e6", "--steps", "10"}}, "non-finite values"},
	}
	covered := map[string]bool{"128 + N": true} // TestExitBySignal
	for _, c := range cases {
		covered[strconv.Itoa(c.want)] = true
		for _, args := range c.runs {
			t.Run(c.fault+"/"+args[0], func(t *testing.T) {
				code, _, errs := gp(t, "", args...)
				if code != c.want || !strings.Contains(errs, c.says) {
					t.Fatalf("%v: exit %d, %q; want %d and %q", args, code, errs, c.want, c.says)
				}
			})
		}
	}
	for _, status := range readmeExitStatuses(t) {
		if !covered[status] {
			t.Errorf("the README's exit status %s has no fault in this test", status)
		}
	}
}

// TestExitBySignal: a run stopped by a signal exits 128 + its number.
func TestExitBySignal(t *testing.T) {
	model := smallModel(t, "mlp")
	p := startRunLogged(t, model, "--devices", "2", "--device", "cpu", "--steps", "100000", "--run", "bysignal", "--log-every", "1")
	p.waitFor(t, "step 2/100000")
	p.Process.Signal(syscall.SIGINT)
	if code := p.exitCode(t, 20*time.Second); code != 128+2 {
		t.Fatalf("exit %d, want 130:\n%s", code, p.errs())
	}
}

// readmeExitStatuses is the first column of the README's table of exit
// statuses.
func readmeExitStatuses(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| status | meaning | for example |\n|---|---|---|\n")
	if !ok {
		t.Fatal("the README has no table of exit statuses")
	}
	var out []string
	row := regexp.MustCompile(`^\| ([^|]+?) \|`)
	for _, l := range strings.Split(table, "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			break
		}
		out = append(out, m[1])
	}
	if strings.Join(out, ",") != "0,1,2,3,128 + N" {
		t.Fatalf("the README's exit statuses are %q, want 0, 1, 2, 3 and 128 + N", out)
	}
	return out
}

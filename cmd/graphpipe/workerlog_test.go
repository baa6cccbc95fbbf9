package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestExternalWorkerSaysWhatItRuns (issue 22, item 11): a worker started by
// hand says that it connected (the URL without its token), the stage it was
// given and that it is done; run's own local workers stay quiet.
func TestExternalWorkerSaysWhatItRuns(t *testing.T) {
	model := smallModel(t, "dlrm")
	_, logs := externalRunLogs(t, model, "ext-log", filepath.Join(t.TempDir(), "run"), [][]string{nil, nil})
	assigned := regexp.MustCompile(`graphpipe worker: run ext-log \(generation 1\): training dlrm's stage \d of the plan's \d+(, replica \d of its 2)?, (\d+ ops \(\S+ \.\. \S+\)|op \S+), micro-batch \d+, steps 1 to 3\n`)
	for i, log := range logs {
		if !strings.HasPrefix(log, "graphpipe worker: connected to nats://127.0.0.1:") || !strings.Contains(log, "as a worker of run ext-log (generation 1), computing on the CPU") {
			t.Errorf("worker %d does not say it connected:\n%s", i, log)
		}
		if !assigned.MatchString(log) {
			t.Errorf("worker %d does not say what it runs:\n%s", i, log)
		}
		if !strings.HasSuffix(log, "graphpipe worker: run ext-log done: trained steps 1 to 3\n") {
			t.Errorf("worker %d does not say it is done:\n%s", i, log)
		}
	}
	code, _, errs := gp(t, "", "run", model, "--devices", "2", "--steps", "1")
	if code != 0 || strings.Contains(errs, "graphpipe worker:") {
		t.Errorf("local workers: exit %d\n%s", code, errs)
	}
	if got := redactURLs("nats://s3cret@h1:4222, nats://u:pw@h2:4222"); strings.Contains(got, "s3cret") || strings.Contains(got, "pw") {
		t.Errorf("redacted: %s", got)
	}
}

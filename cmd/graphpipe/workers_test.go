package main

import (
	"errors"
	"strings"
	"testing"
)

// TestParseWorkers: each --workers value becomes its launcher kind (and a
// pool its name), which prints back as the user wrote it (run --json's
// "workers"); a bad value is a usage error naming --workers.
func TestParseWorkers(t *testing.T) {
	for _, tc := range []struct {
		in      string
		kind    launcherKind
		pool    string
		wantErr string
	}{
		{in: "local", kind: localWorkers},
		{in: "external", kind: externalWorkers},
		{in: "tasks", kind: taskWorkers},
		{in: "pool:gpus", kind: poolWorkers, pool: "gpus"},
		{in: "cloud", wantErr: `--workers: must be "local", "external", "pool:NAME" or "tasks", got "cloud"`},
		{in: "", wantErr: `--workers: must be "local", "external", "pool:NAME" or "tasks", got ""`},
		{in: "Local", wantErr: `got "Local"`},
		{in: "pool:", wantErr: `--workers pool:: pool name ""`},
		{in: "pool:a.b", wantErr: `--workers pool:a.b: pool name "a.b"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			w, err := parseWorkers(tc.in)
			if tc.wantErr != "" {
				var ue *usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("parseWorkers(%q) = %v, want a one-line usage error with %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pool, isPool := w.pool()
			if w.kind != tc.kind || pool != tc.pool || isPool != (tc.kind == poolWorkers) || w.String() != tc.in {
				t.Errorf("parseWorkers(%q) = %+v (pool %q %v, %q)", tc.in, w, pool, isPool, w.String())
			}
			if w.local() != (tc.kind == localWorkers) || w.external() != (tc.kind == externalWorkers) || w.tasks() != (tc.kind == taskWorkers) {
				t.Errorf("%q: local %v external %v tasks %v", tc.in, w.local(), w.external(), w.tasks())
			}
		})
	}
}

// TestWorkersCheckedFirst: a bad --workers is refused where the flags are
// read, before the model is (which here does not exist), and a pool
// without --nats afterwards, once the plan is known.
func TestWorkersCheckedFirst(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "/nonexistent/m.json", "--workers", "cloud"}, `graphpipe: --workers: must be "local", "external", "pool:NAME" or "tasks", got "cloud"`},
		{[]string{"run", "/nonexistent/m.json", "--workers", "pool:a b"}, `graphpipe: --workers pool:a b: pool name "a b"`},
		{[]string{"run", smallModel(t, "mlp"), "--devices", "2", "--device", "cpu", "--workers", "pool:p"}, "graphpipe: --workers pool:p: needs --nats"},
	} {
		code, out, errs := gp(t, "", tc.args...)
		if first, _, _ := strings.Cut(errs, "\n"); code != 2 || out != "" || !strings.HasPrefix(first, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and a first line %q", tc.args, code, errs, tc.want)
		}
	}
}

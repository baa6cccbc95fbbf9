package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// badKeys lists the keys of a JSON document, at any depth, that are not
// snake_case.
func badKeys(v any, at string) []string {
	var bad []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if !snakeCase.MatchString(k) {
				bad = append(bad, at+"."+k)
			}
			bad = append(bad, badKeys(e, at+"."+k)...)
		}
	case []any:
		for _, e := range v {
			bad = append(bad, badKeys(e, at+"[]")...)
		}
	}
	return bad
}

// TestJSONOutputsCarryFormat (issue 22, item 7): every JSON document a
// command prints opens with a format tag, as the model and plan files do,
// and names its fields in snake_case (inspect named its branches' First,
// FwdFLOPs, ...).
func TestJSONOutputsCarryFormat(t *testing.T) {
	dir := t.TempDir()
	model := smallModel(t, "mmt")
	planPath := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", planPath); code != 0 {
		t.Fatal(errs)
	}
	runJSON := filepath.Join(dir, "run.json")
	data, dump := filepath.Join(dir, "data.safetensors"), filepath.Join(dir, "dump")
	if code, _, errs := gp(t, "", "data", "synth", model, "-o", data, "--samples", "32"); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := gp(t, "", "train", model, "--steps", "1", "--dump", dump); code != 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		args   []string
		format string
	}{
		{[]string{"inspect", model, "--json"}, inspectFormat},
		{[]string{"search", model, "--devices", "2", "--device", "cpu", "--json"}, searchFormat},
		{[]string{"sim", planPath, "--json"}, simFormat},
		{[]string{"train", model, "--steps", "2", "--json"}, trainFormat},
		{[]string{"train", model, "--steps", "2", "--data", data, "--eval-data", data, "--json"}, trainFormat},
		{[]string{"eval", model, "--init", filepath.Join(dump, "final.safetensors"), "--data", data, "--json"}, evalFormat},
		{[]string{"run", planPath, "--model", model, "--steps", "2", "--data", data, "--eval-data", data, "--json"}, runFormat},
		{[]string{"compare", runJSON, runJSON, "--json"}, compareFormat},
		{[]string{"profile", "--quick", "--json"}, profileFormat},
		{[]string{"profile", "--quick"}, plan.DeviceFormat},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := gp(t, "", tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if tc.format == runFormat {
				writeTestFile(t, runJSON, out)
			}
			var doc map[string]any
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if doc["format"] != tc.format {
				t.Errorf("format %v, want %q", doc["format"], tc.format)
			}
			if bad := badKeys(doc, ""); len(bad) > 0 {
				t.Errorf("keys not in snake_case: %v", bad)
			}
		})
	}
	// the device profile profile writes is one --device reads
	if _, err := plan.ParseDevice(plan.EncodeDevice(plan.Profiles["cpu"])); err != nil {
		t.Error(err)
	}
	if _, err := plan.ParseDevice([]byte(`{"format": "graphpipe/device@9"}`)); err == nil || !strings.Contains(err.Error(), "format") {
		t.Errorf("another format: %v", err)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/models"
)

var update = flag.Bool("update", false, "rewrite golden files")

// gp runs a command line in process and returns its exit status and output.
func gp(t testing.TB, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpEverywhere(t *testing.T) {
	for _, path := range [][]string{{}, {"models"}, {"models", "list"}, {"models", "export"}, {"inspect"}, {"validate"}, {"search"}, {"sim"}, {"explain"}, {"compare"}, {"version"}} {
		name := strings.Join(append([]string{"graphpipe"}, path...), " ")
		t.Run(name, func(t *testing.T) {
			code, out, _ := gp(t, "", append(path, "--help")...)
			if code != 0 || !strings.Contains(out, "Usage:") {
				t.Fatalf("exit %d, output:\n%s", code, out)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"inspect"}, "takes 1 argument(s) (MODEL), got 0"},
		{[]string{"inspect", "a", "b"}, "got 2"},
		{[]string{"inspect", "--jsn", "x"}, "unknown flag: --jsn"},
		{[]string{"models", "export", "gpt"}, `unknown model "gpt"`},
		{[]string{"models", "export", "dlrm", "--heads", "4"}, "--heads does not apply to model dlrm"},
		{[]string{"models", "export", "mmt", "--layers", "x"}, `invalid argument "x"`},
		{[]string{"models", "export", "mmt", "--preset", "huge"}, `unknown preset "huge"`},
		{[]string{"models", "export", "mmt", "--layers", "0"}, "--layers: must be a positive integer"},
		{[]string{"validate", "/nonexistent/model.json"}, "/nonexistent/model.json: cannot read: no such file or directory"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := gp(t, "", tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if out != "" {
				t.Errorf("stdout is not empty: %q", out)
			}
			if !strings.Contains(errs, tc.want) {
				t.Errorf("stderr %q does not say %q", errs, tc.want)
			}
		})
	}
}

func TestBadModelFile(t *testing.T) {
	bad := `{"format": "graphpipe/model@1", "batch_size": 4,
	  "inputs": [{"name": "x", "shape": [4], "dtype": "float32"}, {"name": "y", "shape": [2], "dtype": "float32"}],
	  "ops": [{"name": "fc", "op": "linear", "inputs": ["x"], "attrs": {"out": 2}},
	          {"name": "head", "op": "linear", "inputs": ["fuse2"], "attrs": {"out": 2}},
	          {"name": "loss", "op": "mse", "inputs": ["fc", "y"]}]}`
	path := filepath.Join(t.TempDir(), "model.json")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"validate", "inspect"} {
		code, out, errs := gp(t, "", cmd, path)
		want := path + `: op "head": inputs: input "fuse2" is not defined` + "\n"
		if code != 2 || out != "" || errs != want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and %q", cmd, code, out, errs, want)
		}
	}
	code, _, errs := gp(t, "{", "validate", "-")
	if code != 2 || !strings.HasPrefix(errs, "<stdin>: not a JSON object") {
		t.Errorf("stdin: exit %d, %q", code, errs)
	}
}

// TestZooValidates exports every zoo model, default and small, and validates it.
func TestZooValidates(t *testing.T) {
	dir := t.TempDir()
	for _, e := range models.List() {
		for _, preset := range []string{"default", "small"} {
			path := filepath.Join(dir, e.Name+"-"+preset+".json")
			if code, _, errs := gp(t, "", "models", "export", e.Name, "--preset", preset, "-o", path); code != 0 {
				t.Fatalf("export %s %s: exit %d: %s", e.Name, preset, code, errs)
			}
			code, out, errs := gp(t, "", "validate", path)
			if code != 0 || !strings.Contains(out, ": ok: ") {
				t.Errorf("validate %s: exit %d %s %s", path, code, out, errs)
			}
		}
	}
}

// TestInspectMMTParams checks inspect --json of the paper's MMT against a
// parameter count written out by hand.
func TestInspectMMTParams(t *testing.T) {
	code, model, errs := gp(t, "", "models", "export", "mmt")
	if code != 0 {
		t.Fatal(errs)
	}
	code, out, errs := gp(t, model, "inspect", "--json", "-")
	if code != 0 {
		t.Fatal(errs)
	}
	var r struct {
		Params   int64 `json:"params"`
		Ops      int   `json:"ops"`
		Sections []struct {
			Branches []json.RawMessage `json:"branches"`
		} `json:"parallel_sections"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	const (
		branches, layers = 4, 8
		d, ffn           = 1024, 4096
		vocab, classes   = 8192, 1000
	)
	attention := 3*d*d + 3*d + d*d + d // in_proj weight and bias, out_proj weight and bias
	feedForward := d*ffn + ffn + ffn*d + d
	layerNorms := 2 * (d + d)
	perLayer := attention + feedForward + layerNorms
	embeddings := branches * vocab * d
	head := branches*d*classes + classes
	want := int64(branches*layers*perLayer + embeddings + head)
	if r.Params != want {
		t.Errorf("inspect says %d parameters, the hand count is %d", r.Params, want)
	}
	if len(r.Sections) != 1 || len(r.Sections[0].Branches) != branches {
		t.Errorf("parallel sections %+v, want one of %d branches", r.Sections, branches)
	}
}

func TestExportStdoutEqualsFile(t *testing.T) {
	_, stdout, _ := gp(t, "", "models", "export", "dlrm", "--preset", "small", "--branches", "2")
	path := filepath.Join(t.TempDir(), "d.json")
	gp(t, "", "models", "export", "dlrm", "--preset", "small", "--branches", "2", "-o", path)
	data, err := os.ReadFile(path)
	if err != nil || string(data) != stdout || !strings.Contains(stdout, `"dense1.x"`) || strings.Contains(stdout, `"dense2.x"`) {
		t.Fatalf("file and stdout differ or --branches ignored (%v)", err)
	}
}

// TestInspectGolden pins the text report of the small MMT.
func TestInspectGolden(t *testing.T) {
	_, model, _ := gp(t, "", "models", "export", "mmt", "--preset", "small")
	code, out, errs := gp(t, model, "inspect", "-")
	if code != 0 {
		t.Fatal(errs)
	}
	compareGolden(t, filepath.Join("testdata", "inspect-mmt-small.golden"), out)
}

// TestPlanWhereAModelGoes (issue 22, item 9): a plan file given where a
// model goes is named as one in one line saying what to run on it, not as
// 17 unknown fields; a model given where a plan goes is named likewise; an
// unknown op names the known ones.
func TestPlanWhereAModelGoes(t *testing.T) {
	model := smallModel(t, "mlp")
	plan := filepath.Join(t.TempDir(), "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", plan); code != 0 {
		t.Fatal(errs)
	}
	want := plan + ": is a plan (graphpipe/plan@1), not a model: 'graphpipe explain " + plan + "' describes it, 'graphpipe sim " + plan +
		"' simulates it, 'graphpipe run " + plan + " --model MODEL' trains it\n"
	for _, args := range [][]string{
		{"search", plan},
		{"validate", plan},
		{"inspect", plan},
		{"train", plan},
		{"run", plan, "--model", plan}, // a plan where run's --model goes
	} {
		code, out, errs := gp(t, "", args...)
		if code != 2 || out != "" || errs != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", args, code, out, errs, want)
		}
	}
	for _, cmd := range []string{"sim", "explain"} {
		code, _, errs := gp(t, "", cmd, model)
		if code != 2 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "not a plan but a model file") || !strings.Contains(errs, "graphpipe search") {
			t.Errorf("%s MODEL: exit %d %q", cmd, code, errs)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	writeTestFile(t, bad, strings.Replace(readFile(t, model), `"op": "relu"`, `"op": "swish"`, 1))
	code, _, errs := gp(t, "", "validate", bad)
	if code != 2 || !strings.Contains(errs, `unknown operator "swish" (known: add, attention,`) {
		t.Errorf("unknown op: exit %d %q", code, errs)
	}
}

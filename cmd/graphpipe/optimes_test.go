package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestOpTimesFeedSearch: profile --model writes op times that search and
// run read; the plan says so; op times of another model, a broken file and
// a device the timing cannot run on are usage errors naming the flag.
func TestOpTimesFeedSearch(t *testing.T) {
	dir := t.TempDir()
	model := smallModel(t, "mmt")
	times := filepath.Join(dir, "mmt.optimes.json")
	if c, _, e := gp(t, "", "profile", "--model", model, "--quick", "-o", times); c != 0 || !strings.Contains(e, "timed 57 ops at micro-batches [1 2 4 8 16]") {
		t.Fatalf("profile --model: exit %d, %s", c, e)
	}
	c, out, e := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "--op-times", times, "--json")
	if c != 0 || !strings.Contains(out, `op times measured on cpu (`) {
		t.Fatalf("search --op-times: exit %d, %s %s", c, out, e)
	}

	other := filepath.Join(dir, "other.json")
	if c, _, e := gp(t, "", "models", "export", "mlp", "--preset", "small", "-o", other); c != 0 {
		t.Fatal(e)
	}
	broken := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(broken, []byte(`{"format":"graphpipe/optimes@1"`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"another model", []string{"search", other, "--op-times", times}, "--op-times: measured on model \"mmt\""},
		{"broken file", []string{"search", model, "--op-times", broken}, "--op-times " + broken + ": op times: file:"},
		{"missing file", []string{"search", model, "--op-times", filepath.Join(dir, "none.json")}, "cannot read"},
		{"unknown device", []string{"profile", "--model", model, "--device", "tpu"}, `--device: cannot time ops on "tpu"`},
		{"json", []string{"profile", "--model", model, "--json"}, "--json: not with --model"},
		{"batch without model", []string{"profile", "--batch", "4"}, "--batch: only with --model"},
		{"bad batch", []string{"profile", "--model", model, "--batch", "-3"}, "--batch: must be positive, got -3"},
		{"batch past memory", []string{"profile", "--model", model, "--batch", "1048576"}, "--batch: timing the ops at micro-batch 1048576 needs about"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, e := gp(t, "", c.args...)
			if code != 2 || !strings.Contains(e, c.want) || strings.Count(strings.TrimSpace(e), "\n") > 1 {
				t.Fatalf("exit %d, stderr %q, want 2 and %q", code, e, c.want)
			}
		})
	}
}

// opaqueModel is the small MLP with its first op made opaque (a cost, no
// computation).
func opaqueModel(t *testing.T) string {
	t.Helper()
	path := smallModel(t, "mlp")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	op := m["ops"].([]any)[0].(map[string]any)
	op["op"], op["attrs"] = "opaque", map[string]any{"out_shape": []int{4}, "flops_fwd": 100}
	data, _ = json.Marshal(m)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOpaqueIsNotComputed: what must compute a model refuses an opaque op
// up front, as bad input naming the file and the op; search takes it.
func TestOpaqueIsNotComputed(t *testing.T) {
	model := opaqueModel(t)
	for _, args := range [][]string{
		{"run", model, "--devices", "1", "--device", "cpu", "--steps", "1"},
		{"profile", "--model", model},
		{"train", model, "--steps", "1"},
	} {
		code, _, e := gp(t, "", args...)
		if code != 2 || !strings.Contains(e, "is opaque") || strings.Count(strings.TrimSpace(e), "\n") > 0 {
			t.Errorf("%v: exit %d, %q", args, code, e)
		}
	}
	if code, _, e := gp(t, "", "search", model, "--devices", "2", "--device", "cpu"); code != 0 {
		t.Errorf("search of an opaque model: exit %d, %s", code, e)
	}
}

// TestOpTimesOnEmulator: profile --model times the ops through the CUDA code
// path (on its CPU emulator), and the times say where they were taken.
func TestOpTimesOnEmulator(t *testing.T) {
	needEmulator(t)
	model := smallModel(t, "mmt")
	times := filepath.Join(t.TempDir(), "emu.optimes.json")
	if c, _, e := gp(t, "", "profile", "--model", model, "--device", "cuda-emulator", "--quick", "-o", times); c != 0 {
		t.Fatalf("exit %d: %s", c, e)
	}
	data, err := os.ReadFile(times)
	if err != nil {
		t.Fatal(err)
	}
	ot, err := plan.DecodeOpTimes(data)
	if err != nil || !strings.Contains(ot.Device, "emulator") || len(ot.Ops) != 57 {
		t.Fatalf("op times from the emulator: %v, device %q, %d ops", err, ot.Device, len(ot.Ops))
	}
	if c, _, e := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "--op-times", times); c != 0 {
		t.Fatalf("search with them: exit %d, %s", c, e)
	}
}

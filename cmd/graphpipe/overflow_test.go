package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// TestOverflowingNumbersExit2: a device profile, a cluster file, op times or
// a plan whose numbers are finite but overflow the planner's sums (1e308
// seconds) exit 2 naming the file and the field: search and run panicked
// on +Inf (json: unsupported value) and sim printed +Inf and NaN.
func TestOverflowingNumbersExit2(t *testing.T) {
	dir := t.TempDir()
	model := smallModel(t, "mlp")
	plan := filepath.Join(dir, "plan.json")
	if code, _, errs := gp(t, "", "search", model, "--devices", "2", "--device", "cpu", "-o", plan); code != 0 {
		t.Fatalf("search: exit %d\n%s", code, errs)
	}
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	dev := write("dev.json", `{"name": "x", "peak_flops": 16e9, "max_eff": 1, "half_work": 2e6, "mem_bw": 10.7e9, "memory": 8e9, "launch_s": 1e308, "intra_bw": 0.8e9, "inter_bw": 0.8e9, "intra_lat_s": 1e-4, "inter_lat_s": 1e-4}`)
	cluster := write("cluster.json", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 1, "device": "cpu"}, {"count": 1, "devices_per_node": 1, "device": "v100"}], "inter_node": {"bandwidth": 1e9, "latency_s": 1e308}}`)
	times := write("times.json", string(overflowingTimes(t, model)))
	data, err := os.ReadFile(plan)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(data), `"forward_s": `) // the first stage's, set to 1e308
	j := i + strings.Index(string(data)[i:], ",")
	bad := write("bad-plan.json", string(data)[:i]+`"forward_s": 1e308`+string(data)[j:])
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"device", []string{"search", model, "--devices", "2", "--device", dev}, "--device " + dev + `: device profile "x": launch_s: must be between 0 and 1e+06 seconds, got 1e+308`},
		{"cluster", []string{"search", model, "--cluster", cluster}, "--cluster " + cluster + ": cluster: inter_node: latency_s"},
		{"op times", []string{"search", model, "--devices", "2", "--device", "cpu", "--op-times", times}, "--op-times " + times + ": op times: ops.head: forward_s"},
		{"plan", []string{"sim", bad}, bad + ": stage 0: forward_s: must be at most 1e+100"},
		{"run", []string{"run", bad, "--model", model, "--steps", "1"}, bad + ": stage 0: forward_s: must be at most 1e+100"},
		{"run, device", []string{"run", model, "--devices", "2", "--device", dev, "--steps", "1"}, "--device " + dev + ": device profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, errs := gp(t, "", tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) || strings.Contains(stdout+errs, "Inf") || strings.Contains(stdout+errs, "NaN") {
				t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 2 saying %q", code, stdout, errs, tc.want)
			}
		})
	}
}

// overflowingTimes is op times for model, every op timed at 1e-4 s but
// head's forward at 1e308 s.
func overflowingTimes(t *testing.T, model string) []byte {
	g, err := dag.LoadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	ot := plan.OpTimes{Format: plan.OpTimesFormat, Model: g.Name(), SHA256: plan.OpsHash(g), Device: "cpu", Ops: map[string]plan.OpSeries{}}
	mbs := []int64{1, 2, 4, 8, 16, 32}
	small := []float64{1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4}
	for _, op := range g.Model().Ops {
		s := plan.OpSeries{MicroBatch: mbs, Forward: small, InputGrad: small, WeightGrad: small}
		if op.Name == "head" {
			s.Forward = []float64{1e308, 1e308, 1e308, 1e308, 1e308, 1e308}
		}
		ot.Ops[op.Name] = s
	}
	data, err := json.Marshal(ot)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

package plan

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// profileJSON is a valid profile with field set to v (raw JSON).
func profileJSON(field, v string) string {
	m := map[string]any{"name": "x", "peak_flops": 16e9, "max_eff": 1, "half_work": 2e6, "mem_bw": 10.7e9, "memory": 8e9,
		"launch_s": 2e-6, "intra_bw": 0.8e9, "inter_bw": 0.8e9, "intra_lat_s": 1e-4, "inter_lat_s": 1e-4}
	m[field] = json.RawMessage(v)
	data, _ := json.Marshal(m)
	return string(data)
}

// overflowing is each profile field with a finite value that overflowed
// the cost model's sums before the bounds.
var overflowing = []struct{ field, v string }{
	{"peak_flops", "1e-300"}, {"half_work", "1e308"}, {"max_eff", "1e-300"}, {"mem_bw", "1e-300"},
	{"intra_bw", "1e-300"}, {"inter_bw", "1e-300"}, {"launch_s", "1e308"}, {"intra_lat_s", "1e308"},
	{"inter_lat_s", "1e308"}, {"host_bw", "1e-300"}, {"pageable_bw", "1e-300"}, {"sync_s", "1e308"},
	{"nats_lat_s", "1e308"}, {"nats_bw", "1e-300"}, {"send_s", "1e308"}, {"report_worker_s", "1e308"},
	{"go_worker_s", "1e308"}, {"host_cores", "4611686018427387904"},
	{"core_slowdown", "[1, 1e308]"}, {"nats_join_s", "[1e-4, 1e308]"},
}

// TestOverflowingNumbersRefused: a profile, a cluster file, op times or a
// plan whose numbers are finite but overflow the sums made of them (1e308
// seconds, 1e-300 bytes/s) is refused naming the field, so search and run
// never meet +Inf and sim never prints it.
func TestOverflowingNumbersRefused(t *testing.T) {
	for _, tc := range overflowing {
		_, err := ParseDevice([]byte(profileJSON(tc.field, tc.v)))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("profile %s %s: %v, want an error naming %s", tc.field, tc.v, err, tc.field)
		}
	}
	for _, tc := range []struct{ name, file, field string }{
		{"latency", `"inter_node": {"bandwidth": 1e9, "latency_s": 1e308}`, "inter_node"},
		{"bandwidth", `"inter_node": {"bandwidth": 1e-300, "latency_s": 0}`, "inter_node"},
		{"inline device", `"inter_node": {"bandwidth": 1e9, "latency_s": 0}, "nodes": [{"count": 1, "devices_per_node": 1, "device": ` + profileJSON("launch_s", "1e308") + `}]`, "device"},
	} {
		doc := `{"format": "graphpipe/cluster@1", ` + tc.file
		if !strings.Contains(tc.file, `"nodes"`) {
			doc += `, "nodes": [{"count": 1, "devices_per_node": 1, "device": "cpu"}]`
		}
		_, err := DecodeCluster([]byte(doc+`}`), nil)
		var ce *ClusterError
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(err.Error(), "1e+308") && !strings.Contains(err.Error(), "1e-300") {
			t.Errorf("cluster %s: %v, want a ClusterError about %s naming the value", tc.name, err, tc.field)
		}
	}
	times := `{"format":"graphpipe/optimes@1","model":"m","model_sha256":"ab","device":"cpu","ops":{"x":{"micro_batch":[1,2],"forward_s":[1,2],"input_grad_s":[1,2],"weight_grad_s":[0,0]}},"input_s":{"a":1e-4},"input_batch":8}`
	for _, tc := range []struct{ from, to, field, msg string }{
		{`"forward_s":[1,2]`, `"forward_s":[1,1e308]`, "ops.x", "forward_s"},
		{`"weight_grad_s":[0,0]`, `"weight_grad_s":[0,1e300]`, "ops.x", "weight_grad_s"},
		{`{"a":1e-4}`, `{"a":1e308}`, "input_s.a", "1e+308"},
	} {
		_, err := DecodeOpTimes([]byte(strings.Replace(times, tc.from, tc.to, 1)))
		var oe *OpTimesError
		if !errors.As(err, &oe) || oe.Field != tc.field || !strings.Contains(oe.Msg, tc.msg) {
			t.Errorf("op times %s: %v, want an error in %s saying %s", tc.to, err, tc.field, tc.msg)
		}
	}
	_, data := caseStudy(t)
	for _, tc := range []struct{ name, field string }{{"forward_s", "forward_s"}, {"launch_s", "device"}} {
		var p map[string]any
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatal(err)
		}
		if tc.name == "forward_s" {
			p["stages"].([]any)[0].(map[string]any)["forward_s"] = 1e308
		} else {
			p["device"].(map[string]any)["launch_s"] = 1e308
		}
		bad, _ := json.Marshal(p)
		_, err := DecodePlan(bad)
		var pe *PlanError
		if !errors.As(err, &pe) || pe.Field != tc.field {
			t.Errorf("plan %s 1e308: %v, want a PlanError in %s", tc.name, err, tc.field)
		}
	}
}

// worstSeconds prices the worst an accepted profile can give the cost
// model: a huge op (1e24 FLOPs, 2^63 bytes), its transfer over the slowest
// link, every fixed cost, the largest slowdown, times the most actions a
// plan holds. It must be finite.
func worstSeconds(d Device) float64 {
	const flops, bytes, actions = 1e24, 9.3e18, float64(1 << 24)
	compute := (flops+d.HalfWork)/(d.PeakFLOPs*d.MaxEff) + d.Launch + bytes/d.MemBW
	slowest := math.Min(d.IntraBW, d.InterBW)
	for _, bw := range []float64{d.HostBW, d.PageableBW, d.NATSBW, d.IPCBW, d.RingBW, d.SendBW, d.RecvBW} {
		if bw > 0 {
			slowest = math.Min(slowest, bw)
		}
	}
	fixed := d.IntraLat + d.InterLat + d.SyncS + d.NATSLat + d.IPCLat + d.RingLat + d.SendS + d.RecvS + d.SendHoldS +
		d.IterationFixed(MaxDevices) + d.GoDelay(MaxDevices) + d.JoinExtra(MaxCoreSlowdown)
	slow := 1.0
	for _, s := range d.CoreSlowdown.Values() {
		slow = math.Max(slow, s)
	}
	return actions * slow * (compute + bytes/slowest + fixed)
}

// TestWorstSecondsFinite: the bounds themselves keep the worst finite.
func TestWorstSecondsFinite(t *testing.T) {
	d := Device{Name: "worst", PeakFLOPs: MinRate, MaxEff: MinMaxEff, HalfWork: MaxHalfWork, MemBW: MinRate, Memory: 1,
		Launch: MaxSeconds, IntraBW: MinRate, InterBW: MinRate, IntraLat: MaxSeconds, InterLat: MaxSeconds, SyncS: MaxSeconds}
	d.RunCosts = RunCosts{NATSLat: MaxSeconds, NATSBW: MinRate, ReportS: MaxSeconds, ReportWorkerS: MaxSeconds, GoS: MaxSeconds,
		GoWorkerS: MaxSeconds, HostCores: MaxHostCores, CoreSlowdown: NewSlowdowns(MaxSlowdown), NATSJoinS: NewJoinLatencies(0, 0, MaxSeconds)}
	if err := d.Validate(); err != nil {
		t.Fatalf("the bounds themselves are refused: %v", err)
	}
	if w := worstSeconds(d); math.IsInf(w, 0) || math.IsNaN(w) || w > MaxStored {
		t.Fatalf("worst %g: past MaxStored", w)
	}
}

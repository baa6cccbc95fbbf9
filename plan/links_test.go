package plan

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEdgeTransportRoundTrips: a plan whose edges record their transport
// and message costs and which records an iteration's fixed cost is written
// and read back to the same fields and the same bytes, and its timing
// carries them to the simulator; an unknown transport is refused naming
// the edge.
func TestEdgeTransportRoundTrips(t *testing.T) {
	g, data := caseStudy(t)
	p, err := LoadPlan(data, g)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Edges) < 2 {
		t.Fatalf("the stored plan has %d edges, want at least 2", len(p.Edges))
	}
	p.Edges[0].Transport, p.Edges[0].SendS, p.Edges[0].RecvS, p.Edges[0].HoldS = TransportIPC, 1.5e-5, 2.5e-6, 4e-4
	p.Edges[1].Transport = TransportNATS
	p.FixedS = 3e-4
	out := p.Encode()
	q, err := LoadPlan(out, g)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range q.Edges {
		if w := p.Edges[i]; e.Transport != w.Transport || e.SendS != w.SendS || e.RecvS != w.RecvS || e.HoldS != w.HoldS {
			t.Errorf("edge %d read back as %q, %g, %g; wrote %q, %g, %g", i, e.Transport, e.SendS, e.RecvS, w.Transport, w.SendS, w.RecvS)
		}
	}
	if q.FixedS != p.FixedS {
		t.Errorf("fixed cost read back as %g, wrote %g", q.FixedS, p.FixedS)
	}
	if again := q.Encode(); !bytes.Equal(again, out) {
		t.Error("written again, the plan differs")
	}
	tm := q.Timing()
	if len(tm.Post) != len(q.Edges) || tm.Post[0] != 1.5e-5 || tm.Take[0] != 2.5e-6 || tm.Hold[0] != 4e-4 || tm.Post[1] != 0 || tm.Fixed != 3e-4 {
		t.Errorf("timing: post %v, take %v, hold %v, fixed %g", tm.Post, tm.Take, tm.Hold, tm.Fixed)
	}
	bad := strings.Replace(string(out), `"transport": "ipc"`, `"transport": "pigeon"`, 1)
	if bad == string(out) {
		t.Fatal(`no "transport": "ipc" in the written plan`)
	}
	_, err = DecodePlan([]byte(bad))
	if err == nil || !strings.Contains(err.Error(), "edges[0].transport") || !strings.Contains(err.Error(), "pigeon") {
		t.Errorf("an unknown transport: %v", err)
	}
	neg := strings.Replace(string(out), `"iteration_fixed_s": 0.0003`, `"iteration_fixed_s": -1`, 1)
	if _, err := DecodePlan([]byte(neg)); neg == string(out) || err == nil || !strings.Contains(err.Error(), "iteration_fixed_s") {
		t.Errorf("a negative fixed cost: %v", err)
	}
}

// TestOldPlansDecode: the plans stored before edges recorded a transport
// decode with none, no message costs and no fixed cost, their timing is
// what it always was (no Post, Take or Fixed), and the simulator predicts
// the iteration they stored.
func TestOldPlansDecode(t *testing.T) {
	files, _ := filepath.Glob("testdata/plans/*.json")
	if len(files) == 0 {
		t.Fatal("no stored plans")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte(`"transport"`)) {
				t.Fatal("not an old plan: it records transports")
			}
			p, err := DecodePlan(data)
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range p.Edges {
				if e.Transport != "" || e.SendS != 0 || e.RecvS != 0 {
					t.Errorf("edge %d: %q, %g, %g", i, e.Transport, e.SendS, e.RecvS)
				}
			}
			tm := p.Timing()
			if p.FixedS != 0 || tm.Post != nil || tm.Take != nil || tm.Hold != nil || tm.Begin != nil || tm.Fixed != 0 {
				t.Errorf("fixed %g, timing post %v take %v fixed %g", p.FixedS, tm.Post, tm.Take, tm.Fixed)
			}
			stored := p.Predicted.IterationS
			if err := p.Predict(); err != nil {
				t.Fatal(err)
			}
			if math.Abs(p.Predicted.IterationS-stored) > 1e-9*stored {
				t.Errorf("simulated %.9g s, stored %.9g s", p.Predicted.IterationS, stored)
			}
		})
	}
}

// TestRunCostsInProfiles: the profile files written before run costs load
// with none; a profile with every run cost is written and read back to the
// same profile; a bad figure is refused naming its field.
func TestRunCostsInProfiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/devices/*.json")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ParseDevice(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.RunCosts != (RunCosts{}) {
			t.Errorf("%s: run costs %+v from a file that has none", f, d.RunCosts)
		}
	}
	d := Profiles["cpu"]
	d.Name = "cpu (measured)"
	d.RunCosts = RunCosts{NATSLat: 4e-5, NATSBW: 3e8, IPCLat: 5e-5, IPCBW: 2e11, RingLat: 1e-4, RingBW: 1e8, SendS: 1e-5,
		SendBW: 1e9, RecvS: 2e-6, RecvBW: 1.5e9, GoS: 3e-5, GoWorkerS: 4e-5, ReportS: 1e-4, ReportWorkerS: 5e-5, HostCores: 2, CoreSlowdown: NewSlowdowns(1, 1.1, 1.6, 2.2),
		NATSJoinS: NewJoinLatencies(1.2e-4, 1.2e-4, 1.9e-4)}
	back, err := ParseDevice(EncodeDevice(d))
	if err != nil || back != d {
		t.Fatalf("read back %+v (%v), wrote %+v", back, err, d)
	}
	for _, tc := range []struct{ edit, field string }{
		{`"send_s": -1`, "send_s"},
		{`"core_slowdown": [1, 0]`, "core_slowdown[1]"},
		{`"core_slowdown": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]`, "core_slowdown"},
		{`"core_slowdown": "fast"`, "core_slowdown"},
		{`"nats_bw": 1e999`, "nats_bw"},
		{`"nats_join_s": [1e-4, -1e-4]`, "nats_join_s[1]"},
		{`"nats_join_s": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]`, "nats_join_s"},
		{`"nats_join_s": {}`, "nats_join_s"},
	} {
		base := `{"name": "c", "peak_flops": 1e10, "max_eff": 1, "half_work": 1e6, "mem_bw": 1e10, "memory": 1e9, "intra_bw": 1e9, "inter_bw": 1e9, `
		if _, err := ParseDevice([]byte(base + tc.edit + `}`)); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming %s", tc.edit, err, tc.field)
		}
	}
}

// TestSlowdownAndFixedCost: a profile's slowdown is its measured list,
// beyond it the last entry's share of the cores divided among more
// workers, 1 where it measured none; an iteration's fixed cost (the
// reports) and the go's arrival grow by one worker's share per worker; a
// message in a join of k workers takes what the profile measured beyond a
// join of two, at least 0, past the list its last entry's.
func TestSlowdownAndFixedCost(t *testing.T) {
	d := Profiles["cpu"]
	for _, k := range []int{0, 1, 5} {
		if s := d.Slowdown(k); s != 1 {
			t.Errorf("no measured sharing, %d workers: %g, want 1", k, s)
		}
	}
	d.CoreSlowdown = NewSlowdowns(1, 1.2, 1.8)
	for k, want := range map[int]float64{1: 1, 2: 1.2, 3: 1.8, 6: 3.6} {
		if s := d.Slowdown(k); math.Abs(s-want) > 1e-12 {
			t.Errorf("%d workers: %g, want %g", k, s, want)
		}
	}
	d.ReportS, d.ReportWorkerS, d.GoS, d.GoWorkerS = 1e-4, 2e-5, 3e-5, 5e-5
	if f := d.IterationFixed(3); math.Abs(f-1.6e-4) > 1e-15 {
		t.Errorf("fixed cost of 3 workers: %g, want 1.6e-4", f)
	}
	if g := d.GoDelay(2); math.Abs(g-1.3e-4) > 1e-15 {
		t.Errorf("the go reaching worker 2: %g, want 1.3e-4", g)
	}
	d.NATSJoinS = NewJoinLatencies(1e-4, 1e-4, 1.5e-4, 1.4e-4)
	for k, want := range map[int]float64{1: 0, 2: 0, 3: 5e-5, 4: 4e-5, 9: 4e-5} {
		if x := d.JoinExtra(k); math.Abs(x-want) > 1e-15 {
			t.Errorf("a join of %d workers: %g beyond two, want %g", k, x, want)
		}
	}
	d.NATSJoinS = NewJoinLatencies(2e-4, 2e-4, 1e-4)
	if x := d.JoinExtra(3); x != 0 {
		t.Errorf("a join of 3 faster than of 2: %g beyond two, want 0", x)
	}
	if HostWorkers(8, 4) != 4 || HostWorkers(3, 4) != 3 || HostWorkers(0, 4) != 1 {
		t.Error("HostWorkers")
	}
}

// TestTimeSliced: workers sharing one GPU slow an op by the number busy at
// once; a profile that measured its sharing keeps its figures.
func TestTimeSliced(t *testing.T) {
	d := Profiles["h100"].TimeSliced()
	for k, want := range map[int]float64{1: 1, 2: 2, 3: 3, 20: 20} {
		if s := d.Slowdown(k); s != want {
			t.Errorf("%d workers on one GPU: ×%g, want ×%g", k, s, want)
		}
	}
	m := Profiles["cpu"]
	m.CoreSlowdown = NewSlowdowns(1, 1.2)
	if got := m.TimeSliced().CoreSlowdown.Values(); len(got) != 2 || got[1] != 1.2 {
		t.Errorf("a measured slowdown replaced: %v", got)
	}
}

// TestSameDevice: the device a pool matches agents by.
func TestSameDevice(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"cpu", "cpu", true}, {"cpu (measured)", "cpu", true}, {"cpu-slow", "cpu", true},
		{"h100", "H100", true}, {"h100", "NVIDIA H100 80GB HBM3 sm_90 (measured)", true},
		{"a100", "NVIDIA H100 80GB HBM3 sm_90", false}, {"h100", "cpu", false}, {"v100", "a100", false},
		{"my-gpu", "my-gpu (measured)", true}, {"my-gpu", "other-gpu", false},
	} {
		if got := SameDevice(tc.a, tc.b); got != tc.same || SameDevice(tc.b, tc.a) != tc.same {
			t.Errorf("SameDevice(%q, %q) = %v, want %v both ways", tc.a, tc.b, got, tc.same)
		}
	}
}

// TestEdgeSeconds: an edge's messages of an iteration, priced by hand:
// both directions of every micro-batch, one message per pair of
// overlapping replicas, each costing its ends the send and the receive of
// its share of the bytes; over IPC a handle's; none without message costs.
func TestEdgeSeconds(t *testing.T) {
	for _, tc := range []struct {
		mb   int64
		a, b int
		want int
	}{{8, 1, 1, 1}, {8, 1, 3, 3}, {8, 2, 2, 2}, {8, 2, 3, 4}, {6, 3, 2, 4}, {4, 4, 1, 4}} {
		if got := overlaps(tc.mb, tc.a, tc.b); got != tc.want {
			t.Errorf("%d rows on %d and %d replicas: %d overlapping pairs, want %d", tc.mb, tc.a, tc.b, got, tc.want)
		}
	}
	data, err := os.ReadFile("testdata/plans/candle-uno-replicas-6cpu.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodePlan(data)
	if err != nil {
		t.Fatal(err)
	}
	if p.EdgeSeconds(0) != 0 {
		t.Errorf("no message costs in the profile, and yet %g s", p.EdgeSeconds(0))
	}
	p.Device.SendS, p.Device.SendBW, p.Device.RecvS = 1e-5, 1e9, 2e-6
	checked := false
	for i, e := range p.Edges {
		a, b := len(p.Stages[e.From].Devices), len(p.Stages[e.To].Devices)
		n := overlaps(p.MicroBatch, a, b)
		bytes := float64(e.Bytes*p.MicroBatch) / float64(n)
		want := 2 * float64(p.MicroBatches) * float64(n) * (1e-5 + bytes/1e9 + 2e-6)
		if got := p.EdgeSeconds(i); math.Abs(got-want) > 1e-12*want {
			t.Errorf("edge %d (%d → %d replicas): %g s, want %g", i, a, b, got, want)
		}
		p.Edges[i].Transport = TransportIPC
		handle := 2 * float64(p.MicroBatches) * float64(n) * (1e-5 + HandleBytes/1e9 + 2e-6)
		if got := p.EdgeSeconds(i); math.Abs(got-handle) > 1e-12*handle {
			t.Errorf("edge %d over IPC: %g s, want %g", i, got, handle)
		}
		checked = checked || a != b
	}
	if !checked {
		t.Error("the stored plan has no edge between stages of different replica counts")
	}
}

// TestIPCCapable: GPUs move tensors device to device, CPUs over NATS, and
// a profile that measured the device path (the emulator's, named as its
// CPU) device to device.
func TestIPCCapable(t *testing.T) {
	emu := Profiles["cpu"]
	emu.Name, emu.IPCBW = "CPU emulator (measured)", 1e10
	for _, c := range []struct {
		d    Device
		want bool
	}{{Profiles["h100"], true}, {Profiles["v100"], true}, {Profiles["cpu"], false}, {emu, true}} {
		if got := c.d.IPCCapable(); got != c.want {
			t.Errorf("%s: IPC %v, want %v", c.d.Name, got, c.want)
		}
	}
}

package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

// testFiles reads cluster files' profile files from a map.
func testFiles(files map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if data, ok := files[name]; ok {
			return []byte(data), nil
		}
		return nil, os.ErrNotExist
	}
}

func TestDecodeCluster(t *testing.T) {
	slow := Profiles["cpu"]
	slow.Name, slow.PeakFLOPs = "cpu-slow", slow.PeakFLOPs/2
	files := testFiles(map[string]string{"slow.json": string(EncodeDevice(slow)), "bad.json": `{"name": "x"}`})
	cases := []struct {
		name, file string
		kinds      []string // the kinds' names and devices, as "name:devices/per-node"
		field      string   // the field a refusal names
	}{
		{"two kinds", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 4, "devices_per_node": 4, "device": "v100"}, {"count": 2, "devices_per_node": 8, "device": "a100"}]}`,
			[]string{"v100:16/4", "a100:16/8"}, ""},
		{"a kind over two groups", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 2, "device": "cpu"}, {"count": 1, "devices_per_node": 2, "device": "slow.json"}, {"count": 3, "devices_per_node": 2, "device": "cpu"}]}`,
			[]string{"cpu:8/2", "cpu-slow:2/2"}, ""},
		{"inline profile and link", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 1, "device": {"name": "z", "peak_flops": 1, "max_eff": 1, "half_work": 1, "mem_bw": 1, "memory": 1, "intra_bw": 1, "inter_bw": 1}}], "inter_node": {"bandwidth": 1e9, "latency_s": 1e-5}}`,
			[]string{"z:1/1"}, ""},
		{"empty", ``, nil, "format"},
		{"another format", `{"format": "graphpipe/plan@1", "nodes": []}`, nil, "format"},
		{"unknown field", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 1, "device": "v100", "gpus": 2}]}`, nil, "format"},
		{"no nodes", `{"format": "graphpipe/cluster@1", "nodes": []}`, nil, "nodes"},
		{"no count", `{"format": "graphpipe/cluster@1", "nodes": [{"devices_per_node": 4, "device": "v100"}]}`, nil, "count, devices_per_node"},
		{"too many", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 4096, "devices_per_node": 2, "device": "v100"}]}`, nil, "count, devices_per_node"},
		{"too many in all", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 2048, "devices_per_node": 2, "device": "v100"}, {"count": 1, "devices_per_node": 1, "device": "a100"}]}`, nil, "count"},
		{"no device", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 4}]}`, nil, "device"},
		{"unknown device", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 4, "device": "tpu"}]}`, nil, "device"},
		{"missing file", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 4, "device": "gone.json"}]}`, nil, "device"},
		{"bad profile file", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 4, "device": "bad.json"}]}`, nil, "device"},
		{"a name, two profiles", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 1, "device": "cpu"}, {"count": 1, "devices_per_node": 1, "device": {"name": "cpu", "peak_flops": 1, "max_eff": 1, "half_work": 1, "mem_bw": 1, "memory": 1, "intra_bw": 1, "inter_bw": 1}}]}`, nil, "device"},
		{"a kind's nodes unlike", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 2, "device": "v100"}, {"count": 1, "devices_per_node": 4, "device": "v100"}]}`, nil, "devices_per_node"},
		{"bad link", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 1, "device": "v100"}], "inter_node": {"bandwidth": 0}}`, nil, "inter_node"},
		{"trailing data", `{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 1, "device": "v100"}]} {}`, nil, "format"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl, err := DecodeCluster([]byte(c.file), files)
			if c.field != "" {
				var ce *ClusterError
				if !errors.As(err, &ce) || ce.Field != c.field || strings.Contains(err.Error(), "\n") {
					t.Fatalf("got %v, want a one-line ClusterError about %s", err, c.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, k := range cl.Kinds {
				got = append(got, fmt.Sprintf("%s:%d/%d", k.Name(), k.Devices, k.DevicesPerNode))
				if k.MemoryLimit != k.Device.Memory {
					t.Errorf("kind %s: memory limit %d, want its profile's %d", k.Name(), k.MemoryLimit, k.Device.Memory)
				}
			}
			if !reflect.DeepEqual(got, c.kinds) {
				t.Errorf("kinds %v, want %v", got, c.kinds)
			}
		})
	}
}

// TestClusterNumbering: devices and nodes are numbered kind by kind.
func TestClusterNumbering(t *testing.T) {
	c := &Cluster{Kinds: []Kind{{Device: Profiles["v100"], Devices: 6, DevicesPerNode: 4}, {Device: Profiles["a100"], Devices: 8, DevicesPerNode: 8}}}
	for _, tc := range []struct{ dev, kind, node int }{{0, 0, 0}, {3, 0, 0}, {4, 0, 1}, {5, 0, 1}, {6, 1, 2}, {13, 1, 2}, {14, -1, -1}} {
		if k, n := c.KindOf(tc.dev), c.NodeOf(tc.dev); k != tc.kind || n != tc.node {
			t.Errorf("device %d: kind %d node %d, want %d and %d", tc.dev, k, n, tc.kind, tc.node)
		}
	}
	if c.Base(1) != 6 || c.Total() != 14 || c.KindIndex("a100") != 1 || c.KindIndex("h100") != -1 {
		t.Errorf("base %d, total %d", c.Base(1), c.Total())
	}
	if bw, lat := c.Link(0, 1); bw != Profiles["v100"].InterBW || lat != Profiles["v100"].InterLat {
		t.Errorf("link between kinds %g, %g: want the slower kind's", bw, lat)
	}
	c.InterBW, c.InterLat = 1e9, 1e-3
	if bw, lat := c.Link(1, 0); bw != 1e9 || lat != 1e-3 {
		t.Errorf("link between kinds %g, %g: want the cluster's", bw, lat)
	}
	if bw, _ := c.Link(1, 1); bw != Profiles["a100"].InterBW {
		t.Errorf("link between two a100 nodes %g: want the a100's", bw)
	}
}

// FuzzDecodeCluster: a cluster file is refused with a ClusterError or
// decodes to kinds of distinct names within MaxDevices, which written back
// as a file (each kind one group, its profile inline) decode to the same.
func FuzzDecodeCluster(f *testing.F) {
	f.Add([]byte(`{"format": "graphpipe/cluster@1", "nodes": [{"count": 4, "devices_per_node": 4, "device": "v100"}, {"count": 4, "devices_per_node": 4, "device": "a100"}]}`))
	f.Add([]byte(`{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 2, "device": "cpu"}, {"count": 1, "devices_per_node": 2, "device": "slow.json"}], "inter_node": {"bandwidth": 1e9, "latency_s": 0}}`))
	f.Add([]byte(`{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 1, "device": {"name": "z", "peak_flops": 1, "max_eff": 1, "half_work": 1, "mem_bw": 1, "memory": 1, "intra_bw": 1, "inter_bw": 1}}]}`))
	f.Add([]byte(`{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 1, "device": "cpu"}], "inter_node": {"bandwidth": 1e-300, "latency_s": 1e308}}`))
	f.Add([]byte(`{"format": "graphpipe/cluster@1", "nodes": [{"count": 1, "devices_per_node": 1, "device": ` + profileJSON("inter_lat_s", "1e308") + `}]}`))
	slow := Profiles["cpu"]
	slow.Name = "cpu-slow"
	files := testFiles(map[string]string{"slow.json": string(EncodeDevice(slow))})
	f.Fuzz(func(t *testing.T, data []byte) {
		var c *Cluster
		var err error
		if n := allocated(func() { c, err = DecodeCluster(data, files) }); n > decodeBudget(len(data)) {
			t.Fatalf("%d bytes allocated for a cluster file of %d", n, len(data))
		}
		if err != nil {
			var ce *ClusterError
			if !errors.As(err, &ce) {
				t.Fatalf("not a ClusterError: %v", err)
			}
			return
		}
		if c.Total() < 1 || c.Total() > MaxDevices || len(c.Kinds) > MaxClusterKinds {
			t.Fatalf("%d devices of %d kinds", c.Total(), len(c.Kinds))
		}
		for _, k := range c.Kinds {
			if w := worstSeconds(k.Device) + 9.3e18/math.Max(c.InterBW, MinRate) + c.InterLat; math.IsInf(w, 0) || math.IsNaN(w) {
				t.Fatalf("kind %s prices the worst op at %g s", k.Name(), w)
			}
		}
		type group struct {
			Count          int    `json:"count"`
			DevicesPerNode int    `json:"devices_per_node"`
			Device         Device `json:"device"`
		}
		var back struct {
			Format string  `json:"format"`
			Nodes  []group `json:"nodes"`
			Link   *struct {
				Bandwidth float64 `json:"bandwidth"`
				Latency   float64 `json:"latency_s"`
			} `json:"inter_node,omitempty"`
		}
		back.Format = ClusterFormat
		for t2, k := range c.Kinds {
			if c.KindIndex(k.Name()) != t2 || k.Devices%k.DevicesPerNode != 0 {
				t.Fatalf("kind %d: %+v", t2, k)
			}
			back.Nodes = append(back.Nodes, group{k.Devices / k.DevicesPerNode, k.DevicesPerNode, k.Device})
		}
		if c.InterBW > 0 {
			back.Link = &struct {
				Bandwidth float64 `json:"bandwidth"`
				Latency   float64 `json:"latency_s"`
			}{c.InterBW, c.InterLat}
		}
		again, _ := json.Marshal(back)
		c2, err := DecodeCluster(again, nil)
		if err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("written back: %v\n%+v\n%+v", err, c, c2)
		}
	})
}

// TestPlanOnKinds: a plan on two device kinds (testdata/plans, search
// --cluster's) decodes and simulates each stage within its kind's memory;
// a stage of no kind, or of a kind its devices are not, or a kind on a
// plan without a cluster, is refused naming the stage and field.
func TestPlanOnKinds(t *testing.T) {
	data, err := os.ReadFile("testdata/plans/dlrm-two-cpu-kinds-4cpu.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodePlan(data)
	if err != nil || p.Cluster == nil || len(p.Cluster.Kinds) != 2 {
		t.Fatalf("%v: cluster %+v", err, p.Cluster)
	}
	for s := range p.Stages {
		if k := p.Cluster.Kinds[p.KindOf(s)]; p.StageMemoryLimit(s) != k.MemoryLimit || p.Stages[s].Kind != k.Name() {
			t.Errorf("stage %d: limit %d, kind %s", s, p.StageMemoryLimit(s), p.Stages[s].Kind)
		}
	}
	if tm := p.Timing(); len(tm.Limit) != len(p.Stages) {
		t.Errorf("timing limits %v", tm.Limit)
	}
	for _, tc := range []struct {
		edit  func(*Plan)
		stage int
		field string
	}{
		{func(p *Plan) { p.Stages[1].Kind = "tpu" }, 1, "device_kind"},
		{func(p *Plan) { p.Stages[0].Kind = p.Stages[len(p.Stages)-1].Kind; p.Stages[len(p.Stages)-1].Kind = "x" }, 0, "devices"},
		{func(p *Plan) { p.Cluster = nil }, 0, "device_kind"},
		{func(p *Plan) { p.Cluster.Kinds = p.Cluster.Kinds[:1] }, -1, "cluster.kinds"},
	} {
		q, _ := DecodePlan(data)
		if q.Stages[0].Kind == q.Stages[len(q.Stages)-1].Kind {
			t.Fatal("the stored plan's first and last stages are of one kind")
		}
		tc.edit(q)
		_, err := DecodePlan(q.Encode())
		var pe *PlanError
		if !errors.As(err, &pe) || pe.Stage != tc.stage || pe.Field != tc.field {
			t.Errorf("edited: got %v, want stage %d, field %s", err, tc.stage, tc.field)
		}
	}
}

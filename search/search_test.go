package search

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/partition"
)

// checkPlan verifies a plan independently of the planner: the stages are a
// valid stage graph of the model, the schedule passes the checker with each
// stage's in-flight count as its limit, and memory fits.
func checkPlan(t *testing.T, g *dag.Graph, p *Plan) {
	t.Helper()
	var stages [][]int
	for _, s := range p.Stages {
		var ops []int
		for _, name := range s.Ops {
			i, ok := g.OpIndex(name)
			if !ok {
				t.Fatalf("plan names op %q the model lacks", name)
			}
			ops = append(ops, i)
		}
		stages = append(stages, ops)
	}
	if _, err := partition.NewStageGraph(g, stages); err != nil {
		t.Fatalf("plan's stages: %v", err)
	}
	sch, err := p.ScheduleOf()
	if err != nil {
		t.Fatal(err)
	}
	limits := make([]int, len(p.Stages))
	for s := range limits {
		limits[s] = p.Stages[s].InFlight
	}
	if err := microbatch.Check(sch, limits); err != nil {
		t.Fatal(err)
	}
	if !p.Predicted.Feasible || p.Predicted.PeakMemory > p.MemoryLimit {
		t.Fatalf("plan needs %d bytes of %d", p.Predicted.PeakMemory, p.MemoryLimit)
	}
	devices := 0
	for _, s := range p.Stages {
		devices += len(s.Devices)
	}
	if devices > p.Devices {
		t.Fatalf("plan uses %d of %d devices", devices, p.Devices)
	}
	back, err := LoadPlan(p.Encode(), g)
	if err != nil {
		t.Fatalf("plan does not load against its model: %v", err)
	}
	if back.Predicted != p.Predicted || len(back.Stages) != len(p.Stages) {
		t.Fatal("plan changes through its codec")
	}
}

func searchBoth(t *testing.T, g *dag.Graph, o Options) (gpp, spp *Plan) {
	t.Helper()
	var err error
	var np *NoPlanError
	o.Strategy = "spp"
	if spp, err = Search(g, o); errors.As(err, &np) {
		// nothing sequential fits; gpp may still find a graph plan
		o.Strategy = "gpp"
		if gpp, err = Search(g, o); err == nil {
			checkPlan(t, g, gpp)
		} else if !errors.As(err, &np) {
			t.Fatal(err)
		}
		return gpp, nil
	} else if err != nil {
		t.Fatalf("spp: %v", err)
	}
	o.Strategy = "gpp"
	if gpp, err = Search(g, o); err != nil {
		t.Fatalf("gpp: %v (spp found a plan)", err)
	}
	checkPlan(t, g, gpp)
	checkPlan(t, g, spp)
	if gpp.Predicted.SamplesPerS < spp.Predicted.SamplesPerS {
		t.Fatalf("gpp %.6g samples/s < spp %.6g", gpp.Predicted.SamplesPerS, spp.Predicted.SamplesPerS)
	}
	// gpp reports the sequential plan it found: spp's, exactly
	want := Baseline{SamplesPerS: spp.Predicted.SamplesPerS, IterationS: spp.Predicted.IterationS, Stages: len(spp.Stages),
		Depth: spp.Predicted.Depth, MicroBatch: spp.MicroBatch}
	if q := gpp.Search.Sequential; q == nil || *q != want {
		t.Fatalf("gpp reports the sequential plan %+v, spp found %+v", q, want)
	}
	return gpp, spp
}

func TestZooPlans(t *testing.T) {
	for _, e := range models.List() {
		for _, preset := range []string{"default", "small"} {
			cfg, _ := e.Preset(preset)
			g, err := e.Build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []int{4, 8} {
				for _, sched := range []string{"1f1b", "1f1b-depth", "zb", "gpipe"} {
					t.Run(fmt.Sprintf("%s/%s/%d/%s", e.Name, preset, d, sched), func(t *testing.T) {
						dev := Profiles["v100"]
						if preset == "small" {
							dev = Profiles["cpu"]
						}
						searchBoth(t, g, Options{Device: dev, Devices: d, Schedule: sched})
					})
				}
			}
		}
	}
}

func TestRandomPlans(t *testing.T) {
	for seed := int64(0); seed < 60; seed++ {
		n := 2 + int(seed)%59
		g, err := models.RandomDAG(seed, n, 256)
		if err != nil {
			t.Fatal(err)
		}
		o := Options{Device: Profiles["v100"], Devices: 1 + int(seed%8), DevicesPerNode: 1 + int(seed%4), Batch: 32}
		o.Schedule = []string{"1f1b", "gpipe", "1f1b-depth", "zb"}[seed%4]
		searchBoth(t, g, o)
	}
}

func TestNoPlanSaysWhichLimit(t *testing.T) {
	e, _ := models.Lookup("dlrm")
	g, _ := e.Build(e.Default)
	_, err := Search(g, Options{Device: Profiles["v100"], Devices: 2, MemoryLimit: 1e9})
	var np *NoPlanError
	if !errors.As(err, &np) || !strings.Contains(err.Error(), "memory") || !strings.Contains(err.Error(), `op "top.fc0" alone`) {
		t.Fatalf("got %v", err)
	}
	_, err = Search(g, Options{Device: Profiles["v100"], Devices: 2, MemoryLimit: 6e9})
	if !errors.As(err, &np) || !strings.Contains(err.Error(), "2 devices") {
		t.Fatalf("got %v", err)
	}
}

func TestOptionErrors(t *testing.T) {
	e, _ := models.Lookup("mlp")
	g, _ := e.Build(e.Small)
	for _, tc := range []struct {
		o    Options
		flag string
	}{
		{Options{Devices: 0}, "devices"},
		{Options{Devices: 2, Strategy: "magic"}, "strategy"},
		{Options{Devices: 2, Schedule: "zb-h2"}, "schedule"},
		{Options{Devices: 2, MicroBatch: 5}, "micro-batch"},
		{Options{Devices: 2, Batch: -1}, "batch"},
	} {
		tc.o.Device = Profiles["cpu"]
		_, err := Search(g, tc.o)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Flag != tc.flag {
			t.Errorf("%+v: got %v, want an error for --%s", tc.o, err, tc.flag)
		}
	}
}

func TestForcedMicroBatch(t *testing.T) {
	e, _ := models.Lookup("candle-uno")
	g, _ := e.Build(e.Default)
	for _, s := range []string{"gpp", "spp"} {
		p, err := Search(g, Options{Device: Profiles["v100"], Devices: 8, MicroBatch: 32, Strategy: s})
		if err != nil {
			t.Fatal(err)
		}
		if p.MicroBatch != 32 || p.MicroBatches != 32 {
			t.Errorf("%s: micro-batch %d × %d", s, p.MicroBatch, p.MicroBatches)
		}
	}
}

func TestPlanRefusals(t *testing.T) {
	e, _ := models.Lookup("case-study")
	g, _ := e.Build(e.Small)
	p, err := Search(g, Options{Device: Profiles["cpu"], Devices: 4})
	if err != nil {
		t.Fatal(err)
	}
	good := string(p.Encode())
	for _, tc := range []struct{ old, new, want string }{
		{`"format": "graphpipe/plan@1"`, `"format": "graphpipe/plan@9"`, "format"},
		{`"micro_batches": `, `"micro_batches": 1`, "do not agree"},
		{`"devices": [`, `"devices": [99, `, "not one of"},
		{`"format"`, `"extra": 1, "format"`, "unknown field"},
		{`"0F"`, `"0X"`, "action"},
		{"\"sequential\": {\n      \"samples_per_s\": ", "\"sequential\": {\n      \"samples_per_s\": -", "search.sequential"},
	} {
		bad := strings.Replace(good, tc.old, tc.new, 1)
		if bad == good {
			t.Fatalf("edit %q did nothing", tc.old)
		}
		if _, err := DecodePlan([]byte(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.want, err, tc.want)
		}
	}
	for _, tc := range []struct{ data, want string }{
		{"", "not a plan: the file is empty"},
		{" \n", "not a plan: the file is empty"},
		{string(dag.Write(g.Model())), "not a plan but a model file (graphpipe/model@1)"},
		{"{}", `format: required ("graphpipe/plan@1")`},
	} {
		if _, err := DecodePlan([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.20q: got %v, want %q", tc.data, err, tc.want)
		}
	}
}

// FuzzDecodePlan: a plan file (the seeds: plans search wrote, and the files
// of testdata/plans) is refused or decodes to a plan that simulates; reading
// it, its action lists included, allocates no more than its size calls for.
func FuzzDecodePlan(f *testing.F) {
	e, _ := models.Lookup("case-study")
	g, _ := e.Build(e.Small)
	p, err := Search(g, Options{Device: Profiles["cpu"], Devices: 3})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(p.Encode())
	z, err := Search(g, Options{Device: Profiles["cpu"], Devices: 3, MicroBatch: 2, Schedule: "zb"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(z.Encode())
	f.Add([]byte(`{"format": "graphpipe/plan@1"}`))
	addFiles(f, "testdata/plans/*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		var q *Plan
		var err error
		if n := allocated(func() { q, err = DecodePlan(data) }); n > decodeBudget(len(data)) {
			t.Fatalf("%d bytes allocated for a plan of %d", n, len(data))
		}
		if err != nil {
			return
		}
		if _, err := q.Simulate(); err != nil {
			t.Fatalf("a plan that decodes does not simulate: %v", err)
		}
	})
}

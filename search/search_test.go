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
	"github.com/graphpipe/graphpipe/plan"
)

// checkPlan verifies a plan independently of the planner: the stages are a
// valid stage graph of the model, the schedule passes the checker with each
// stage's in-flight count as its limit, and memory fits.
func checkPlan(t *testing.T, g *dag.Graph, p *plan.Plan) {
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
	back, err := plan.LoadPlan(p.Encode(), g)
	if err != nil {
		t.Fatalf("plan does not load against its model: %v", err)
	}
	if back.Predicted != p.Predicted || len(back.Stages) != len(p.Stages) {
		t.Fatal("plan changes through its codec")
	}
}

func searchBoth(t *testing.T, g *dag.Graph, o Options) (gpp, spp *plan.Plan) {
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
	want := plan.Baseline{SamplesPerS: spp.Predicted.SamplesPerS, IterationS: spp.Predicted.IterationS, Stages: len(spp.Stages),
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
						dev := plan.Profiles["v100"]
						if preset == "small" {
							dev = plan.Profiles["cpu"]
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
		o := Options{Device: plan.Profiles["v100"], Devices: 1 + int(seed%8), DevicesPerNode: 1 + int(seed%4), Batch: 32}
		o.Schedule = []string{"1f1b", "gpipe", "1f1b-depth", "zb"}[seed%4]
		searchBoth(t, g, o)
	}
}

func TestNoPlanSaysWhichLimit(t *testing.T) {
	e, _ := models.Lookup("dlrm")
	g, _ := e.Build(e.Default)
	_, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 2, MemoryLimit: 1e9, OptimizerState: plan.StateReplicated})
	var np *NoPlanError
	if !errors.As(err, &np) || !strings.Contains(err.Error(), "memory") || !strings.Contains(err.Error(), `op "top.fc0" alone`) {
		t.Fatalf("got %v", err)
	}
	_, err = Search(g, Options{Device: plan.Profiles["v100"], Devices: 2, MemoryLimit: 6e9, OptimizerState: plan.StateReplicated})
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
		tc.o.Device = plan.Profiles["cpu"]
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
		p, err := Search(g, Options{Device: plan.Profiles["v100"], Devices: 8, MicroBatch: 32, Strategy: s})
		if err != nil {
			t.Fatal(err)
		}
		if p.MicroBatch != 32 || p.MicroBatches != 32 {
			t.Errorf("%s: micro-batch %d × %d", s, p.MicroBatch, p.MicroBatches)
		}
	}
}

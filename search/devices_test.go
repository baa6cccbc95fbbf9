package search

import (
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// TestMoreDevicesNeverSlower: a search on n devices is never slower than one
// on n/2 (Search also tries halves, leaving devices idle where more make no
// plan faster), on random DAGs with small batches, where extra devices
// mostly add all-reduce; somewhere a plan leaves devices idle.
func TestMoreDevicesNeverSlower(t *testing.T) {
	idle := 0
	for seed := int64(0); seed < 30; seed++ {
		g, err := models.RandomDAG(seed, 5+int(seed)%30, 256)
		if err != nil {
			t.Fatal(err)
		}
		for _, strategy := range []string{"gpp", "spp"} {
			o := Options{Device: plan.Profiles["v100"], Devices: 8 << (seed % 2), Batch: 8 << (seed % 3), Strategy: strategy}
			full, err := Search(g, o)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, g, full)
			o.Devices /= 2
			half, err := Search(g, o)
			if err != nil {
				t.Fatal(err)
			}
			if full.Predicted.IterationS > half.Predicted.IterationS*(1+1e-12) {
				t.Fatalf("seed %d, %s: %v s on %d devices, %v s on %d", seed, strategy, full.Predicted.IterationS, 2*o.Devices, half.Predicted.IterationS, o.Devices)
			}
			used := 0
			for _, s := range full.Stages {
				used += len(s.Devices)
			}
			if used <= o.Devices {
				idle++
				if !strings.Contains(strings.Join(full.Search.Notes, " "), "more made no plan faster") {
					t.Errorf("seed %d, %s: a plan on %d of %d devices does not say why", seed, strategy, used, 2*o.Devices)
				}
			}
		}
	}
	if idle == 0 {
		t.Error("no plan left devices idle: the test does not exercise the halving")
	}
	t.Logf("%d of 60 searches left at least half the devices idle", idle)
}

// TestFewerDevicesCANDLE: spp on CANDLE-Uno at 32 v100 with a batch of 128
// runs faster on 8 devices than the DP's plan on all 32.
func TestFewerDevicesCANDLE(t *testing.T) {
	t.Parallel()
	e, _ := models.Lookup("candle-uno")
	g, err := e.Build(e.Default)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Device: plan.Profiles["v100"], Devices: 32, Batch: 128, Strategy: "spp"}
	with, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	tu := defaultTuning()
	tu.fewerDevices = false
	without, err := searchTuned(g, o, tu)
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, s := range with.Stages {
		used += len(s.Devices)
	}
	t.Logf("%.4g samples/s on %d of 32 devices; %.4g on the DP's plan for 32", with.Predicted.SamplesPerS, used, without.Predicted.SamplesPerS)
	if used > 16 || with.Predicted.SamplesPerS <= without.Predicted.SamplesPerS {
		t.Errorf("expected a faster plan on at most 16 devices")
	}
}

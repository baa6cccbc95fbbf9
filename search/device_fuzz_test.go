package search

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// FuzzSearchDevice: a profile file that plan.ParseDevice accepts (the seeds:
// the built-in profiles and the files of plan's testdata/devices) plans a
// small model without a panic: a plan, or an error saying which limit failed.
func FuzzSearchDevice(f *testing.F) {
	for _, name := range plan.ProfileNames() {
		data, _ := json.Marshal(plan.Profiles[name])
		f.Add(data)
	}
	f.Add([]byte(`{"name":"x","peak_flops":1e308,"max_eff":1,"half_work":1e-300,"mem_bw":1e-300,"memory":1,"intra_bw":1,"inter_bw":1}`))
	files, _ := filepath.Glob("../plan/testdata/devices/*.json")
	if len(files) == 0 {
		f.Fatal("no seed files in ../plan/testdata/devices")
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	e, _ := models.Lookup("mlp")
	g, _ := e.Build(e.Small)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := plan.ParseDevice(data)
		if err != nil {
			return
		}
		if p, err := Search(g, Options{Device: d, Devices: 2, DevicesPerNode: 1}); err == nil && !(p.Predicted.IterationS >= 0) {
			t.Fatalf("a plan with iteration time %v", p.Predicted.IterationS)
		}
	})
}

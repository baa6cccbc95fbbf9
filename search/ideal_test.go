package search

import (
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestFewerDevicesInPrecision: the search on fewer devices stops where the
// best plan reaches the ideal of that many, priced at the plan's precision's
// rate (plan.IdealSamplesPerS): the transformer in bf16 on 8 h100 at batch 16
// runs faster on 4 of them, which a bound at the fp32 rate (15 times lower)
// never let the search try.
func TestFewerDevicesInPrecision(t *testing.T) {
	t.Parallel()
	g := zooModel(t, "transformer")
	o := Options{Device: plan.Profiles["h100"], Devices: 8, Batch: 16, Precision: "bf16"}
	p, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	o.Devices = 4
	half, err := Search(g, o)
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, s := range p.Stages {
		used += len(s.Devices)
	}
	if p.Predicted.IterationS > half.Predicted.IterationS*(1+1e-12) || used > 4 {
		t.Errorf("8 h100 in bf16: %.4g s on %d devices, slower than %.4g s on 4", p.Predicted.IterationS, used, half.Predicted.IterationS)
	}
	if ideal := p.Ideal(g); !(p.Predicted.SamplesPerS < ideal) {
		t.Errorf("%.4g samples/s, at or over the ideal %.4g", p.Predicted.SamplesPerS, ideal)
	}
}

package plan

import (
	"math"
	"testing"

	"github.com/graphpipe/graphpipe/models"
)

// TestIdealSamplesPerS: the bound is devices × the peak in the plan's
// precision × the best efficiency over a sample's FLOPs, a precision the
// device has no rate for bounds nothing, and a cluster sums its kinds.
func TestIdealSamplesPerS(t *testing.T) {
	const flops = 1e12 // a sample's forward and backward
	v100, h100, a100 := Profiles["v100"], Profiles["h100"], Profiles["a100"]
	for _, tc := range []struct {
		name    string
		dev     Device
		prec    string
		devices int
		want    float64
	}{
		{"v100 fp32", v100, "fp32", 32, 32 * 15.7e12 * 0.81 / flops},
		{"unnamed is fp32", v100, "", 32, 32 * 15.7e12 * 0.81 / flops},
		{"h100 bf16 at its tensor rate", h100, "bf16", 8, 8 * 989e12 * 0.81 / flops},
		{"a100 tf32", a100, "tf32", 4, 4 * 156e12 * 0.81 / flops},
		{"v100 has no bf16", v100, "bf16", 32, 0},
	} {
		if got := IdealSamplesPerS(tc.dev, tc.prec, tc.devices, flops); math.Abs(got-tc.want) > 1e-9*tc.want {
			t.Errorf("%s: %g samples/s, want %g", tc.name, got, tc.want)
		}
	}
	if got := IdealSamplesPerS(v100, "fp32", 4, 0); got != 0 {
		t.Errorf("a sample of no FLOPs: %g, want 0", got)
	}
}

// TestPlanIdeal: a plan's bound is its devices' in its precision, for its
// model's FLOPs (BENCHMARKS.md's "Fraction of the ideal bound"), and the
// same plan in bf16 on h100 is bounded by the bf16 rate, not fp32's.
func TestPlanIdeal(t *testing.T) {
	e, err := models.Lookup("mmt")
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Build(e.Default)
	if err != nil {
		t.Fatal(err)
	}
	p := &Plan{Device: Profiles["v100"], Devices: 32}
	if got := p.Ideal(g); math.Abs(got-630.2) > 0.1 {
		t.Errorf("mmt on 32 v100: %.1f samples/s, want 630.2", got)
	}
	p = &Plan{Device: Profiles["h100"], Devices: 8, Precision: "bf16"}
	fp32 := &Plan{Device: Profiles["h100"], Devices: 8}
	if r := p.Ideal(g) / fp32.Ideal(g); math.Abs(r-989.0/67) > 1e-9 {
		t.Errorf("bf16 over fp32 bound on h100: %g, want %g", r, 989.0/67)
	}
	c := &Plan{Device: Profiles["v100"], Devices: 12, Cluster: &Cluster{Kinds: []Kind{
		{Device: Profiles["v100"], Devices: 8, DevicesPerNode: 4}, {Device: Profiles["a100"], Devices: 4, DevicesPerNode: 4}}}}
	want := (&Plan{Device: Profiles["v100"], Devices: 8}).Ideal(g) + (&Plan{Device: Profiles["a100"], Devices: 4}).Ideal(g)
	if got := c.Ideal(g); math.Abs(got-want) > 1e-9*want {
		t.Errorf("a cluster of 8 v100 and 4 a100: %g, want each kind's bound summed, %g", got, want)
	}
}

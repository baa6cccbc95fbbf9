package main

import (
	"encoding/json"
	"math"
	"testing"
)

// TestSearchJSONIdeal: search --json gives the ideal bound of the plan's
// devices as BENCHMARKS.md defines it (devices × the profile's peak in the
// plan's precision × its best efficiency / the model's forward and backward
// FLOPs a sample) and the plan's throughput over it, which is below one.
func TestSearchJSONIdeal(t *testing.T) {
	model := smallModel(t, "mmt")
	for _, tc := range []struct {
		args []string
		rate float64 // the profile's peak in the precision × its best efficiency
	}{
		{[]string{"--devices", "4", "--device", "v100"}, 15.7e12 * 0.81},
		{[]string{"--devices", "4", "--device", "h100", "--precision", "bf16"}, 989e12 * 0.81},
	} {
		code, out, errs := gp(t, "", append([]string{"search", model, "--json"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errs)
		}
		var got struct {
			SamplesPerS float64 `json:"samples_per_s"`
			Ideal       float64 `json:"ideal_samples_per_s"`
			OfIdeal     float64 `json:"of_ideal"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		code, info, errs := gp(t, "", "inspect", model, "--json")
		if code != 0 {
			t.Fatalf("inspect: %s", errs)
		}
		var m struct {
			Fwd float64 `json:"fwd_flops_per_sample"`
			Bwd float64 `json:"bwd_flops_per_sample"`
		}
		if err := json.Unmarshal([]byte(info), &m); err != nil || m.Fwd == 0 {
			t.Fatalf("inspect: %v: %s", err, info)
		}
		want := 4 * tc.rate / (m.Fwd + m.Bwd)
		if math.Abs(got.Ideal-want) > 1e-9*want {
			t.Errorf("%v: ideal_samples_per_s %g, want %g", tc.args, got.Ideal, want)
		}
		if r := got.SamplesPerS / got.Ideal; math.Abs(got.OfIdeal-r) > 1e-12 || !(r > 0 && r < 1) {
			t.Errorf("%v: of_ideal %g, samples/s over the ideal %g: want the same, below 1", tc.args, got.OfIdeal, r)
		}
	}
}

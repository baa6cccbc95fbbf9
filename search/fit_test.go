package search

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
)

// TestFitComputeRecoversTheModel: samples made by the cost model itself
// (Device.kernel with no memory term) give back its rate and HalfWork.
func TestFitComputeRecoversTheModel(t *testing.T) {
	for _, name := range plan.ProfileNames() {
		d := plan.Profiles[name]
		d.MemBW = math.Inf(1)
		var samples []KernelSample
		for n := 32.0; n <= 4096; n *= 2 {
			w := 2 * n * n * n
			samples = append(samples, KernelSample{w, kernel(d, w, 0)})
		}
		peak, half, err := FitCompute(samples, d.Launch)
		if err != nil {
			t.Fatal(err)
		}
		if rel(peak, d.PeakFLOPs*d.MaxEff) > 1e-9 || rel(half, d.HalfWork) > 1e-6 {
			t.Errorf("%s: fitted rate %.6g and HalfWork %.6g, want %.6g and %.6g", name, peak, half, d.PeakFLOPs*d.MaxEff, d.HalfWork)
		}
	}
}

// TestFitComputeWithNoise: 2% multiplicative noise moves the fit by little.
func TestFitComputeWithNoise(t *testing.T) {
	d := plan.Profiles["h100"]
	r := rand.New(rand.NewPCG(1, 1))
	var samples []KernelSample
	for n := 64.0; n <= 8192; n *= 2 {
		w := 2 * n * n * n
		samples = append(samples, KernelSample{w, kernel(d, w, 0) * (1 + 0.02*(2*r.Float64()-1))})
	}
	peak, _, err := FitCompute(samples, d.Launch)
	if err != nil {
		t.Fatal(err)
	}
	if rel(peak, d.PeakFLOPs*d.MaxEff) > 0.05 {
		t.Errorf("rate %.4g, want within 5%% of %.4g", peak, d.PeakFLOPs*d.MaxEff)
	}
}

func TestFitComputeRefusals(t *testing.T) {
	for _, s := range [][]KernelSample{
		nil,
		{{1e6, 1e-3}},
		{{1e6, 1e-3}, {1e6, 1e-3}},
		{{1e6, 2e-3}, {1e9, 1e-3}},
		{{0, 1e-3}, {1e9, 1e-3}},
	} {
		if _, _, err := FitCompute(s, 0); err == nil {
			t.Errorf("%v: fitted", s)
		}
	}
}

func rel(a, b float64) float64 { return math.Abs(a-b) / math.Abs(b) }

// TestFitLinkRecoversTheModel: one-way times made by Device.transfer give
// back each built-in profile's latency and bandwidth.
func TestFitLinkRecoversTheModel(t *testing.T) {
	for _, name := range plan.ProfileNames() {
		d := plan.Profiles[name]
		var samples []KernelSample
		for b := 1024.0; b <= 64<<20; b *= 4 {
			samples = append(samples, KernelSample{b, transfer(d, b, false)})
		}
		lat, bw, err := FitLink(samples)
		if err != nil {
			t.Fatal(err)
		}
		if rel(lat, d.IntraLat) > 1e-6 || rel(bw, d.IntraBW) > 1e-9 {
			t.Errorf("%s: fitted %.6g s + bytes / %.6g B/s, want %.6g and %.6g", name, lat, bw, d.IntraLat, d.IntraBW)
		}
	}
	if _, _, err := FitLink([]KernelSample{{1e6, 2e-3}, {1e9, 1e-3}}); err == nil {
		t.Error("a link that gets faster with size was fitted")
	}
}

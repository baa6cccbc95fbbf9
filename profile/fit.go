package profile

import (
	"fmt"
	"math"

	"github.com/graphpipe/graphpipe/plan"
)

// KernelSample is one measured kernel call: work FLOPs took Seconds.
type KernelSample struct {
	Work, Seconds float64
}

// FitCompute fits the cost model's compute term to measured kernel calls.
// The model's time for work w is Launch + w/(peak·eff(w)) with
// eff(w) = MaxEff·w/(w + HalfWork), which is linear in w:
//
//	t(w) = Launch + HalfWork/(peak·MaxEff) + w/(peak·MaxEff) = a + b·w.
//
// FitCompute finds a and b by least squares on relative error (each sample
// weighted 1/t², so small and large calls count alike) and returns the
// profile's terms with MaxEff = 1: PeakFLOPs = 1/b (the rate large calls
// approach) and HalfWork = (a − launch)·PeakFLOPs, at least 1 FLOP.
func FitCompute(samples []KernelSample, launch float64) (peak, halfWork float64, err error) {
	a, b, err := fitLine(samples, "FLOPs")
	if err != nil {
		return 0, 0, err
	}
	peak = 1 / b
	halfWork = math.Max((a-launch)*peak, 1)
	return peak, halfWork, nil
}

// FitLink fits a link's cost, latency + bytes/bandwidth, to measured
// one-way times (Work in bytes), the same way.
func FitLink(samples []KernelSample) (latency, bandwidth float64, err error) {
	a, b, err := fitLine(samples, "bytes")
	if err != nil {
		return 0, 0, err
	}
	return math.Max(a, 0), 1 / b, nil
}

// WithLinks is d with its links (inside and between nodes alike) fitted to
// one-way times measured for messages of the given sizes (FitLink).
func WithLinks(d plan.Device, sizes []int, oneWay []float64) (plan.Device, error) {
	samples := make([]KernelSample, len(sizes))
	for i, size := range sizes {
		samples[i] = KernelSample{Work: float64(size), Seconds: oneWay[i]}
	}
	lat, bw, err := FitLink(samples)
	if err != nil {
		return d, err
	}
	d.IntraLat, d.InterLat, d.IntraBW, d.InterBW = lat, lat, bw, bw
	return d, nil
}

// fitLine fits t = a + b·w by least squares on relative error (each sample
// weighted 1/t²); b must come out positive.
func fitLine(samples []KernelSample, unit string) (a, b float64, err error) {
	if len(samples) < 2 {
		return 0, 0, fmt.Errorf("profile: fitting needs at least 2 measured sizes, got %d", len(samples))
	}
	var sw, swx, swy, swxx, swxy float64
	for _, s := range samples {
		if !(s.Work > 0) || !(s.Seconds > 0) {
			return 0, 0, fmt.Errorf("profile: a sample of %g %s in %g s cannot be fitted", s.Work, unit, s.Seconds)
		}
		w := 1 / (s.Seconds * s.Seconds)
		sw += w
		swx += w * s.Work
		swy += w * s.Seconds
		swxx += w * s.Work * s.Work
		swxy += w * s.Work * s.Seconds
	}
	det := sw*swxx - swx*swx
	if det <= 0 {
		return 0, 0, fmt.Errorf("profile: the measured sizes must differ")
	}
	b = (sw*swxy - swx*swy) / det
	a = (swy - b*swx) / sw
	if !(b > 0) || math.IsInf(b, 0) {
		return 0, 0, fmt.Errorf("profile: time does not grow with %s in these measurements (slope %g s per unit)", unit, b)
	}
	return a, b, nil
}

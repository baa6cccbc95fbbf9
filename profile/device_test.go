package profile

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// modelMeter is a Meter whose measurements are the cost model's times for
// a known device: Measure must give the device back.
type modelMeter struct {
	d        plan.Device
	probe    bool    // whether links can be probed
	launched float64 // the bare kernel launch it reports
}

func (m modelMeter) name() string             { return "model" }
func (m modelMeter) sizes(bool) []int         { return []int{64, 256, 1024, 4096} }
func (m modelMeter) launch() (float64, error) { return m.launched, nil }
func (m modelMeter) device() *cuda.Device     { return nil }
func (m modelMeter) memory() int64            { return 3 << 30 }
func (m modelMeter) base() plan.Device        { return plan.Profiles["v100"] }
func (m modelMeter) copyRate(int) (float64, error) {
	return m.d.MemBW, nil
}

func (m modelMeter) gemm(n int, prec string) (float64, error) {
	if prec != "fp32" {
		return 0, nil
	}
	d := m.d
	d.Launch = m.launched
	return kernelTime(d, 2*math.Pow(float64(n), 3)), nil
}

func (m modelMeter) runCosts(bool) (plan.RunCosts, *RunCostsResult, error) {
	if !m.probe {
		return plan.RunCosts{}, nil, nil
	}
	sizes := []int{1 << 10, 1 << 16, 1 << 20}
	t := make([]float64, len(sizes))
	for i, s := range sizes {
		t[i] = linkTime(m.d, float64(s))
	}
	rc := plan.RunCosts{NATSLat: m.d.IntraLat, NATSBW: m.d.IntraBW, ReportS: 1e-4}
	return rc, &RunCostsResult{LinkSizes: sizes, OneWay: t}, nil
}

// TestMeasure: from measurements made by the cost model, Measure writes a
// profile with the device's compute rate, HalfWork, copy bandwidth, the
// meter's memory, and links that are probed or copied from the base
// profile, as LinksOf says; Launch is the larger of the bare launch and an
// op call through the executor.
func TestMeasure(t *testing.T) {
	want := plan.Profiles["a100"]
	for _, tc := range []struct {
		name     string
		m        modelMeter
		linksOf  string
		link     plan.Device
		launched float64
	}{
		{"probed", modelMeter{d: want, probe: true, launched: 1e-9}, "measured between workers on this host", want, 1e-9},
		{"copied", modelMeter{d: want, launched: 1}, "v100", plan.Profiles["v100"], 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			res, err := Measure(tc.m, false, &log)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Device
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"peak", got.PeakFLOPs, want.PeakFLOPs * want.MaxEff},
				{"half work", got.HalfWork, want.HalfWork},
				{"copy", got.MemBW, want.MemBW},
				{"latency", got.IntraLat, tc.link.IntraLat},
				{"bandwidth", got.IntraBW, tc.link.IntraBW},
			} {
				if rel(f.got, f.want) > 1e-6 {
					t.Errorf("%s %.6g, want %.6g", f.name, f.got, f.want)
				}
			}
			if got.MaxEff != 1 || got.Memory != 3<<30 || got.Name != "model (measured)" || res.KernelLaunch != tc.launched {
				t.Errorf("max eff %g, memory %d, name %q, kernel launch %g", got.MaxEff, got.Memory, got.Name, res.KernelLaunch)
			}
			if got.Launch < tc.launched || (tc.launched == 1 && got.Launch != 1) {
				t.Errorf("launch %g with a bare launch of %g", got.Launch, tc.launched)
			}
			if probed := res.RunCosts != nil; probed != tc.m.probe || probed && (got.NATSBW != want.IntraBW || got.ReportS != 1e-4) {
				t.Errorf("run costs %+v in the profile, measurements %v", got.RunCosts, res.RunCosts)
			}
			if !strings.HasPrefix(res.LinksOf, tc.linksOf) || len(res.FP32) != 4 || len(res.BF16) != 0 || res.Format != "" {
				t.Errorf("links of %q, %d FP32 and %d BF16 times, format %q", res.LinksOf, len(res.FP32), len(res.BF16), res.Format)
			}
			if !strings.Contains(log.String(), "GEMM n") || !strings.Contains(log.String(), "fit: ") {
				t.Errorf("log:\n%s", log.String())
			}
		})
	}
}

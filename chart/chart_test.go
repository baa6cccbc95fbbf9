package chart

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"strings"
	"testing"

	"gonum.org/v1/plot"

	"github.com/graphpipe/graphpipe/microbatch"
)

func sweep() *Line {
	x := []float64{4, 16, 64, 2048}
	l := &Line{Title: "gpp / spp at 32 v100", XLabel: "samples per device", YLabel: "gpp / spp throughput", LogX: true, XTicks: x,
		Series: []Series{{"mmt", x, []float64{1.27, 1.13, 1.04, 1.01}}, {"dlrm", x, []float64{1.73, 1.45, 1.28, 1.05}}}}
	l.Reference.Label, l.Reference.Y = "spp (1.0)", 1
	return l
}

func render(t *testing.T, l *Line, f Format) *Info {
	t.Helper()
	data, err := l.Render(f)
	if err != nil {
		t.Fatal(err)
	}
	in, err := Inspect(data)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestLineCarriesItsWords: a chart has its title, axis titles, tick labels
// and legend in it: as text elements of the SVG, which the library wrote;
// as the PNG's text chunks.
func TestLineCarriesItsWords(t *testing.T) {
	svg := render(t, sweep(), SVG)
	if !strings.Contains(svg.Generator, "Plotinum") || svg.Width != 640 || svg.Height != 360 {
		t.Errorf("svg: generator %q, %d × %d", svg.Generator, svg.Width, svg.Height)
	}
	for _, want := range []string{"gpp / spp at 32 v100", "samples per device", "gpp / spp throughput", "mmt", "dlrm", "spp (1.0)", "4", "16", "64", "2048", "1.2", "1.6"} {
		if !svg.Has(want) {
			t.Errorf("the SVG lacks %q: %q", want, svg.Texts)
		}
	}
	p := render(t, sweep(), PNG)
	if p.Width != 1280 || p.Height != 720 {
		t.Errorf("png: %d × %d pixels", p.Width, p.Height)
	}
	for _, want := range []string{"Title: gpp / spp at 32 v100", "Description: x axis: samples per device; y axis: gpp / spp throughput"} {
		if !p.Has(want) {
			t.Errorf("the PNG lacks %q: %q", want, p.Texts)
		}
	}
}

// TestPNGDrawsAxisTitles: renaming an axis changes pixels only where that
// axis's title is drawn (the bottom strip for x, the left strip for y).
func TestPNGDrawsAxisTitles(t *testing.T) {
	base := decode(t, sweep())
	for _, c := range []struct {
		axis   string
		rename func(*Line)
		in     func(p image.Point, size image.Point) bool
	}{
		{"x", func(l *Line) { l.XLabel = "samples per GPU" }, func(p, s image.Point) bool { return p.Y > s.Y*9/10 }},
		{"y", func(l *Line) { l.YLabel = "gpp / spp throughpux" }, func(p, s image.Point) bool { return p.X < s.X/20 }},
	} {
		t.Run(c.axis, func(t *testing.T) {
			l := sweep()
			c.rename(l)
			img := decode(t, l)
			size := img.Bounds().Size()
			changed, outside := 0, 0
			for y := 0; y < size.Y; y++ {
				for x := 0; x < size.X; x++ {
					if img.At(x, y) != base.At(x, y) {
						changed++
						if !c.in(image.Pt(x, y), size) {
							outside++
						}
					}
				}
			}
			if changed == 0 || outside > 0 {
				t.Errorf("%d pixels changed, %d outside the %s title's strip", changed, outside, c.axis)
			}
		})
	}
}

func decode(t *testing.T, l *Line) image.Image {
	t.Helper()
	data, err := l.Render(PNG)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestTicks(t *testing.T) {
	for _, c := range []struct {
		name     string
		ticker   plot.Ticker
		min, max float64
		want     string
	}{
		{"ratio", linearTicks{}, 0.98, 1.82, "1.0 1.2 1.4 1.6 1.8"},
		{"milliseconds", linearTicks{}, 0, 29.2, "0 5 10 15 20 25"},
		{"quarter steps", linearTicks{}, 0, 1.9, "0.00 0.25 0.50 0.75 1.00 1.25 1.50 1.75"},
		{"seconds over decades", logTicks{}, 0.012, 9, "0.02 0.05 0.1 0.2 0.5 1 2 5"},
		{"within a decade", logTicks{}, 3, 9, "3 4 5 6 7 8 9"},
		{"ops", logTicks{}, 104, 10004, "200 500 1000 2000 5000 10000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, tk := range c.ticker.Ticks(c.min, c.max) {
				if tk.Label != "" {
					got = append(got, tk.Label)
				}
			}
			if s := strings.Join(got, " "); s != c.want {
				t.Errorf("%v to %v: %q, want %q", c.min, c.max, s, c.want)
			}
		})
	}
}

func TestFormatOf(t *testing.T) {
	for _, c := range []struct {
		path string
		want Format
		err  bool
	}{{"a/t.svg", SVG, false}, {"T.PNG", PNG, false}, {"t.jpg", "", true}, {"t", "", true}} {
		got, err := FormatOf(c.path)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%s: %q, %v", c.path, got, err)
		}
	}
}

// simulated is a zero-bubble iteration of two branches into a join: every
// kind of event, transfers that take time.
func simulated(t *testing.T) *microbatch.Result {
	t.Helper()
	p := microbatch.Pipeline{Stages: 3, Edges: [][2]int{{0, 2}, {1, 2}}, MicroBatches: 4}
	tm := microbatch.Timing{F: []float64{1e-3, 1.2e-3, 2e-3}, B: []float64{1e-3, 1.2e-3, 2e-3}, W: []float64{1e-3, 1.2e-3, 2e-3},
		Act: []float64{3e-4, 3e-4}, Grad: []float64{3e-4, 3e-4}, Flush: []float64{1e-3, 1e-3, 1e-3}}
	sch, err := microbatch.NewTimed("zb", p, tm, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := microbatch.Simulate(sch, tm)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestTimelines: a timeline names its axes, rows and colours, and draws
// every event once in its kind's colour (and the legend's swatch); two
// drawn together share one time axis title.
func TestTimelines(t *testing.T) {
	res := simulated(t)
	rows := []string{"stage 0 (devices 0-1)", "stage 1 (device 2)", "stage 2 (device 3)"}
	data, err := Timelines(SVG, Timeline{"simulated", rows, res}, Timeline{"measured", rows, res})
	if err != nil {
		t.Fatal(err)
	}
	in, err := Inspect(data)
	if err != nil {
		t.Fatal(err)
	}
	title := fmt.Sprintf("simulated: iteration %.4g ms, bubble %.1f%%", 1e3*res.Iteration, 100*res.Bubble)
	for _, want := range append([]string{title, "measured: iteration", "time (ms)", "stage (devices)", "forward", "backward", "weight gradient", "send", "receive", "idle (bubble)"}, rows...) {
		if !in.Has(want) {
			t.Errorf("lacks %q: %q", want, in.Texts)
		}
	}
	if n := strings.Count(strings.Join(in.Texts, "\n"), "time (ms)"); n != 1 {
		t.Errorf("the time axis is named %d times", n)
	}
	count := map[microbatch.Kind]int{}
	for _, e := range res.Events {
		count[e.Kind]++
	}
	for _, key := range timelineKeys[:5] {
		r, g, b, _ := key.color.RGBA()
		fill := fmt.Sprintf("fill:#%02X%02X%02X", r>>8, g>>8, b>>8)
		if got, want := bytes.Count(data, []byte(fill)), 2*count[key.kind]+1; got != want || count[key.kind] == 0 {
			t.Errorf("%s: %d boxes in %s, want %d (two timelines of %d, and the legend's)", key.label, got, fill, want, count[key.kind])
		}
	}
	if _, err := Timelines(PNG, Timeline{"simulated", rows, res}); err != nil {
		t.Fatal(err)
	}
	if _, err := Timelines(SVG); err == nil {
		t.Error("no timeline drawn without an error")
	}
}

func TestInspectRefuses(t *testing.T) {
	for _, bad := range []string{"", "<svg>", "<html></html>", "<svg></svg><svg></svg>", "\x89PNG\r\n\x1a\nbroken"} {
		if _, err := Inspect([]byte(bad)); err == nil {
			t.Errorf("%q inspected", bad)
		}
	}
}

func FuzzInspect(f *testing.F) {
	var tiny bytes.Buffer
	png.Encode(&tiny, image.NewGray(image.Rect(0, 0, 3, 2)))
	withText, err := pngText(tiny.Bytes(), [][2]string{{"Title", "t"}, {"Description", "x axis: a; y axis: b"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(withText)
	f.Add([]byte(`<?xml version="1.0"?><!-- gen --><svg width="4pt" height="3pt"><g><text>a</text></g></svg>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := Inspect(data)
		if err == nil && in.Format != SVG && in.Format != PNG {
			t.Fatalf("format %q", in.Format)
		}
	})
}

// TestPNGText: the text chunks written are the ones read back, and the
// image still decodes.
func TestPNGText(t *testing.T) {
	var tiny bytes.Buffer
	png.Encode(&tiny, image.NewGray(image.Rect(0, 0, 3, 2)))
	data, err := pngText(tiny.Bytes(), [][2]string{{"Title", "gpp / spp × 2"}, {"Description", "x axis: a; y axis: b"}})
	if err != nil {
		t.Fatal(err)
	}
	in, err := Inspect(data)
	if err != nil || in.Width != 3 || in.Height != 2 || strings.Join(in.Texts, "|") != "Title: gpp / spp × 2|Description: x axis: a; y axis: b" {
		t.Errorf("%+v, %v", in, err)
	}
}

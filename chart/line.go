package chart

import (
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Line is a line chart: series of (x, y) points, each a line with its points
// marked and named in the legend.
type Line struct {
	Title          string
	XLabel, YLabel string // axis titles, with units
	LogX, LogY     bool
	// XTicks, when set, are the labelled x ticks (the values a sweep ran at).
	XTicks []float64
	// Reference, when its Label is set, is a dashed horizontal line (y = 1
	// on a ratio: where the two sides are equal).
	Reference struct {
		Label string
		Y     float64
	}
	Series []Series
}

// Series is one line. Points whose x or y is not finite, or not positive
// on a log axis, are left out (a configuration without a result).
type Series struct {
	Label string
	X, Y  []float64
}

// Size of a line chart.
var lineW, lineH = vg.Points(640), vg.Points(360)

// Render draws the chart.
func (l *Line) Render(format Format) ([]byte, error) {
	p := newPlot(l.Title, l.XLabel, l.YLabel)
	p.X.Tick.Marker, p.Y.Tick.Marker = linearTicks{}, linearTicks{}
	if l.LogX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
	}
	if l.LogY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, logTicks{}
	}
	if l.XTicks != nil {
		p.X.Tick.Marker = constantTicks(l.XTicks)
	}
	p.Add(grid())
	leg := newLegend()
	n := 0
	for i, s := range l.Series {
		pts := l.points(s)
		if len(pts) == 0 {
			continue
		}
		line, marks, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("chart: %s: %w", s.Label, err)
		}
		col := palette[i%len(palette)]
		line.Color, line.Width = col, lineWidth
		marks.Color, marks.Shape, marks.Radius = col, draw.CircleGlyph{}, vg.Points(3)
		p.Add(line, marks)
		leg.Add(s.Label, line, marks)
		n++
	}
	if l.Reference.Label != "" {
		ref := plotter.NewFunction(func(float64) float64 { return l.Reference.Y })
		ref.Color, ref.Width, ref.Dashes = palette[len(palette)-1], lineWidth, []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(ref)
		p.Y.Min, p.Y.Max = math.Min(p.Y.Min, l.Reference.Y), math.Max(p.Y.Max, l.Reference.Y)
		leg.Add(l.Reference.Label, ref)
		n++
	}
	f := &figure{w: lineW, h: lineH, plots: []*plot.Plot{p}, legend: leg, legendEntries: n, title: l.Title, x: l.XLabel, y: l.YLabel}
	return f.render(format)
}

func (l *Line) points(s Series) plotter.XYs {
	var pts plotter.XYs
	for i := range s.X {
		x, y := s.X[i], s.Y[i]
		if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) || l.LogX && x <= 0 || l.LogY && y <= 0 {
			continue
		}
		pts = append(pts, plotter.XY{X: x, Y: y})
	}
	return pts
}

// constantTicks labels exactly the given values.
func constantTicks(vs []float64) plot.ConstantTicks {
	var ts plot.ConstantTicks
	for _, v := range vs {
		ts = append(ts, plot.Tick{Value: v, Label: number(v)})
	}
	return ts
}

func number(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// logTicks marks a log axis at 1, 2 and 5 per decade, labelled, and the
// other whole multiples unlabelled; where that labels fewer than two
// ticks, every whole multiple is labelled.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	if min <= 0 || max <= min {
		return nil
	}
	var ts []plot.Tick
	labelled := 0
	for pass := 0; pass < 2 && labelled < 2; pass++ {
		ts, labelled = ts[:0], 0
		for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
			for m := 1.0; m <= 9; m++ {
				v := m * math.Pow(10, e)
				if v < min*(1-1e-9) || v > max*(1+1e-9) {
					continue
				}
				t := plot.Tick{Value: v}
				if pass == 1 || m == 1 || m == 2 || m == 5 {
					t.Label = number(roundSig(v))
					labelled++
				}
				ts = append(ts, t)
			}
		}
	}
	return ts
}

// roundSig drops the float noise of m·10^e (0.30000000000000004).
func roundSig(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return f
}

// linearTicks labels a linear axis at a round step (1, 2, 2.5 or 5 times a
// power of ten) that gives four to eight labels, with as many decimals as the
// step needs.
type linearTicks struct{}

func (linearTicks) Ticks(min, max float64) []plot.Tick {
	if !(max > min) || math.IsInf(max-min, 0) {
		return nil
	}
	raw := (max - min) / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	decimals := max0(-int(math.Floor(math.Log10(step))))
	if math.Abs(step/mag-2.5) < 1e-9 {
		decimals++
	}
	var ts []plot.Tick
	for i := math.Ceil(min/step - 1e-9); i*step <= max+step*1e-9; i++ {
		v := i * step
		if v == 0 {
			v = 0 // not -0
		}
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
	}
	return ts
}

func max0(v int) int {
	if v < 0 {
		return 0
	}
	return v
}

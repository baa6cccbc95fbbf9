package chart

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The axis titles of a Gantt chart.
const (
	SecondsAxis = "time (s)"
	DeviceAxis  = "device"
)

// Gantt is a sweep's schedule: one bar per job over the devices it holds,
// from its start to its end; charts drawn together (Gantts) share one time
// axis, one above the other: a sweep planned and as it ran.
type Gantt struct {
	Title   string
	Devices int // the cluster's: the device axis runs 0..Devices-1, device 0 at the top
	Bars    []Bar
}

// Bar is a job's place in a Gantt chart: devices First..First+Devices-1
// from Start to End (seconds).
type Bar struct {
	Label          string
	First, Devices int
	Start, End     float64
}

// Size of a Gantt chart: its width, and the height of a device's row
// (with a floor for a few devices).
var ganttW, ganttRow, ganttMinH = vg.Points(900), vg.Points(14), vg.Points(220)

// maxGanttLegend is the most jobs a Gantt chart's legend names; past it the
// bars carry their names alone.
const maxGanttLegend = 24

// Gantts draws one or more Gantt charts one above the other, on one time
// axis in seconds, with one legend of the jobs (by the first chart's bars:
// a job keeps its colour from chart to chart).
func Gantts(format Format, gs ...Gantt) ([]byte, error) {
	if len(gs) == 0 {
		return nil, fmt.Errorf("chart: no Gantt chart to draw")
	}
	end := 0.0
	for _, g := range gs {
		if g.Devices < 1 {
			return nil, fmt.Errorf("chart: Gantt chart %q has no devices", g.Title)
		}
		for _, b := range g.Bars {
			if b.Devices < 1 || b.First < 0 || b.First+b.Devices > g.Devices || !(b.End >= b.Start) || math.IsInf(b.End, 0) {
				return nil, fmt.Errorf("chart: Gantt chart %q: bar %q on devices %d+%d from %g to %g s", g.Title, b.Label, b.First, b.Devices, b.Start, b.End)
			}
			end = max(end, b.End)
		}
	}
	// Tableau 10: the one style's seven, and three more, so that a sweep
	// of up to ten jobs shows each in a colour of its own
	pal := append(palette[:len(palette):len(palette)], rgb(0xff9da7), rgb(0x9c755f), rgb(0xbab0ac))
	colors := map[string]color.Color{}
	f := &figure{w: ganttW, legend: newLegend(), x: SecondsAxis, y: DeviceAxis}
	for i, b := range gs[0].Bars {
		colors[b.Label] = pal[i%len(pal)]
		if len(gs[0].Bars) <= maxGanttLegend {
			f.legend.Add(b.Label, swatch{colors[b.Label]})
			f.legendEntries++
		}
	}
	for i, g := range gs {
		p := newPlot(g.Title, f.x, f.y)
		if i < len(gs)-1 {
			p.X.Label.Text = "" // the time axis is named once, at the bottom
		}
		p.X.Min, p.X.Max = 0, math.Max(end, 1e-9)
		p.X.Tick.Marker = linearTicks{}
		p.Y.Tick.Marker = deviceTicks(g.Devices)
		p.Add(grid(), &bars{g: g, colors: colors})
		f.plots = append(f.plots, p)
		f.h += max(ganttMinH, vg.Points(70)+ganttRow*vg.Length(g.Devices))
		if i > 0 {
			f.title += " / "
		}
		f.title += g.Title
	}
	return f.render(format)
}

// deviceTicks labels the device rows, device 0 at the top: every row of a
// few devices, every fourth or eighth of many.
func deviceTicks(n int) plot.ConstantTicks {
	step := 1
	for n/step > 32 {
		step *= 2
	}
	var ts plot.ConstantTicks
	for d := 0; d < n; d++ {
		t := plot.Tick{Value: float64(n-1-d) + 0.5}
		if d%step == 0 {
			t.Label = fmt.Sprint(d)
		}
		ts = append(ts, t)
	}
	return ts
}

// bars is the plotter of a Gantt chart's bars.
type bars struct {
	g      Gantt
	colors map[string]color.Color
}

func (b *bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	end := 0.0
	for _, bar := range b.g.Bars {
		end = max(end, bar.End)
	}
	return 0, end, 0, float64(b.g.Devices)
}

func (b *bars) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	n := float64(b.g.Devices)
	label := draw.TextStyle{Color: color.White, Font: font.From(sans, vg.Points(8)), XAlign: draw.XCenter, YAlign: draw.YCenter, Handler: p.TextHandler}
	for i, bar := range b.g.Bars {
		col, ok := b.colors[bar.Label]
		if !ok {
			col = palette[i%len(palette)]
		}
		// a bar a hair inside its rows and its time, so that neighbours show apart
		top, bottom := n-float64(bar.First)-0.06, n-float64(bar.First+bar.Devices)+0.06
		rect := vg.Rectangle{Min: vg.Point{X: tx(bar.Start), Y: ty(bottom)}, Max: vg.Point{X: tx(bar.End), Y: ty(top)}}
		if rect.Max.X-rect.Min.X > vg.Points(2) {
			rect.Max.X -= vg.Points(1)
		}
		c.FillPolygon(col, c.ClipPolygonXY(corners(rect)))
		if label.Width(bar.Label)+vg.Points(4) < rect.Max.X-rect.Min.X && label.Height(bar.Label) < rect.Max.Y-rect.Min.Y {
			c.FillText(label, vg.Point{X: (rect.Min.X + rect.Max.X) / 2, Y: (rect.Min.Y + rect.Max.Y) / 2}, bar.Label)
		}
	}
}

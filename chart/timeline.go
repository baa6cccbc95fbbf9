package chart

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/graphpipe/graphpipe/microbatch"
)

// The axis titles of a timeline.
const (
	TimeAxis  = "time (ms)"
	StageAxis = "stage (devices)"
)

// Timeline is one iteration of a plan, simulated or measured.
type Timeline struct {
	Title  string             // what it is: "simulated", "measured", the plan
	Rows   []string           // one per stage, top to bottom: its name and devices
	Result *microbatch.Result // its events, iteration time and bubble
}

// What a timeline's colours stand for, in the legend's order.
var timelineKeys = []struct {
	kind  microbatch.Kind
	label string
	color color.Color
}{
	{microbatch.Forward, "forward", rgb(0x4e79a7)},
	{microbatch.Backward, "backward", rgb(0x59a14f)},
	{microbatch.Weight, "weight gradient", rgb(0xf28e2b)},
	{microbatch.Send, "send", rgb(0xb07aa1)},
	{microbatch.Recv, "receive", rgb(0x9c755f)},
	{0, "idle (bubble)", color.Gray{Y: 218}},
}

func keyColor(k microbatch.Kind) color.Color {
	for _, key := range timelineKeys {
		if key.kind == k {
			return key.color
		}
	}
	return color.Black
}

// Where a row's lanes sit, in row units around the row's centre: compute
// on top, sends, then receives.
var lanes = map[microbatch.Kind][2]float64{
	microbatch.Forward: {-0.06, 0.42}, microbatch.Backward: {-0.06, 0.42}, microbatch.Weight: {-0.06, 0.42},
	microbatch.Send: {-0.24, -0.1}, microbatch.Recv: {-0.42, -0.28},
}

// Timelines draws one or more timelines one above the other, on one time
// axis in milliseconds, with one legend.
func Timelines(format Format, ts ...Timeline) ([]byte, error) {
	if len(ts) == 0 {
		return nil, fmt.Errorf("chart: no timeline to draw")
	}
	end := 0.0
	for _, t := range ts {
		if t.Result == nil {
			return nil, fmt.Errorf("chart: timeline %q has no events", t.Title)
		}
		end = max(end, t.Result.End()) // several iterations where the schedule has no flush
	}
	f := &figure{w: vg.Points(900), legend: newLegend(), legendEntries: len(timelineKeys), x: TimeAxis, y: StageAxis}
	for _, key := range timelineKeys {
		f.legend.Add(key.label, swatch{key.color})
	}
	for i, t := range ts {
		p := newPlot(fmt.Sprintf("%s: iteration %.4g ms, bubble %.1f%%", t.Title, 1e3*t.Result.Iteration, 100*t.Result.Bubble), f.x, f.y)
		if i < len(ts)-1 {
			p.X.Label.Text = "" // the time axis is named once, at the bottom
		}
		p.X.Min, p.X.Max = 0, 1e3*end
		p.X.Tick.Marker = linearTicks{}
		p.Y.Tick.Marker = rowTicks(t.Rows)
		p.Y.Tick.Length = 0
		p.Add(grid(), &rows{t: t})
		f.plots = append(f.plots, p)
		f.h += vg.Points(70 + 24*float64(len(t.Rows)))
		if i > 0 {
			f.title += " / "
		}
		f.title += p.Title.Text
	}
	return f.render(format)
}

// rowTicks names the rows, stage 0 at the top.
func rowTicks(names []string) plot.ConstantTicks {
	var ts plot.ConstantTicks
	for i, n := range names {
		ts = append(ts, plot.Tick{Value: float64(len(names) - 1 - i), Label: n})
	}
	return ts
}

// rows is the plotter of a timeline's rows.
type rows struct{ t Timeline }

func (r *rows) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, 1e3 * r.t.Result.End(), -0.5, float64(len(r.t.Rows)) - 0.5
}

func (r *rows) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	n := len(r.t.Rows)
	box := func(row int, lane [2]float64, from, to float64, col color.Color) vg.Rectangle {
		y := float64(n - 1 - row)
		rect := vg.Rectangle{Min: vg.Point{X: tx(1e3 * from), Y: ty(y + lane[0])}, Max: vg.Point{X: tx(1e3 * to), Y: ty(y + lane[1])}}
		if rect.Max.X-rect.Min.X < vg.Points(0.4) { // an instant still shows
			rect.Max.X = rect.Min.X + vg.Points(0.4)
		}
		c.FillPolygon(col, c.ClipPolygonXY(corners(rect)))
		return rect
	}
	compute := lanes[microbatch.Forward]
	for s := 0; s < n; s++ { // the idle time under the compute lane
		box(s, compute, 0, r.t.Result.End(), timelineKeys[len(timelineKeys)-1].color)
	}
	label := draw.TextStyle{Color: color.White, Font: font.From(sans, vg.Points(7)), XAlign: draw.XCenter, YAlign: draw.YCenter, Handler: p.TextHandler}
	for _, e := range r.t.Result.Events {
		if e.Stage < 0 || e.Stage >= n {
			continue
		}
		rect := box(e.Stage, lanes[e.Kind], e.Start, e.End, keyColor(e.Kind))
		if e.Compute() {
			txt := fmt.Sprint(e.MB)
			if label.Width(txt)+vg.Points(3) < rect.Max.X-rect.Min.X {
				c.FillText(label, vg.Point{X: (rect.Min.X + rect.Max.X) / 2, Y: (rect.Min.Y + rect.Max.Y) / 2}, txt)
			}
		}
	}
}

// swatch is a legend entry's filled square.
type swatch struct{ color color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	r.Min.Y += vg.Points(1)
	r.Max.Y -= vg.Points(1)
	c.FillPolygon(s.color, corners(r))
}

func corners(r vg.Rectangle) []vg.Point {
	return []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}}
}

package chart

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Format is a file format a chart is drawn in.
type Format string

const (
	SVG Format = "svg"
	PNG Format = "png"
)

// FormatOf is the format a file name asks for by its extension.
func FormatOf(path string) (Format, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		return SVG, nil
	case ".png":
		return PNG, nil
	}
	return "", fmt.Errorf("%s: a chart is written as .svg or .png", path)
}

// The one style.
var (
	sans       = font.Font{Typeface: "Liberation", Variant: "Sans"}
	titleSize  = vg.Points(13)
	labelSize  = vg.Points(11)
	tickSize   = vg.Points(10)
	legendSize = vg.Points(10)
	lineWidth  = vg.Points(1.75)
	pngDPI     = 144
	gridColor  = color.Gray{Y: 225}
	// palette: series in order (Tableau 10's first seven).
	palette = []color.Color{rgb(0x4e79a7), rgb(0xf28e2b), rgb(0x59a14f), rgb(0xe15759), rgb(0x76b7b2), rgb(0xedc948), rgb(0xb07aa1)}
)

func rgb(v uint32) color.Color {
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 0xff}
}

// newPlot is a plot in the one style, with a light grid.
func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(sans, titleSize)
	p.Title.Padding = vg.Points(8)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, labelSize)
		a.Tick.Label.Font = font.From(sans, tickSize)
		a.Tick.Length = vg.Points(4)
		a.Label.Padding = vg.Points(4)
	}
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	return p
}

func grid() *plotter.Grid {
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = gridColor, gridColor
	g.Vertical.Width, g.Horizontal.Width = vg.Points(0.5), vg.Points(0.5)
	return g
}

func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.TextStyle.Font = font.From(sans, legendSize)
	l.Top, l.Left = true, true
	l.ThumbnailWidth = vg.Points(18)
	l.Padding = vg.Points(3)
	return l
}

// figure is what one file holds: plots one above the other, sharing the
// left part of the canvas, and a legend to their right.
type figure struct {
	w, h          vg.Length
	plots         []*plot.Plot
	legend        plot.Legend
	title, x, y   string // for a PNG's text chunks
	legendEntries int
}

// render draws the figure in format.
func (f *figure) render(format Format) ([]byte, error) {
	var c vg.CanvasWriterTo
	switch format {
	case SVG:
		c = vgsvg.New(f.w, f.h)
	case PNG:
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(f.w, f.h), vgimg.UseDPI(pngDPI))}
	default:
		return nil, fmt.Errorf("chart: unknown format %q", format)
	}
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	main := dc
	if f.legendEntries > 0 {
		lw := f.legend.Rectangle(dc).Size().X + vg.Points(16)
		main.Max.X -= lw
		side := dc
		side.Min.X = main.Max.X + vg.Points(8)
		side.Max.Y -= vg.Points(36) // level with the top of the plotting area
		f.legend.Draw(side)
	}
	rows := make([][]*plot.Plot, len(f.plots))
	for i, p := range f.plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(f.plots), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(12)}
	for i, cs := range plot.Align(rows, tiles, main) {
		f.plots[i].Draw(cs[0])
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, err
	}
	if format == SVG {
		return svgFallbackFonts(b.Bytes()), nil
	}
	return pngText(b.Bytes(), [][2]string{{"Title", f.title}, {"Description", "x axis: " + f.x + "; y axis: " + f.y}})
}

// svgFallbackFonts lets a viewer without the Liberation fonts set the text
// in the fonts whose metrics Liberation's match (Arial, Helvetica), so
// that labels keep the widths they were laid out with.
func svgFallbackFonts(svg []byte) []byte {
	return bytes.ReplaceAll(svg, []byte("font-family:Liberation Sans;"), []byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
}

// pngText puts UTF-8 text chunks (iTXt) right after a PNG's header chunk.
func pngText(png []byte, kv [][2]string) ([]byte, error) {
	const head = 8 + 4 + 4 + 13 + 4 // signature, IHDR
	if len(png) < head || string(png[12:16]) != "IHDR" {
		return nil, fmt.Errorf("chart: the PNG encoder wrote no header")
	}
	var b bytes.Buffer
	b.Write(png[:head])
	for _, e := range kv {
		data := append(append([]byte(e[0]), 0, 0, 0, 0, 0), e[1]...) // keyword, uncompressed, no language, no translated keyword
		chunk := append([]byte("iTXt"), data...)
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		b.Write(chunk)
		binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	}
	b.Write(png[head:])
	return b.Bytes(), nil
}

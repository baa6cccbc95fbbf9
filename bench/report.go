package bench

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Section is one table of the report.
type Section struct {
	Name    string // file stem: bench/results/<name>.csv
	Title   string
	Intro   string
	Columns []string
	Rows    [][]string
	Notes   []string
}

// Markdown renders the section.
func (s *Section) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", s.Title)
	if s.Intro != "" {
		fmt.Fprintf(&b, "%s\n\n", s.Intro)
	}
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(s.Columns, " | "), strings.Repeat("---|", len(s.Columns)))
	for _, r := range s.Rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(r, " | "))
	}
	for _, n := range s.Notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	b.WriteString("\n")
	return b.String()
}

// CSV renders the section's table.
func (s *Section) CSV() []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write(s.Columns)
	w.WriteAll(s.Rows)
	return b.Bytes()
}

// Plot is a line chart: series of (x, y) points.
type Plot struct {
	Name, Title, XLabel, YLabel string
	LogX, LogY                  bool
	Series                      []Series
}

// Series is one line of a plot.
type Series struct {
	Label string
	X, Y  []float64
}

var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1"}

// SVG draws the plot.
func (p *Plot) SVG() []byte {
	const w, h, left, right, top, bottom = 640.0, 400.0, 70.0, 150.0, 40.0, 50.0
	tx := func(v float64) float64 {
		if p.LogX {
			return math.Log10(v)
		}
		return v
	}
	ty := func(v float64) float64 {
		if p.LogY {
			return math.Log10(v)
		}
		return v
	}
	x0, x1, y0, y1 := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for i := range s.X {
			x0, x1 = math.Min(x0, tx(s.X[i])), math.Max(x1, tx(s.X[i]))
			y0, y1 = math.Min(y0, ty(s.Y[i])), math.Max(y1, ty(s.Y[i]))
		}
	}
	if !p.LogY {
		y0 = math.Min(y0, 0)
	}
	if x1 == x0 {
		x1 = x0 + 1
	}
	if y1 == y0 {
		y1 = y0 + 1
	}
	px := func(v float64) float64 { return left + (tx(v)-x0)/(x1-x0)*(w-left-right) }
	py := func(v float64) float64 { return h - bottom - (ty(v)-y0)/(y1-y0)*(h-top-bottom) }
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="22" font-size="14">%s</text>`+"\n", left, p.Title)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n",
		left, h-bottom, w-right, h-bottom, left, top, left, h-bottom)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", (left+w-right)/2, h-12, p.XLabel)
	fmt.Fprintf(&b, `<text x="16" y="%.0f" transform="rotate(-90 16 %.0f)" text-anchor="middle">%s</text>`+"\n", (top+h-bottom)/2, (top+h-bottom)/2, p.YLabel)
	for i := 0; i <= 4; i++ { // y ticks
		v := y0 + (y1-y0)*float64(i)/4
		label := v
		if p.LogY {
			label = math.Pow(10, v)
		}
		y := h - bottom - float64(i)/4*(h-top-bottom)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.3g</text><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#ddd"/>`+"\n", left-6, y+4, label, left, y, w-right, y)
	}
	for si, s := range p.Series {
		col := palette[si%len(palette)]
		var pts []string
		for i := range s.X {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[i]), py(s.Y[i])))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(s.X[i]), py(s.Y[i]), col)
			if si == 0 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%g</text>`+"\n", px(s.X[i]), h-bottom+16, s.X[i])
			}
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), col)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="12" height="12" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", w-right+12, top+float64(si)*20, col, w-right+30, top+float64(si)*20+11, s.Label)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// Report is every section and plot of one run, stamped.
type Report struct {
	Stamp    string
	Sections []*Section
	Plots    []*Plot
}

// Write puts BENCHMARKS.md at root and the CSVs and SVGs under
// root/bench/results.
func (r *Report) Write(root string) error {
	dir := filepath.Join(root, "bench", "results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString("# graphpipe benchmarks\n\n")
	md.WriteString(r.Stamp + "\n\n")
	md.WriteString("Every figure below was produced by the run that wrote this file (`make bench`, or `make bench-quick` for a\nsubset); every comparison is a ratio measured in that run. Tables are also under `bench/results/*.csv`.\n\n")
	for _, p := range r.Plots {
		if err := os.WriteFile(filepath.Join(dir, p.Name+".svg"), p.SVG(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&md, "![%s](bench/results/%s.svg)\n\n", p.Title, p.Name)
	}
	for _, s := range r.Sections {
		md.WriteString(s.Markdown())
		if err := os.WriteFile(filepath.Join(dir, s.Name+".csv"), s.CSV(), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "BENCHMARKS.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	return r.headline(root)
}

// Markers delimit the README's headline block, which the report rewrites.
const (
	headStart = "<!-- bench:start -->"
	headEnd   = "<!-- bench:end -->"
)

// headline rewrites the README's block between the markers: the paper
// table's rows at the largest device count, the first plot, a link.
func (r *Report) headline(root string) error {
	path := filepath.Join(root, "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil // no README: nothing to update
	}
	text := string(b)
	i, j := strings.Index(text, headStart), strings.Index(text, headEnd)
	if i < 0 || j < i || len(r.Sections) == 0 {
		return nil
	}
	paper := r.Sections[0]
	top := ""
	for _, row := range paper.Rows {
		if row[2] > top || len(row[2]) > len(top) {
			top = row[2]
		}
	}
	var h strings.Builder
	fmt.Fprintf(&h, "%s\n%s\n\n| model | devices | gpp samples/s | spp samples/s | gpp/spp |\n|---|---|---|---|---|\n", headStart, r.Stamp)
	for _, row := range paper.Rows {
		if row[2] == top {
			fmt.Fprintf(&h, "| %s | %s | %s | %s | %s |\n", row[0], row[2], row[4], row[5], row[6])
		}
	}
	if len(r.Plots) > 0 {
		fmt.Fprintf(&h, "\n![%s](bench/results/%s.svg)\n", r.Plots[0].Title, r.Plots[0].Name)
	}
	h.WriteString("\nThe whole report, with its method and the paper's figures beside ours: [BENCHMARKS.md](BENCHMARKS.md).\n")
	text = text[:i] + h.String() + text[j:]
	return os.WriteFile(path, []byte(text), 0o644)
}

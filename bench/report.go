package bench

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/graphpipe/graphpipe/chart"
)

// Section is one table of the report, and the chart drawn above it.
type Section struct {
	Name    string // file stem: bench/results/<name>.csv
	Title   string
	Intro   string // the caption: what was run, at which batch
	Columns []string
	Rows    [][]string
	Notes   []string
	Chart   *Chart
	// Below are more charts, drawn under the table and its notes.
	Below []*Chart
}

// Markdown renders the section.
func (s *Section) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", s.Title)
	if s.Chart != nil {
		fmt.Fprintf(&b, "%s\n\n", s.Chart.Markdown())
	}
	if s.Intro != "" {
		fmt.Fprintf(&b, "%s\n\n", s.Intro)
	}
	b.WriteString(s.Table())
	for _, n := range s.Notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	for _, c := range s.Below {
		fmt.Fprintf(&b, "\n%s\n", c.Markdown())
	}
	b.WriteString("\n")
	return b.String()
}

// writeCharts draws the section's charts into dir.
func (s *Section) writeCharts(dir string) error {
	for _, c := range append([]*Chart{s.Chart}, s.Below...) {
		if err := c.write(dir); err != nil {
			return err
		}
	}
	return nil
}

// Table renders the section's table alone.
func (s *Section) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(s.Columns, " | "), strings.Repeat("---|", len(s.Columns)))
	for _, r := range s.Rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(r, " | "))
	}
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

// Chart is a figure of the report, drawn with gonum/plot (package chart)
// into bench/results/<Name>.svg and <Name>.png.
type Chart struct {
	Name  string
	Title string
	Draw  func(chart.Format) ([]byte, error)
}

// Markdown shows the chart's SVG.
func (c *Chart) Markdown() string {
	return fmt.Sprintf("![%s](bench/results/%s.svg)", c.Title, c.Name)
}

// Axes are the axis titles of every chart of the report, by name: the
// charts are drawn with them, and a test checks that each file carries them.
var Axes = map[string][2]string{
	"batch-sweep":         {"samples per device (global batch / 32)", "gpp / spp throughput (ratio)"},
	"paper-ratio":         {"devices (v100)", "gpp / spp throughput (ratio)"},
	"search-time":         {"ops in the model", "gpp search time (s)"},
	"case-study-timeline": {chart.TimeAxis, chart.StageAxis},

	"selective-backprop-time":    {"training time (s, evaluations aside)", "evaluation accuracy"},
	"selective-backprop-samples": {"samples with a backward pass", "evaluation accuracy"},
	"pipedream-2bw-loss":         {"samples trained on", "cross-entropy loss"},
}

// lineChart is a report chart of a line chart, its axes from Axes.
func lineChart(name string, l *chart.Line) *Chart {
	l.XLabel, l.YLabel = Axes[name][0], Axes[name][1]
	return &Chart{Name: name, Title: l.Title, Draw: l.Render}
}

// Report is every section of one run, stamped.
type Report struct {
	Stamp    string
	Sections []*Section
}

// historyFile holds the figures that earlier runs measured when a design
// choice was made (Planner history), each with its provenance; Write copies
// it to the end of BENCHMARKS.md.
const historyFile = "bench/history.md"

// Write puts BENCHMARKS.md at root, and the CSVs and the charts (SVG and
// PNG) under root/bench/results.
func (r *Report) Write(root string) error {
	dir := filepath.Join(root, "bench", "results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString("# graphpipe benchmarks\n\n")
	md.WriteString(r.Stamp + "\n\n")
	md.WriteString("Every figure below was produced by the run that wrote this file (`make bench`, or `make bench-quick` for a\nsubset); every comparison is a ratio measured in that run. Tables are also under `bench/results/*.csv`.\n\n")
	for _, s := range r.Sections {
		if err := s.writeCharts(dir); err != nil {
			return err
		}
		md.WriteString(s.Markdown())
		if err := os.WriteFile(filepath.Join(dir, s.Name+".csv"), s.CSV(), 0o644); err != nil {
			return err
		}
	}
	// the hand-kept history of figures behind design choices, after the
	// run's own: a report regenerated keeps it
	if h, err := os.ReadFile(filepath.Join(root, historyFile)); err == nil {
		md.Write(h)
	}
	if err := os.WriteFile(filepath.Join(root, "BENCHMARKS.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	return r.headline(root)
}

// Splice writes r's sections into the BENCHMARKS.md at root that a full run
// wrote, each replacing the section of its title there or, if none,
// placed before the planner's history; and their CSVs and charts. It is
// how one section is measured again without the hour the whole report
// takes (report -only NAME); the file's stamp gains a line that says so.
// The planner's history at the end is copied in again from
// bench/history.md.
func (r *Report) Splice(root string) error {
	path := filepath.Join(root, "BENCHMARKS.md")
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	md := string(old)
	dir := filepath.Join(root, "bench", "results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, s := range r.Sections {
		if err := s.writeCharts(dir); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, s.Name+".csv"), s.CSV(), 0o644); err != nil {
			return err
		}
		text := s.Markdown() + "_" + r.Stamp + "_\n\n"
		head := "## " + s.Title + "\n"
		if i := strings.Index(md, head); i >= 0 {
			end := len(md)
			if j := strings.Index(md[i+len(head):], "\n## "); j >= 0 {
				end = i + len(head) + j + 1
			}
			md = md[:i] + text + md[end:]
			continue
		}
		at := strings.Index(md, "## Planner history")
		if at < 0 {
			at = len(md)
		}
		md = md[:at] + text + md[at:]
	}
	// the history as bench/history.md has it now, not the copy the full
	// run made
	if h, err := os.ReadFile(filepath.Join(root, historyFile)); err == nil {
		if at := strings.Index(md, "## Planner history"); at >= 0 {
			md = md[:at]
		}
		md += string(h)
	}
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return err
	}
	for _, s := range r.Sections {
		if strings.HasPrefix(s.Name, "headline-") { // the README shows them: rewrite its block as a full run does
			return r.headline(root)
		}
	}
	return nil
}

// write draws the chart (if any) into dir as SVG and PNG.
func (c *Chart) write(dir string) error {
	if c == nil {
		return nil
	}
	for _, f := range []chart.Format{chart.SVG, chart.PNG} {
		data, err := c.Draw(f)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, c.Name+"."+string(f)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Markers delimit the README's headline block, which the report rewrites.
const (
	headStart = "<!-- bench:start -->"
	headEnd   = "<!-- bench:end -->"
)

// headline rewrites the README's block between the markers: the headline
// sections (those named headline-*), the first one's chart, the stamp, a
// link to the whole report.
func (r *Report) headline(root string) error {
	path := filepath.Join(root, "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil // no README: nothing to update
	}
	text := string(b)
	i, j := strings.Index(text, headStart), strings.Index(text, headEnd)
	if i < 0 || j < i {
		return nil
	}
	var h strings.Builder
	h.WriteString(headStart + "\n")
	for _, s := range r.Sections {
		if !strings.HasPrefix(s.Name, "headline-") {
			continue
		}
		if s.Chart != nil {
			fmt.Fprintf(&h, "<img src=\"bench/results/%s.svg\" width=\"600\" alt=\"%s\">\n\n", s.Chart.Name, s.Chart.Title)
		}
		fmt.Fprintf(&h, "**%s.** %s\n\n%s\n", s.Title, s.Intro, s.Table())
	}
	fmt.Fprintf(&h, "%s The whole report, with its method and the paper's figures beside ours: [BENCHMARKS.md](BENCHMARKS.md).\n", r.Stamp)
	text = text[:i] + h.String() + text[j:]
	return os.WriteFile(path, []byte(text), 0o644)
}

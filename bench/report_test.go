package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/chart"
)

// TestReportStructure regenerates a small section (the ideal-bound fractions
// of one plan) and checks that the committed BENCHMARKS.md has that section
// with the same heading and columns, and that every table row has as many
// cells as its header.
func TestReportStructure(t *testing.T) {
	g, err := Paper("mmt")
	if err != nil {
		t.Fatal(err)
	}
	row := Compare(g, "v100", 8, 128, 0, false)
	s := Ideal([]Row{row})
	md := s.Markdown()
	lines := strings.Split(md, "\n")
	heading, header := lines[0], lines[2]
	report, err := os.ReadFile("../BENCHMARKS.md")
	if err != nil {
		t.Fatalf("the report is missing: %v (make bench-quick writes it)", err)
	}
	text := string(report)
	at := strings.Index(text, heading+"\n")
	if at < 0 {
		t.Fatalf("BENCHMARKS.md lacks %q", heading)
	}
	if !strings.Contains(text[at:], header) {
		t.Fatalf("BENCHMARKS.md's %q table does not have the columns %s", heading, header)
	}
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "| ") && strings.Count(l, " | ") == 0 {
			t.Errorf("malformed row %q", l)
		}
	}
	if got := strings.Count(lines[4], " | ") + 1; got != len(s.Columns) {
		t.Errorf("a regenerated row has %d cells for %d columns", got, len(s.Columns))
	}
	if row.Ratio() < 1 {
		t.Errorf("gpp below spp: %v", row.Ratio())
	}
}

// TestCharts: every chart of the committed report was drawn by the
// library (gonum/plot's SVG writer names itself), parses (the SVG as XML,
// the PNG decodes), carries its axis titles (the SVG's text, the PNG's
// text chunk) and is shown in BENCHMARKS.md; no other picture lies in
// bench/results.
func TestCharts(t *testing.T) {
	report, err := os.ReadFile("../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, axes := range Axes {
		t.Run(name, func(t *testing.T) {
			for _, ext := range []string{"svg", "png"} {
				data, err := os.ReadFile("results/" + name + "." + ext)
				if err != nil {
					t.Fatalf("%v (make bench writes it)", err)
				}
				in, err := chart.Inspect(data)
				if err != nil {
					t.Fatalf("%s.%s: %v", name, ext, err)
				}
				want := []string{"x axis: " + axes[0] + "; y axis: " + axes[1]}
				if ext == "svg" {
					want = axes[:]
					if !strings.Contains(in.Generator, "Plotinum") {
						t.Errorf("%s.svg was not drawn by gonum/plot: %q", name, in.Generator)
					}
				}
				for _, w := range want {
					if !in.Has(w) {
						t.Errorf("%s.%s lacks %q: %q", name, ext, w, in.Texts)
					}
				}
			}
			if !strings.Contains(string(report), "(bench/results/"+name+".svg)") {
				t.Errorf("BENCHMARKS.md does not show %s.svg", name)
			}
		})
	}
	files, _ := filepath.Glob("results/*.*")
	for _, f := range files {
		base := filepath.Base(f)
		ext := filepath.Ext(base)
		if _, ok := Axes[strings.TrimSuffix(base, ext)]; !ok && ext != ".csv" {
			t.Errorf("%s is not a chart of the report", f)
		}
	}
}

// TestReadmeHeadline: the README opens with the sweep chart and the two
// headline tables, the same rows as BENCHMARKS.md's.
func TestReadmeHeadline(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	report, err := os.ReadFile("../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	i, j := strings.Index(text, headStart), strings.Index(text, headEnd)
	if i < 0 || j < i {
		t.Fatal("README.md has no bench block")
	}
	if first := strings.Index(text, "\n## "); first < j {
		t.Errorf("the bench block is not on the README's first screen: a section starts before it ends")
	}
	block := text[i:j]
	if !strings.Contains(block, `src="bench/results/batch-sweep.svg"`) {
		t.Error("the README's bench block does not show the batch sweep")
	}
	for _, title := range []string{"gpp / spp at 32 v100, 16 samples per device", "gpp / spp at 32 v100, each model's default batch"} {
		at := strings.Index(string(report), "## "+title+"\n")
		if at < 0 {
			t.Fatalf("BENCHMARKS.md lacks the section %q", title)
		}
		rows := tableAfter(string(report)[at:])
		if len(rows) < 5 || !strings.Contains(block, "**"+title+".**") || !strings.Contains(block, strings.Join(rows, "\n")) {
			t.Errorf("the README's %q is not BENCHMARKS.md's:\n%s", title, strings.Join(rows, "\n"))
		}
	}
}

// tableAfter is the first Markdown table in text.
func tableAfter(text string) []string {
	var rows []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "|") {
			rows = append(rows, l)
		} else if len(rows) > 0 {
			break
		}
	}
	return rows
}

// TestHistoryKept: BENCHMARKS.md ends with bench/history.md, and Write puts
// it there after the run's own sections.
func TestHistoryKept(t *testing.T) {
	history, err := os.ReadFile("history.md")
	if err != nil {
		t.Fatal(err)
	}
	report, err := os.ReadFile("../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(report), string(history)) {
		t.Error("BENCHMARKS.md does not end with bench/history.md")
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bench"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, historyFile), []byte("## kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Report{Stamp: "stamp", Sections: []*Section{{Name: "s", Title: "section", Columns: []string{"a"}, Rows: [][]string{{"1"}}}}}
	if err := r.Write(root); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(got), "\n## kept\n") {
		t.Errorf("the history is not at the end:\n%s", got)
	}
	if strings.Index(string(got), "## section") > strings.Index(string(got), "## kept") {
		t.Error("the history comes before the run's sections")
	}
}

// TestSpliceKeepsHistory: a section measured again (report -only) replaces
// its own, and BENCHMARKS.md still ends with bench/history.md as it is now,
// rows added since the full run included.
func TestSpliceKeepsHistory(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bench"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(historyFile, "## Planner history\n| old row |\n")
	r := &Report{Stamp: "first", Sections: []*Section{{Name: "s", Title: "section", Columns: []string{"a"}, Rows: [][]string{{"1"}}}}}
	if err := r.Write(root); err != nil {
		t.Fatal(err)
	}
	write(historyFile, "## Planner history\n| old row |\n| new row |\n")
	again := &Report{Stamp: "second", Sections: []*Section{{Name: "s", Title: "section", Columns: []string{"a"}, Rows: [][]string{{"2"}}}}}
	if err := again.Splice(root); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(got)
	if !strings.HasSuffix(md, "## Planner history\n| old row |\n| new row |\n") {
		t.Errorf("BENCHMARKS.md does not end with the history as it is now:\n%s", md)
	}
	if strings.Count(md, "## Planner history") != 1 || strings.Count(md, "## section") != 1 || !strings.Contains(md, "| 2 |") || strings.Contains(md, "| 1 |") {
		t.Errorf("the section or the history is not there once, measured again:\n%s", md)
	}
}

package bench

import (
	"os"
	"strings"
	"testing"
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

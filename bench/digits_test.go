package bench

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
)

// writeGz writes lines as a gzipped CSV file.
func writeGz(t *testing.T, lines []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "digits.csv.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	z := gzip.NewWriter(f)
	z.Write([]byte(strings.Join(lines, "\n") + "\n"))
	z.Close()
	f.Close()
	return path
}

// digitRow is an image of 64 pixels of value v and its label.
func digitRow(v, label string) string { return strings.Repeat(v+",", 64) + label }

// TestDigitsLoad: the digits' CSV reads as pixels scaled to [0, 1] and
// labels, splits the same way for a seed, and refuses a field out of
// range naming its line; the model built for them loads.
func TestDigitsLoad(t *testing.T) {
	d, err := loadDigits(writeGz(t, []string{digitRow("16", "3"), digitRow("0", "9"), digitRow("8", "0")}))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.y) != 3 || d.y[0] != 3 || d.x[0] != 1 || d.x[64] != 0 || d.x[128] != 0.5 {
		t.Fatalf("labels %v, pixels %v %v %v", d.y, d.x[0], d.x[64], d.x[128])
	}
	a, b := d.split(1, 2)
	a2, _ := d.split(1, 2)
	if len(a.y) != 2 || len(b.y) != 1 || len(a.x) != 128 || a.y[0] != a2.y[0] || a.y[1] != a2.y[1] {
		t.Fatalf("split %v | %v", a.y, b.y)
	}
	if _, err := loadDigits(writeGz(t, []string{digitRow("0", "3"), digitRow("17", "1")})); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a pixel of 17 gave %v", err)
	}
	if _, err := dag.Load([]byte(digitsMLP(3, 16, 8))); err != nil {
		t.Fatal(err)
	}
}

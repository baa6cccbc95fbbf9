package bench

import "testing"

// TestDataRowRuns: the data benchmark's row is measured and well formed
// (the ratio itself is the report's to show, not a test's).
func TestDataRowRuns(t *testing.T) {
	row, err := dataRow(t.TempDir(), "mlp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(row) != 7 || row[0] != "mlp" || row[4] == "-" || row[5] == "-" {
		t.Fatalf("row %v", row)
	}
	t.Logf("%v", row)
}

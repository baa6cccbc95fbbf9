package bench

import (
	"os"
	"testing"
)

// TestRecomputeSectionPrint runs the report's recompute section and prints
// it (GRAPHPIPE_RECOMPUTE_SECTION=1; a minute or two on 2 cores).
func TestRecomputeSectionPrint(t *testing.T) {
	if os.Getenv("GRAPHPIPE_RECOMPUTE_SECTION") == "" {
		t.Skip("set GRAPHPIPE_RECOMPUTE_SECTION=1 to run the section")
	}
	s, err := RecomputeSection(Config{Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + s.Markdown())
}

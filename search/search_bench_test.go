package search

import (
	"testing"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
)

// BenchmarkSearchMMT32 is gpp on the zoo's MMT (its default configuration
// and batch) on 32 v100: the planner's time on a paper-sized model. Compare
// branches with go test ./search -run X -bench Search -count 5 on each.
func BenchmarkSearchMMT32(b *testing.B) {
	e, err := models.Lookup("mmt")
	if err != nil {
		b.Fatal(err)
	}
	g, err := e.Build(e.Default)
	if err != nil {
		b.Fatal(err)
	}
	o := Options{Device: plan.Profiles["v100"], Devices: 32}
	for b.Loop() {
		if _, err := Search(g, o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSearchForkJoin is gpp on a chain of 10 fork-join blocks (141 ops,
// stems and joins: fork and join absorption at work) on 8 v100.
func BenchmarkSearchForkJoin(b *testing.B) {
	g, err := models.ForkJoin(10, 4, 256)
	if err != nil {
		b.Fatal(err)
	}
	o := Options{Device: plan.Profiles["v100"], Devices: 8}
	for b.Loop() {
		if _, err := Search(g, o); err != nil {
			b.Fatal(err)
		}
	}
}

package search_test

import (
	"fmt"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
)

// Plan the zoo's CANDLE-Uno (seven feature-encoder branches) on 32 V100s,
// four per node, and set the graph pipeline beside the best sequential one.
func ExampleSearch() {
	e, _ := models.Lookup("candle-uno")
	cfg, _ := e.Preset("default")
	g, err := e.Build(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	dev, _ := plan.LookupDevice("v100")
	p, err := search.Search(g, search.Options{Device: dev, Devices: 32})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d stages, depth %d, micro-batch %d, %.1f samples/s predicted\n",
		p.Strategy, len(p.Stages), p.Predicted.Depth, p.MicroBatch, p.Predicted.SamplesPerS)
	seq := p.Search.Sequential
	fmt.Printf("best sequential: %d stages, depth %d, %.1f samples/s: %.2fx\n",
		seq.Stages, seq.Depth, seq.SamplesPerS, p.Predicted.SamplesPerS/seq.SamplesPerS)
	for _, s := range p.Stages[:min(2, len(p.Stages))] {
		fmt.Printf("stage %d on devices %v: %s .. %s\n", s.ID, s.Devices, s.Ops[0], s.Ops[len(s.Ops)-1])
	}
	// Output:
	// gpp: 9 stages, depth 3, micro-batch 256, 34469.3 samples/s predicted
	// best sequential: 8 stages, depth 8, 26673.1 samples/s: 1.29x
	// stage 0 on devices [0 1]: feat0.fc0 .. feat0.relu3
	// stage 1 on devices [2 3]: feat1.fc0 .. feat1.relu3
}

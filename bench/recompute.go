package bench

import (
	"fmt"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
)

// RecomputeSection shows where the planners chose activation recomputation
// on the paper's models at 32 v100 and what it bought: each planner with
// recomputation off and left to the planner (auto, the default), at the
// batch rule's batch and at 16 times it, on 1f1b and on gpipe (which holds
// every micro-batch in flight, where recomputation pays most).
func RecomputeSection(c Config) (*Section, error) {
	s := &Section{Name: "recompute", Title: "Activation recomputation at 32 v100: where the planners chose it and what it bought",
		Intro: "Each planner searched twice: --recompute off (every stage keeps its activations) and auto (the default: a stage may keep only its inputs " +
			"per micro-batch in flight and rerun its forward during backward, priced as one more forward, where that makes a faster plan fit). " +
			"Batch: the first section's rule (spp with GPipe fits keeping every activation), and 16 times it. \"recomputing\" counts the stages that " +
			"recompute in auto's plan; \"none\" in a samples/s column: no plan fits.",
		Columns: []string{"model", "schedule", "batch", "gpp off samples/s", "gpp auto samples/s", "gpp recomputing", "gpp auto b, stages, depth",
			"spp off samples/s", "spp auto samples/s", "spp recomputing", "spp auto b, stages, depth"}}
	var chosen, enabled, faster, plans int
	scale := []int64{1, 16}
	if c.Quick {
		scale = []int64{16}
	}
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		g, err := Paper(name)
		if err != nil {
			return nil, err
		}
		rule := MemoryBatch(g, "v100", 32)
		for _, x := range scale {
			for _, sched := range []string{"1f1b", "gpipe"} {
				batch := rule * x
				c.Log("recompute: %s, batch %d, %s", name, batch, sched)
				row := []string{name, sched, fmt.Sprint(batch)}
				for _, strategy := range []string{"gpp", "spp"} {
					o := options("v100", 32, batch, 0, strategy, sched)
					o.Recompute = "off"
					off, _ := search.Search(g, o)
					o.Recompute = "auto"
					auto, _ := search.Search(g, o)
					row = append(row, samples(off), samples(auto), recomputing(auto), shape(auto))
					if auto != nil {
						plans++
					}
					if auto != nil && auto.Recomputes() {
						chosen++
						switch {
						case off == nil:
							enabled++
						case auto.Predicted.SamplesPerS > off.Predicted.SamplesPerS:
							faster++
						}
					}
				}
				s.Rows = append(s.Rows, row)
			}
		}
	}
	s.Notes = append(s.Notes, fmt.Sprintf("Recomputation was chosen in %d of %d plans: in %d of them no plan fits keeping every activation, in %d it is faster than off's plan.",
		chosen, plans, enabled, faster))
	return s, nil
}

func samples(p *plan.Plan) string {
	if p == nil {
		return "none"
	}
	return f(p.Predicted.SamplesPerS)
}

// recomputing is "k of n" stages of p recomputing, or "-" without a plan.
func recomputing(p *plan.Plan) string {
	if p == nil {
		return "-"
	}
	n := 0
	for _, s := range p.Stages {
		if s.Recompute {
			n++
		}
	}
	return fmt.Sprintf("%d of %d", n, len(p.Stages))
}

func shape(p *plan.Plan) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%d, %d, %d", p.MicroBatch, len(p.Stages), p.Predicted.Depth)
}

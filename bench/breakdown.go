package bench

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
)

// Breakdown is where a plan's device-time goes in one simulated iteration:
// its devices × the iteration, in shares that add up to one.
//
//   - Ideal: the model's FLOPs for the batch at the device's best
//     efficiency, what the ideal bound assumes of every device-second: the
//     plan's fraction of the bound (plan.Plan.Ideal);
//   - BelowBest: the stages' compute beyond that (kernels on a per-device
//     micro-batch below the best efficiency, launches, memory-bound ops);
//   - AllReduce and Optimizer: the stages' flushes (a ring all-reduce of the
//     gradients across a stage's replicas; the optimizer step, Adam's
//     state read and written once), and a sharded stage's all-gather run
//     late, at the start of its iteration (plan.PlanStage.GatherS);
//   - Bubble: a stage's devices idle before its flush begins (the fill
//     and drain of the pipeline, waits for a slower stage's data);
//   - EndWait: a stage's devices done with their flush, waiting for the
//     iteration's last flush to end;
//   - Unused: devices the plan leaves idle.
//
// ExposedTransfers and ExposedAllReduce are counterfactual: how much
// shorter the iteration is, as a fraction of it, with every transfer (every
// all-reduce) free and the schedule otherwise the same: the part of their
// time on the critical path.
type Breakdown struct {
	IterationS                             float64
	Ideal, BelowBest, AllReduce, Optimizer float64
	Bubble, EndWait, Unused                float64
	ExposedTransfers, ExposedAllReduce     float64
}

// PlanBreakdown measures p's iteration; g is p's model.
func PlanBreakdown(g *dag.Graph, p *plan.Plan) (Breakdown, error) {
	sch, err := p.ScheduleOf()
	if err != nil {
		return Breakdown{}, err
	}
	t := p.Timing()
	r, err := microbatch.Simulate(sch, t)
	if err != nil {
		return Breakdown{}, err
	}
	flushStart := make([]float64, len(p.Stages))
	for _, e := range r.Events {
		if e.Compute() {
			flushStart[e.Stage] = max(flushStart[e.Stage], e.End)
		}
	}
	b := Breakdown{IterationS: r.Iteration}
	total := float64(p.Devices) * r.Iteration
	var busy, reduce, opt, bubble, wait float64
	used := 0
	for s, st := range p.Stages {
		d := float64(len(st.Devices))
		used += len(st.Devices)
		o := min(optimizerS(p, st), st.FlushS)
		busy += d * r.Busy[s]
		opt += d * o
		reduce += d * (st.FlushS - o + st.GatherS)
		bubble += d * max(0, flushStart[s]-r.Busy[s]-st.GatherS)
		wait += d * max(0, r.Iteration-flushStart[s]-st.FlushS)
	}
	// the batch's FLOPs at the best efficiency: the batch over the bound,
	// on every device
	ideal := float64(p.BatchSize) / p.Ideal(g) * float64(p.Devices)
	b.Ideal, b.BelowBest = ideal/total, (busy-ideal)/total
	b.AllReduce, b.Optimizer = reduce/total, opt/total
	b.Bubble, b.EndWait = bubble/total, wait/total
	b.Unused = float64(p.Devices-used) * r.Iteration / total
	b.ExposedTransfers = exposed(sch, t, r.Iteration, func(t *microbatch.Timing) {
		t.Act, t.Grad = make([]float64, len(t.Act)), make([]float64, len(t.Grad))
		t.Post, t.Take, t.Hold = nil, nil, nil
	})
	b.ExposedAllReduce = exposed(sch, t, r.Iteration, func(t *microbatch.Timing) {
		t.Flush = make([]float64, len(p.Stages))
		for s, st := range p.Stages {
			t.Flush[s] = min(optimizerS(p, st), st.FlushS)
			if t.Begin != nil {
				t.Begin[s] -= st.GatherS
			}
		}
	})
	return b, nil
}

// exposed is how much shorter than iter, as a fraction of it, sch runs
// with t changed by free.
func exposed(sch *microbatch.Schedule, t microbatch.Timing, iter float64, free func(*microbatch.Timing)) float64 {
	free(&t)
	q, err := microbatch.Summarize(sch, t)
	if err != nil || iter <= 0 {
		return 0
	}
	return (iter - q.Iteration) / iter
}

// optimizerS is a stage's optimizer step as the cost model prices it:
// weights and gradients read, weights written, Adam's state (8 bytes a
// parameter, the benchmarks' optimizer) read and written, and the weights'
// copy in the plan's precision, at memory bandwidth.
func optimizerS(p *plan.Plan, st plan.PlanStage) float64 {
	s := float64(st.Params) * float64(8+2*8+2*plan.WeightCopyBytes(p.PrecisionName())) / p.Device.MemBW
	if st.Slowdown > 0 {
		s *= st.Slowdown
	}
	return s
}

// BreakdownSection is where each plan's time goes (Breakdown) for the
// paper's models at 32 v100 on the default schedule, gpp's plan and spp's,
// at the GPipe-fit batch (MemoryBatch: the ideal-bound rule), at 16 samples
// per device and at each model's own batch (the gpp/spp rules).
func BreakdownSection(c Config) (*Section, error) {
	s := &Section{Name: "breakdown", Title: "Where the time goes at 32 v100: each plan's device-time by part (simulated, 1f1b)",
		Intro: "Each plan's devices × its iteration, in shares that add up to 100%: the model's FLOPs at the device's best efficiency " +
			"(the plan's fraction of the ideal bound); its kernels' time beyond that " +
			"(a per-device micro-batch below the best efficiency, launches, memory-bound ops); the flush, a ring all-reduce of the " +
			"gradients across a stage's replicas and the optimizer step; its devices idle before their flush (the pipeline's fill and drain, " +
			"waits for a slower stage's data) and after it (waiting for the iteration's last flush); and devices the plan leaves unused. " +
			"The last two columns are counterfactual: how much shorter the same schedule runs with every transfer, or every all-reduce, free " +
			"(the part of them on the critical path). Rules: the GPipe-fit batch of the ideal-bound section, 16 samples per device, each model's own batch. " +
			"What was tried to close the gap to the bound, and what it bought, is in the planner history at the end (issue 52).",
		Columns: []string{"model", "batch", "rule", "planner", "samples/s", "of ideal (at best eff.)", "below best eff.", "all-reduce", "optimizer",
			"idle before flush", "idle after flush", "unused", "transfers exposed", "all-reduce exposed", "b, stages, depth"}}
	pct := func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		g, err := Paper(name)
		if err != nil {
			return nil, err
		}
		c.Log("breakdown: %s", name)
		rules := []struct {
			name  string
			batch int64
		}{{"GPipe-fit", MemoryBatch(g, "v100", 32)}, {"16 per device", 16 * 32}, {"own batch", g.BatchSize()}}
		seen := map[int64]int{}
		for _, rule := range rules {
			if i, ok := seen[rule.batch]; ok { // the same batch under two rules: one pair of rows says both
				for _, row := range s.Rows[i : i+2] {
					row[2] += ", " + rule.name
				}
				continue
			}
			seen[rule.batch] = len(s.Rows)
			for _, strategy := range []string{"gpp", "spp"} {
				p, err := search.Search(g, options("v100", 32, rule.batch, 0, strategy, "1f1b"))
				if err != nil {
					return nil, err
				}
				bd, err := PlanBreakdown(g, p)
				if err != nil {
					return nil, err
				}
				s.Rows = append(s.Rows, []string{name, fmt.Sprint(rule.batch), rule.name, strategy, f(p.Predicted.SamplesPerS),
					pct(bd.Ideal), pct(bd.BelowBest), pct(bd.AllReduce), pct(bd.Optimizer),
					pct(bd.Bubble), pct(bd.EndWait), pct(bd.Unused), pct(bd.ExposedTransfers), pct(bd.ExposedAllReduce),
					fmt.Sprintf("%d, %d, %d", p.MicroBatch, len(p.Stages), p.Predicted.Depth)})
			}
		}
	}
	return s, nil
}

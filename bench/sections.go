package bench

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// Config says how much to run: Quick is make bench-quick's subset.
type Config struct {
	Quick bool
	Log   func(format string, args ...any)
}

func (c Config) devices() []int {
	if c.Quick {
		return []int{8, 32}
	}
	return []int{4, 8, 16, 32}
}

func f(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.4g", v)
}

func plan3(r Result) string {
	if r.Err != "" {
		return "none"
	}
	return fmt.Sprintf("%d, %d, %d", r.MicroBatch, r.Stages, r.Depth)
}

var planCols = []string{"model", "device", "devices", "batch", "gpp samples/s", "spp samples/s", "gpp/spp", "gpp b, stages, depth", "spp b, stages, depth", "gpp search s"}

func planRow(r Row) []string {
	return []string{r.Model, r.Device, fmt.Sprint(r.Devices), fmt.Sprint(r.Batch), f(r.GPP.SamplesPerS), f(r.SPP.SamplesPerS),
		fmt.Sprintf("%.3f", r.Ratio()), plan3(r.GPP), plan3(r.SPP), fmt.Sprintf("%.2f", r.GPP.SearchS)}
}

// PaperSection is the paper's evaluation under the GPipe-fit batch rule,
// simulated on v100, with spp-exact where it finishes, and a chart of
// gpp/spp against the device count.
func PaperSection(c Config) (*Section, []Row, error) {
	s := &Section{Name: "paper", Title: "The GPipe-fit batch rule: the paper's models on 4 to 32 v100 (simulated, 4 per node, 16 GB)",
		Intro: "Batch rule: the largest power of two (at most 65536) at which spp with a GPipe schedule still fits, i.e. the whole batch in flight " +
			"(the GPipe-era meaning of \"near the memory limit\"); both planners then run the default schedule, 1f1b, which warms each stage up " +
			"far enough to hide its transfers where memory allows (the next section has the other schedules). The paper reports up to 1.6x over PipeDream and Piper, " +
			"growing with the GPU count, and at 32 GPUs 1.12-1.40x from parallel stages alone and 1.25-1.61x with the larger micro-batch. " +
			"The chart at the top sweeps the batch at 32 v100 from 4 to 2048 samples per device.",
		Columns: append(append([]string{}, planCols...), "spp-exact")}
	line := &chart.Line{Title: "gpp / spp at the GPipe-fit batch (simulated, v100)", LogX: true, XTicks: intsToFloats(c.devices())}
	line.Reference.Label, line.Reference.Y = "spp (1.0)", 1
	var rows []Row
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		g, err := Paper(name)
		if err != nil {
			return nil, nil, err
		}
		series := chart.Series{Label: name}
		for _, d := range c.devices() {
			c.Log("paper: %s on %d v100", name, d)
			r := Compare(g, "v100", d, MemoryBatch(g, "v100", d), 0, !c.Quick)
			ex := "-"
			if r.Exact != nil {
				ex = "stopped at its limit"
				if r.Exact.Err == "" {
					ex = fmt.Sprintf("%s samples/s in %.2f s", f(r.Exact.SamplesPerS), r.Exact.SearchS)
				}
			}
			s.Rows = append(s.Rows, append(planRow(r), ex))
			series.X, series.Y = append(series.X, float64(d)), append(series.Y, ratioOrNaN(r))
			rows = append(rows, r)
		}
		line.Series = append(line.Series, series)
	}
	s.Chart = lineChart("paper-ratio", line)
	return s, rows, nil
}

// ratioOrNaN is gpp/spp, NaN (no point on a chart) where either has no plan.
func ratioOrNaN(r Row) float64 {
	if r.Ratio() == 0 {
		return math.NaN()
	}
	return r.Ratio()
}

func intsToFloats[T int | int64](v []T) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// Schedules repeats the paper's comparison on the other 1F1Bs, beside the
// default 1f1b rows: 1f1b-depth, the 1F1B of PipeDream-Flush (and of the
// paper's baselines), and zb, which defers weight gradients into idle time.
// It shows which gains come from the planner and which from the schedule.
func Schedules(c Config, rows []Row) (*Section, error) {
	s := &Section{Name: "schedules", Title: "The same comparison on other schedules: 1f1b-depth (PipeDream-Flush's 1F1B) and zb (weight gradients deferred)",
		Intro: "1f1b-depth is the schedule of PipeDream-Flush and of the paper's baselines: a stage warms up to its depth only (1 + its longest path to a sink), so it waits " +
			"out the round trip of every micro-batch's transfers; 1f1b (the default) warms up further where memory allows (microbatch.Warmup); " +
			"zb is 1f1b with each backward split into input and weight gradients, the weight half deferred into the stage's idle time, no more " +
			"in flight (microbatch.ZeroBubble). Deep sequential pipelines lose most to 1f1b-depth's waits. Last column: gpp on zb over a " +
			"PipeDream-Flush-style sequential pipeline (spp on 1f1b-depth).",
		Columns: []string{"model", "devices", "batch", "gpp/spp, 1f1b-depth", "gpp/spp, 1f1b", "gpp/spp, zb", "gpp zb samples/s", "spp zb samples/s",
			"gpp zb / spp 1f1b-depth"}}
	ratio := func(a, b Result) string {
		if a.SamplesPerS == 0 || b.SamplesPerS == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", a.SamplesPerS/b.SamplesPerS)
	}
	for _, r := range rows {
		g, err := Paper(r.Model)
		if err != nil {
			return nil, err
		}
		c.Log("schedules: %s on %d v100", r.Model, r.Devices)
		d := CompareWith(g, r.Device, r.Devices, r.Batch, 0, "1f1b-depth", false)
		z := CompareWith(g, r.Device, r.Devices, r.Batch, 0, "zb", false)
		s.Rows = append(s.Rows, []string{r.Model, fmt.Sprint(r.Devices), fmt.Sprint(r.Batch), ratio(d.GPP, d.SPP), ratio(r.GPP, r.SPP),
			ratio(z.GPP, z.SPP), f(z.GPP.SamplesPerS), f(z.SPP.SamplesPerS), ratio(z.GPP, d.SPP)})
	}
	return s, nil
}

// Ablation forces spp's own micro-batch on both planners at 32 devices.
func Ablation(c Config) (*Section, error) {
	s := &Section{Name: "ablation", Title: "Ablation at 32 v100: one micro-batch size for both planners, beside the free choice",
		Intro:   "Forced: both planners use the micro-batch spp chose (parallel stages alone). The paper saw 1.12-1.40x forced and 1.25-1.61x free.",
		Columns: []string{"model", "batch", "micro-batch forced", "forced gpp/spp", "free gpp/spp"}}
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		g, err := Paper(name)
		if err != nil {
			return nil, err
		}
		c.Log("ablation: %s", name)
		batch := MemoryBatch(g, "v100", 32)
		free := Compare(g, "v100", 32, batch, 0, false)
		forced := Compare(g, "v100", 32, batch, free.SPP.MicroBatch, false)
		s.Rows = append(s.Rows, []string{name, fmt.Sprint(batch), fmt.Sprint(free.SPP.MicroBatch), fmt.Sprintf("%.3f", forced.Ratio()), fmt.Sprintf("%.3f", free.Ratio())})
	}
	return s, nil
}

// Controls is the paper's case study (2 branches, 8 GPUs) and the sequential
// Transformer, which graph pipelines should match.
func Controls(c Config) (*Section, error) {
	s := &Section{Name: "controls", Title: "The case study and the sequential control",
		Intro:   "Case study in the paper: 2 branches of 4 x [attention + 2 linear] on 8 GPUs, depth 4 instead of 8, micro-batch 4 instead of 2, +20%. The sequential Transformer (MMT's size) should give about 1.0.",
		Columns: planCols}
	cs, _ := Paper("case-study")
	c.Log("controls: case study")
	s.Rows = append(s.Rows, planRow(Compare(cs, "v100", 8, MemoryBatch(cs, "v100", 8), 0, false)))
	tr, _ := Paper("transformer")
	for _, d := range c.devices() {
		c.Log("controls: transformer on %d", d)
		s.Rows = append(s.Rows, planRow(Compare(tr, "v100", d, MemoryBatch(tr, "v100", d), 0, false)))
	}
	return s, nil
}

// OtherDevices repeats the comparison on a100 and h100.
func OtherDevices(c Config) (*Section, error) {
	s := &Section{Name: "devices", Title: "Beyond the paper: a100 and h100 (80 GB)", Columns: planCols}
	ds := []int{16, 32}
	if c.Quick {
		ds = []int{32}
	}
	for _, dev := range []string{"a100", "h100"} {
		for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
			g, _ := Paper(name)
			for _, d := range ds {
				c.Log("devices: %s on %d %s", name, d, dev)
				s.Rows = append(s.Rows, planRow(Compare(g, dev, d, MemoryBatch(g, dev, d), 0, false)))
			}
		}
	}
	return s, nil
}

// sweepPer is the batch sweep's samples per device (16 is the headline's).
func (c Config) sweepPer() []int64 {
	if c.Quick {
		return []int64{4, 16, 2048}
	}
	return []int64{4, 16, 64, 256, 1024, 2048}
}

// BatchSweep runs the paper's models at 32 v100 over global batches from 4
// to 2048 samples per device: what gpp gains depends on how many
// micro-batches an iteration has to fill a deep pipeline with. It returns
// the table and its rows; the chart of it heads the report (Headline).
func BatchSweep(c Config) (*Section, []Row, error) {
	s := &Section{Name: "batch-sweep", Title: "Batch sweep at 32 v100: gpp / spp against samples per device",
		Intro: "The table behind the chart at the top. A deeper pipeline needs more micro-batches to hide " +
			"its warm-up; with fewer samples per device, the shallower graph pipeline gains more. Every row is one search per planner, default schedule.",
		Columns: append(append([]string{}, planCols...), "samples per device")}
	var rows []Row
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		g, err := Paper(name)
		if err != nil {
			return nil, nil, err
		}
		for _, p := range c.sweepPer() {
			c.Log("batch sweep: %s, %d per device", name, p)
			r := Compare(g, "v100", 32, 32*p, 0, false)
			s.Rows = append(s.Rows, append(planRow(r), fmt.Sprint(p)))
			rows = append(rows, r)
		}
	}
	return s, rows, nil
}

// sweepChart draws the batch sweep: gpp/spp against samples per device, one
// line per model.
func sweepChart(c Config, rows []Row) *Chart {
	line := &chart.Line{Title: "gpp / spp at 32 v100 against the batch (simulated)", LogX: true, XTicks: intsToFloats(c.sweepPer())}
	line.Reference.Label, line.Reference.Y = "spp (1.0)", 1
	at := map[string]int{}
	for _, r := range rows {
		if _, ok := at[r.Model]; !ok {
			at[r.Model] = len(line.Series)
			line.Series = append(line.Series, chart.Series{Label: r.Model})
		}
		se := &line.Series[at[r.Model]]
		se.X, se.Y = append(se.X, float64(r.Batch)/float64(r.Devices)), append(se.Y, ratioOrNaN(r))
	}
	return lineChart("batch-sweep", line)
}

var headCols = []string{"model", "batch", "samples per device", "gpp samples/s", "spp samples/s", "gpp/spp", "gpp b, stages, depth", "spp b, stages, depth"}

func headRow(r Row) []string {
	return []string{r.Model, fmt.Sprint(r.Batch), fmt.Sprint(r.Batch / int64(r.Devices)), f(r.GPP.SamplesPerS), f(r.SPP.SamplesPerS),
		fmt.Sprintf("%.3f", r.Ratio()), plan3(r.GPP), plan3(r.SPP)}
}

// Headline is the report's opening: the batch sweep's chart, and gpp
// against spp at 32 v100 under two stated batch rules: 16 samples per
// device (the sweep's rows at 16), and each model's own default batch.
func Headline(c Config, sweep []Row) ([]*Section, error) {
	at16 := &Section{Name: "headline-16", Title: "gpp / spp at 32 v100, 16 samples per device",
		Intro: "Batch rule: 16 samples per device, 512 per iteration, for every model: the setting of the paper's Fig. 7 " +
			"(MMT at batch 128 on 8 GPUs). Simulated on v100 (4 per node, 16 GB), both planners on the default schedule (1f1b). " +
			"The chart above sweeps the batch from 4 to 2048 samples per device.",
		Columns: headCols, Chart: sweepChart(c, sweep)}
	for _, r := range sweep {
		if r.Batch == 16*int64(r.Devices) {
			at16.Rows = append(at16.Rows, headRow(r))
		}
	}
	def := &Section{Name: "headline-default", Title: "gpp / spp at 32 v100, each model's default batch", Columns: headCols}
	var rule []string
	for _, name := range []string{"mmt", "dlrm", "candle-uno"} {
		e, err := models.Lookup(name)
		if err != nil {
			return nil, err
		}
		g, err := e.Build(e.Default)
		if err != nil {
			return nil, err
		}
		c.Log("headline: %s at its default batch %d", name, e.Default.Batch)
		def.Rows = append(def.Rows, headRow(Compare(g, "v100", 32, e.Default.Batch, 0, false)))
		rule = append(rule, fmt.Sprintf("%s %d", name, e.Default.Batch))
	}
	def.Intro = "Batch rule: each model's own default batch (`graphpipe models list`): " + strings.Join(rule, ", ") +
		". Simulated on v100 (4 per node, 16 GB), both planners on the default schedule (1f1b)."
	return []*Section{at16, def}, nil
}

// Branches sweeps CANDLE-Uno's branch count at 16 v100.
func Branches(c Config) (*Section, error) {
	s := &Section{Name: "branches", Title: "Branch-count sweep: CANDLE-Uno at 16 v100", Columns: planCols}
	counts := []int{2, 4, 8, 16}
	if c.Quick {
		counts = []int{2, 8}
	}
	e, _ := models.Lookup("candle-uno")
	for _, n := range counts {
		cfg := e.Default
		cfg.Branches = int64(n)
		g, err := e.Build(cfg)
		if err != nil {
			return nil, err
		}
		c.Log("branches: %d", n)
		r := Compare(g, "v100", 16, MemoryBatch(g, "v100", 16), 0, false)
		r.Model = fmt.Sprintf("candle-uno, %d branches", n)
		s.Rows = append(s.Rows, planRow(r))
	}
	return s, nil
}

// Ideal sets each plan against total work over devices: the samples per
// second if every device ran at its best efficiency all the time.
func Ideal(rows []Row) *Section {
	s := &Section{Name: "ideal", Title: "Fraction of the ideal bound (total work / devices at the best efficiency)",
		Columns: []string{"model", "devices", "ideal samples/s", "gpp fraction", "spp fraction"}}
	for _, r := range rows {
		g, _ := Paper(r.Model)
		ideal := plan.IdealSamplesPerS(plan.Profiles[r.Device], "fp32", r.Devices, plan.FLOPsPerSample(g))
		s.Rows = append(s.Rows, []string{r.Model, fmt.Sprint(r.Devices), f(ideal), fmt.Sprintf("%.3f", r.GPP.SamplesPerS/ideal), fmt.Sprintf("%.3f", r.SPP.SamplesPerS/ideal)})
	}
	return s
}

// SearchTime times the planners on synthetic branchy graphs against the
// number of ops and of devices, with a fitted growth exponent.
func SearchTime(c Config) (*Section, error) {
	s := &Section{Name: "search-time", Title: "Search time on synthetic branchy graphs (v100, batch 256)",
		Columns: []string{"ops", "devices", "gpp s", "spp s", "spp-exact"}}
	shapes := [][2]int{{4, 25}, {8, 125}, {10, 1000}}
	devs := []int{4, 16, 64}
	if c.Quick {
		shapes, devs = shapes[:2], []int{4, 16}
	}
	line := &chart.Line{Title: "gpp search time on synthetic branchy graphs (v100, batch 256)", LogX: true, LogY: true}
	for _, d := range devs {
		series := chart.Series{Label: fmt.Sprintf("%d devices", d)}
		for _, sh := range shapes {
			g, err := models.Branchy(sh[0], sh[1], 1024)
			if err != nil {
				return nil, err
			}
			c.Log("search time: %d ops on %d devices", g.NumOps(), d)
			timeIt := func(strategy string) (float64, string) {
				start := time.Now()
				_, err := search.Search(g, search.Options{Device: plan.Profiles["v100"], Devices: d, Strategy: strategy, Batch: 256})
				secs := time.Since(start).Seconds()
				if err != nil {
					return secs, "stopped at its limit"
				}
				return secs, fmt.Sprintf("%.3f s", secs)
			}
			gpp, _ := timeIt("gpp")
			spp, _ := timeIt("spp")
			exact := "-"
			if g.NumOps() <= 200 {
				_, exact = timeIt("spp-exact")
			}
			s.Rows = append(s.Rows, []string{fmt.Sprint(g.NumOps()), fmt.Sprint(d), fmt.Sprintf("%.3f", gpp), fmt.Sprintf("%.3f", spp), exact})
			series.X, series.Y = append(series.X, float64(g.NumOps())), append(series.Y, gpp)
		}
		line.Series = append(line.Series, series)
		s.Notes = append(s.Notes, fmt.Sprintf("At %d devices gpp's time grows as ops^%.2f (least squares on log-log).", d, slope(series.X, series.Y)))
	}
	// a chain of fork-join blocks (Inception's shape): stems that fork
	// absorption may put in a branch's first stage, joins that join
	// absorption may put in its last
	blocks := []int{10, 40}
	if c.Quick {
		blocks = blocks[:1]
	}
	for _, n := range blocks {
		g, err := models.ForkJoin(n, 4, 256)
		if err != nil {
			return nil, err
		}
		for _, d := range []int{8, 32} {
			c.Log("search time: fork-join chain of %d blocks (%d ops) on %d devices", n, g.NumOps(), d)
			var secs [2]float64
			for i, strategy := range []string{"gpp", "spp"} {
				start := time.Now()
				if _, err := search.Search(g, search.Options{Device: plan.Profiles["v100"], Devices: d, Strategy: strategy}); err != nil {
					return nil, err
				}
				secs[i] = time.Since(start).Seconds()
			}
			s.Rows = append(s.Rows, []string{fmt.Sprintf("%d (fork-join chain, %d blocks)", g.NumOps(), n), fmt.Sprint(d), fmt.Sprintf("%.3f", secs[0]), fmt.Sprintf("%.3f", secs[1]), "-"})
		}
	}
	if !c.Quick {
		if err := manyDevices(c, s); err != nil {
			return nil, err
		}
	}
	s.Chart = lineChart("search-time", line)
	return s, nil
}

// manyDevices times the search of the paper's MMT, 16 samples per device, on
// device counts past the DP's groups (search.dpGroup: past 64 devices every
// stage takes whole groups).
func manyDevices(c Config, s *Section) error {
	e, err := models.Lookup("mmt")
	if err != nil {
		return err
	}
	g, err := e.Build(e.Default)
	if err != nil {
		return err
	}
	for _, d := range []int{64, 512, 4096} {
		c.Log("search time: the paper's MMT on %d devices", d)
		var secs [2]float64
		for i, strategy := range []string{"gpp", "spp"} {
			start := time.Now()
			if _, err := search.Search(g, search.Options{Device: plan.Profiles["v100"], Devices: d, Strategy: strategy, Batch: int64(16 * d)}); err != nil {
				return err
			}
			secs[i] = time.Since(start).Seconds()
		}
		s.Rows = append(s.Rows, []string{fmt.Sprintf("%d (the paper's MMT, batch %d)", g.NumOps(), 16*d), fmt.Sprint(d), fmt.Sprintf("%.3f", secs[0]), fmt.Sprintf("%.3f", secs[1]), "-"})
	}
	s.Notes = append(s.Notes, "Past 64 devices the planners count devices in groups, every stage on whole groups (the MMT rows at 512 and 4096 devices): "+
		"their tables grow with the square of the device count. Before groups, MMT on 512 v100 took 191 s and 7.6 GiB of search, and on 2048 ran out of this machine's memory.")
	return nil
}

// slope is the least-squares slope of log y against log x.
func slope(x, y []float64) float64 {
	var sx, sy, sxx, sxy float64
	n := float64(len(x))
	for i := range x {
		lx, ly := math.Log(x[i]), math.Log(y[i])
		sx, sy, sxx, sxy = sx+lx, sy+ly, sxx+lx*lx, sxy+lx*ly
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// predictedRow sets a real run's median iteration against the plan's
// prediction, priced as priced says.
func predictedRow(what, priced string, iter float64, plan *plan.Plan) []string {
	return []string{what + ": s/iteration measured vs simulated (" + priced + ")", fmt.Sprintf("%.4f", iter),
		fmt.Sprintf("%.4f", plan.Predicted.IterationS), fmt.Sprintf("%.3f", iter/plan.Predicted.IterationS)}
}

// realRuns trains g for real on 2 CPU workers under gpp and spp plans at
// micro-batch micro, priced by the built-in cpu profile and by op times
// measured in this run, and sets each run against its prediction; and the
// single process against a 1-device plan from the op times.
func realRuns(c Config, s *Section, label string, g *dag.Graph, micro int64, steps int, o stage.TrainOptions, strategies []string) error {
	c.Log("runtime: timing the ops of %s", label)
	times, err := OpTimesOf(g)
	if err != nil {
		return err
	}
	probed, err := ProbedCPU()
	if err != nil {
		return err
	}
	for _, priced := range []string{"built-in cpu profile", "op times"} {
		opt := search.Options{Device: plan.Profiles["cpu"], Devices: 2, MicroBatch: micro}
		if priced == "op times" {
			opt.OpTimes, opt.Device = times, probed
		}
		for _, strategy := range strategies {
			opt.Strategy = strategy
			plan, err := search.Search(g, opt)
			if err != nil {
				return err
			}
			c.Log("runtime: real CPU run, %s, %s, %s", label, strategy, priced)
			pipe, single, iter, err := CPURun(g, plan, steps, o)
			if err != nil {
				return err
			}
			what := fmt.Sprintf("real CPU run, %s, %s", label, strategy)
			if priced == "op times" {
				s.Rows = append(s.Rows, predictedRow(fmt.Sprintf("%s (%d stages)", what, len(plan.Stages)), priced, iter, plan))
				continue
			}
			s.Rows = append(s.Rows, []string{fmt.Sprintf("%s on 2 workers (%d stages) vs one process: samples/s", what, len(plan.Stages)), f(pipe), f(single), fmt.Sprintf("%.3f", pipe/single)},
				predictedRow(what, priced, iter, plan))
		}
	}
	one, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: 1, MicroBatch: micro, OpTimes: times})
	if err != nil {
		return err
	}
	iter, err := SingleIteration(g, int(micro), steps, o)
	if err != nil {
		return err
	}
	s.Rows = append(s.Rows, predictedRow(fmt.Sprintf("one process, %s", label), "op times, 1 device", iter, one))
	return nil
}

// caseStudyTimeline runs the paper's case study (2 branches) on 8 emulated
// v100 under its gpp plan, sets the run against the simulation, and draws
// both timelines, the simulated one above the measured.
func caseStudyTimeline(c Config, s *Section) error {
	g, err := Paper("case-study")
	if err != nil {
		return err
	}
	plan, err := search.Search(g, search.Options{Device: plan.Profiles["v100"], Devices: 8})
	if err != nil {
		return err
	}
	c.Log("runtime: emulated case study on 8 v100, gpp, and its timeline")
	iter, last, err := EmulatedTimeline(g, plan, 4)
	if err != nil {
		return err
	}
	s.Rows = append(s.Rows, []string{"emulated case study, 8 v100, gpp: s/iteration measured vs simulated (the timelines above)",
		fmt.Sprintf("%.4f", iter), fmt.Sprintf("%.4f", plan.Predicted.IterationS), fmt.Sprintf("%.3f", iter/plan.Predicted.IterationS)})
	s.Chart, err = timelineChart(plan, last)
	return err
}

// timelineChart draws a plan's simulated iteration above an emulated run's
// last one.
func timelineChart(plan *plan.Plan, measured *microbatch.Result) (*Chart, error) {
	sim, err := plan.Simulate()
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("%s, %s plan on %d %s", plan.Model.Name, plan.Strategy, plan.Devices, plan.Device.Name)
	rows := plan.StageNames()
	ts := []chart.Timeline{{Title: "simulated: " + what, Rows: rows, Result: sim},
		{Title: "measured, EMULATED (each worker sleeps its planned times): " + what, Rows: rows, Result: measured}}
	return &Chart{Name: "case-study-timeline", Title: "the timeline of " + what + ", simulated and measured",
		Draw: func(f chart.Format) ([]byte, error) { return chart.Timelines(f, ts...) }}, nil
}

// Runtime measures the runtime: emulated paper plans against the simulator,
// a real CPU run against the single process, links against raw NATS.
func Runtime(c Config) (*Section, error) {
	s := &Section{Name: "runtime", Title: "The runtime, measured on this machine",
		Columns: []string{"measurement", "figure", "baseline", "ratio"},
		Notes: []string{"Emulated runs start one worker per device in this process (32 on 2 cores at 32 v100) and sleep each action's planned " +
			"time. The rows with every duration 4x as long tell a fixed cost per action on this machine (it weighs 4 times less there) from " +
			"a disagreement between the runtime and the simulator (which would not shrink).",
			"Real CPU runs are priced two ways: by the built-in cpu profile (FLOPs and bytes at a rate measured with gonum's sgemm), and by op times " +
				"measured in this run (every op of the model timed through the stage executor at power-of-two micro-batches, as graphpipe profile --model " +
				"does, with the machine to itself) with links probed in this run (as graphpipe profile --device cpu does); the second plan may differ from the first. Two workers in one process share this machine's 2 cores " +
				"with the NATS server; the op times were taken alone."}}
	g, _ := Paper("mmt")
	ds := []int{16, 32}
	if c.Quick {
		ds = []int{16}
	}
	for _, d := range ds {
		var measured, simulated [2]float64
		for i, strategy := range []string{"gpp", "spp"} {
			c.Log("runtime: emulated mmt on %d v100, %s", d, strategy)
			plan, err := search.Search(g, search.Options{Device: plan.Profiles["v100"], Devices: d, Strategy: strategy})
			if err != nil {
				return nil, err
			}
			if measured[i], err = Emulated(g, plan, 4); err != nil {
				return nil, err
			}
			simulated[i] = plan.Predicted.IterationS
			s.Rows = append(s.Rows, []string{fmt.Sprintf("emulated mmt, %d v100, %s: s/iteration measured vs simulated", d, strategy),
				fmt.Sprintf("%.4f", measured[i]), fmt.Sprintf("%.4f", simulated[i]), fmt.Sprintf("%.3f", measured[i]/simulated[i])})
		}
		s.Rows = append(s.Rows, []string{fmt.Sprintf("emulated mmt, %d v100: gpp/spp measured vs simulated", d),
			fmt.Sprintf("%.3f", measured[1]/measured[0]), fmt.Sprintf("%.3f", simulated[1]/simulated[0]), fmt.Sprintf("%.3f", (measured[1]/measured[0])/(simulated[1]/simulated[0]))})
	}
	if !c.Quick { // how much of the gap at 32 is a fixed cost per action on this machine
		for _, strategy := range []string{"gpp", "spp"} {
			plan, err := search.Search(g, search.Options{Device: plan.Profiles["v100"], Devices: 32, Strategy: strategy})
			if err != nil {
				return nil, err
			}
			c.Log("runtime: emulated mmt on 32 v100, %s, 4x slower", strategy)
			slow := plan.Scaled(4)
			m, err := Emulated(g, slow, 4)
			if err != nil {
				return nil, err
			}
			s.Rows = append(s.Rows, []string{fmt.Sprintf("emulated mmt, 32 v100, %s, every duration 4x: s/iteration measured vs simulated", strategy),
				fmt.Sprintf("%.4f", m), fmt.Sprintf("%.4f", slow.Predicted.IterationS), fmt.Sprintf("%.3f", m/slow.Predicted.IterationS)})
		}
	}
	if err := caseStudyTimeline(c, s); err != nil {
		return nil, err
	}
	two, _ := TwoBranch()
	if err := realRuns(c, s, "2-branch model (2 x 4 linear, width 512)", two, 32, 12, stage.TrainOptions{Optimizer: "sgd", LR: 0.01}, []string{"gpp"}); err != nil {
		return nil, err
	}
	for _, name := range []string{"mmt", "case-study"} {
		e, _ := models.Lookup(name)
		g, _ := e.Build(e.Small)
		if err := realRuns(c, s, name+" small preset", g, 4, 20, stage.TrainOptions{Optimizer: "adam", LR: 1e-3}, []string{"gpp", "spp"}); err != nil {
			return nil, err
		}
	}
	sizes := []int{64 << 10, 1 << 20, 8 << 20}
	if c.Quick {
		sizes = []int{1 << 20}
	}
	for _, size := range sizes {
		c.Log("runtime: transport %d KiB", size>>10)
		links, raw, err := profile.Transport(size)
		if err != nil {
			return nil, err
		}
		s.Rows = append(s.Rows, []string{fmt.Sprintf("links vs raw NATS publish→subscribe, %d KiB messages: MiB/s", size>>10),
			f(links / (1 << 20)), f(raw / (1 << 20)), fmt.Sprintf("%.3f", links/raw)})
	}
	return s, nil
}

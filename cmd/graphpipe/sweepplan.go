package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/sweep"
)

// sweepPlan is a sweep planned: each job's plans by device count, the
// scheduling problem they make, the schedule and the baselines.
type sweepPlan struct {
	l                 *loaded
	device            string
	devices, perNode  int
	plans             []map[int]*plan.Plan // per job, by device count: its choices' plans
	problem           sweep.Problem
	sched             *sweep.Schedule
	oneAtATime, equal *sweep.Schedule
	lower             float64
	planS             float64 // seconds spent planning: the searches and the schedule
}

// plan searches every job on every device count worth trying and
// schedules the sweep.
func (f *sweepFlags) plan(l *loaded) (*sweepPlan, error) {
	start := time.Now()
	base, err := f.baseOptions()
	if err != nil {
		return nil, err
	}
	if base.Devices < 1 || base.Devices > sweep.MaxDevices { // before the counts, which are of no more
		return nil, usagef("--devices: must be between 1 and %d, got %d", sweep.MaxDevices, base.Devices)
	}
	sp := &sweepPlan{l: l, device: base.Device.Name, devices: base.Devices, perNode: min(base.DevicesPerNode, base.Devices)}
	base.Device = onBusyNode(base.Device, sp.perNode)
	sp.problem = sweep.Problem{Devices: sp.devices, PerNode: sp.perNode}
	pr := &pricer{base: base, counts: sweep.Counts(sp.devices, sp.perNode), searched: map[priceKey]*plan.Plan{}, opTimes: map[string]*plan.OpTimes{}, f: f}
	for _, j := range l.jobs {
		plans, choices, err := pr.price(l.path, j)
		if err != nil {
			return nil, err
		}
		job := sweep.Job{Name: j.spec.Name, Choices: choices}
		for _, a := range j.spec.After {
			job.After = append(job.After, l.file.Index(a))
		}
		sp.plans = append(sp.plans, plans)
		sp.problem.Jobs = append(sp.problem.Jobs, job)
	}
	if sp.sched, err = sweep.Solve(sp.problem); err != nil {
		return nil, err // the problem is the sweep file's, checked: a bug
	}
	sp.oneAtATime, sp.equal, sp.lower = sweep.OneAtATime(sp.problem), sweep.EqualSplit(sp.problem), sweep.LowerBound(sp.problem)
	sp.planS = time.Since(start).Seconds()
	return sp, nil
}

// baseOptions are the search's options the flags give, on devices of one
// kind: a cluster file of one kind is its devices.
func (f *sweepFlags) baseOptions() (search.Options, error) {
	if f.train {
		f.search.flushOnly = twoVersionsWhy(f.backend, false)
	}
	o, err := f.search.options()
	if err != nil || o.Cluster == nil {
		return o, err
	}
	if n := len(o.Cluster.Kinds); n > 1 {
		return o, usagef("--cluster %s: a sweep plans devices of one kind, and it has %d", f.search.cluster, n)
	}
	k := o.Cluster.Kinds[0]
	o.Device, o.Devices, o.DevicesPerNode = k.Device, k.Devices, k.DevicesPerNode
	if o.MemoryLimit == 0 {
		o.MemoryLimit = k.MemoryLimit
	}
	o.Cluster = nil
	return o, nil
}

// onBusyNode is d as a sweep's job meets it where the profile measured how
// much longer an op takes with k workers sharing a host's cores (a CPU's
// profile, or GPUs time-sliced among workers): a sweep keeps every device
// of a node busy with some job's workers, so each job is priced with the
// node's slowdown with all of its perNode devices busy, whatever its own
// count. A profile that measured no sharing (a GPU's) is d as it is.
func onBusyNode(d plan.Device, perNode int) plan.Device {
	if d.CoreSlowdown.Len() == 0 {
		return d
	}
	busy := make([]float64, min(perNode, plan.MaxCoreSlowdown))
	for i := range busy {
		busy[i] = d.Slowdown(perNode)
	}
	d.CoreSlowdown = plan.NewSlowdowns(busy...)
	return d
}

// pricer searches the jobs' plans, once for each distinct search.
type pricer struct {
	f        *sweepFlags
	base     search.Options
	counts   []int
	searched map[priceKey]*plan.Plan // nil: no plan fits
	opTimes  map[string]*plan.OpTimes
}

// priceKey is what makes two jobs' searches the same.
type priceKey struct {
	model, opTimes         string
	seed                   int64
	reseeded               bool
	batch, micro, optBytes int64
	schedule, precision    string
	devices                int
}

// price is job j's plan on each device count it runs faster on than on
// fewer, and its choices: steps × the plan's iteration time. A count
// whose best plan uses fewer devices is no choice of its own (the fewer
// are searched too).
func (pr *pricer) price(sweepPath string, j *sweepJob) (map[int]*plan.Plan, []sweep.Choice, error) {
	o, err := pr.options(sweepPath, j)
	if err != nil {
		return nil, nil, err
	}
	plans := map[int]*plan.Plan{}
	var choices []sweep.Choice
	var lastNoPlan *search.NoPlanError
	for _, k := range pr.counts {
		p, err := pr.search(j, o, k)
		var np *search.NoPlanError
		var oe *search.OptionError
		switch {
		case errors.As(err, &np):
			lastNoPlan = np
			continue
		case errors.As(err, &oe):
			return nil, nil, inputf("%s: job %q: %v", sweepPath, j.spec.Name, oe)
		case err != nil:
			return nil, nil, fmt.Errorf("%s: job %q: %w", sweepPath, j.spec.Name, err)
		}
		if devicesUsed(p) != k {
			continue
		}
		plans[k] = p
		choices = append(choices, sweep.Choice{Devices: k, Seconds: float64(j.spec.Steps) * p.Predicted.IterationS})
	}
	if len(choices) == 0 {
		msg := fmt.Sprintf("%s: job %q: no plan fits on any of %v devices", sweepPath, j.spec.Name, pr.counts)
		if lastNoPlan != nil && lastNoPlan.Bound {
			return nil, nil, inputf("%s: %v", msg, lastNoPlan)
		}
		return nil, nil, fmt.Errorf("%s: %v", msg, lastNoPlan)
	}
	return plans, sweep.Prune(choices), nil
}

// options are job j's search options but the device count: the flags'
// where the job says nothing.
func (pr *pricer) options(sweepPath string, j *sweepJob) (search.Options, error) {
	o := pr.base
	s := j.spec
	o.Batch, o.MicroBatch = cmp.Or(s.Batch, o.Batch), cmp.Or(s.MicroBatch, o.MicroBatch)
	o.Schedule, o.Precision = cmp.Or(s.Schedule, o.Schedule), cmp.Or(s.Precision, o.Precision)
	if pr.f.train && pr.f.backend == "cpu" && o.Precision != "" && o.Precision != "fp32" {
		// its run would refuse it (deviceFlags.checkBackend): refused
		// before any job trains, not when it starts
		return o, inputf("%s: job %q: precision %s: the cpu backend computes in float32 only; %s needs --backend cuda (or cuda-emulator)", sweepPath, s.Name, o.Precision, o.Precision)
	}
	if o.OptimizerBytes = stateBytes(j.train); o.OptimizerBytes == 0 {
		o.OptimizerBytes = search.NoOptimizerState
	}
	if j.opTimes == "" {
		return o, nil
	}
	if t, ok := pr.opTimes[j.opTimes]; ok {
		o.OpTimes = t
		return o, nil
	}
	data, _, err := readInput(j.opTimes, nil)
	if err != nil {
		return o, inputf("%s: job %q: op_times: %v", sweepPath, s.Name, err)
	}
	if o.OpTimes, err = plan.DecodeOpTimes(data); err != nil {
		return o, inputf("%s: job %q: op_times %s: %v", sweepPath, s.Name, j.opTimes, err)
	}
	pr.opTimes[j.opTimes] = o.OpTimes
	return o, nil
}

// search is job j's plan on k devices under o, searched once for every
// job that asks the same.
func (pr *pricer) search(j *sweepJob, o search.Options, k int) (*plan.Plan, error) {
	key := priceKey{model: j.modelPath, opTimes: j.opTimes, reseeded: j.reseeded, batch: o.Batch, micro: o.MicroBatch,
		optBytes: o.OptimizerBytes, schedule: o.Schedule, precision: o.Precision, devices: k}
	if j.reseeded {
		key.seed = *j.spec.Seed
	}
	if p, ok := pr.searched[key]; ok {
		if p == nil {
			return nil, &search.NoPlanError{Reason: "no plan fits (as for an earlier job)"}
		}
		return p, nil
	}
	o.Devices = k
	p, err := search.Search(j.g, o)
	var np *search.NoPlanError
	if err == nil || errors.As(err, &np) {
		pr.searched[key] = p
	}
	return p, err
}

// devicesUsed is how many devices p's stages take.
func devicesUsed(p *plan.Plan) int {
	seen := map[int]bool{}
	for _, s := range p.Stages {
		for _, d := range s.Devices {
			seen[d] = true
		}
	}
	return len(seen)
}

// iteration is job j's predicted iteration time on devices devices.
func (sp *sweepPlan) iteration(j, devices int) float64 {
	return sp.plans[j][devices].Predicted.IterationS
}

// sweepSummary is `graphpipe sweep --json`'s object.
type sweepSummary struct {
	Format         string  `json:"format"` // sweepFormat
	Sweep          string  `json:"sweep"`
	Device         string  `json:"device"`
	Devices        int     `json:"devices"`
	DevicesPerNode int     `json:"devices_per_node"`
	MakespanS      float64 `json:"makespan_s"`
	OneAtATimeS    float64 `json:"one_at_a_time_s"`
	EqualSplitS    float64 `json:"equal_split_s"`
	// LowerBoundS is a makespan no schedule of these choices beats
	// (sweep.LowerBound): how far the schedule can be from the best.
	LowerBoundS float64       `json:"lower_bound_s"`
	PeakDevices int           `json:"peak_devices"`
	PlanS       float64       `json:"plan_s"`
	Jobs        []sweepJobOut `json:"jobs"`
	// with --run: the last job's end, from the sweep's start; how many
	// times the jobs not started were planned again
	MeasuredMakespanS *float64 `json:"measured_makespan_s,omitempty"`
	Replans           *int     `json:"replans,omitempty"`
}

// sweepJobOut is a job in sweep --json: where the schedule puts it, what
// each device count would take, and with --run how it ran.
type sweepJobOut struct {
	Name       string      `json:"name"`
	Model      string      `json:"model"`
	Steps      int         `json:"steps"`
	Devices    int         `json:"devices"`
	DeviceIDs  []int       `json:"device_ids"`
	StartS     float64     `json:"start_s"`
	EndS       float64     `json:"end_s"`
	IterationS float64     `json:"iteration_s"`
	After      []string    `json:"after,omitempty"`
	Choices    []choiceOut `json:"choices"`
	Measured   *ranOut     `json:"measured,omitempty"`
}

// choiceOut is a device count a job may run on and its predicted time.
type choiceOut struct {
	Devices    int     `json:"devices"`
	IterationS float64 `json:"iteration_s"`
	Seconds    float64 `json:"seconds"`
}

// ranOut is how a job ran (--run): its state (ended, failed, skipped), the
// devices it ran on, its start and end from the sweep's start, where its
// run --json is, and why it failed.
type ranOut struct {
	State     string  `json:"state"`
	Devices   int     `json:"devices"`
	DeviceIDs []int   `json:"device_ids"`
	StartS    float64 `json:"start_s"`
	EndS      float64 `json:"end_s"`
	Run       string  `json:"run,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// summary is the sweep's JSON object, planned (and ran, with --run).
func (sp *sweepPlan) summary(ran *sweepRan) sweepSummary {
	s := sweepSummary{Format: sweepFormat, Sweep: sp.l.path, Device: sp.device, Devices: sp.devices, DevicesPerNode: sp.perNode,
		MakespanS: sp.sched.Makespan, OneAtATimeS: sp.oneAtATime.Makespan, EqualSplitS: sp.equal.Makespan, LowerBoundS: sp.lower,
		PeakDevices: sp.sched.Peak(), PlanS: sp.planS}
	for i, j := range sp.l.jobs {
		sl := sp.sched.Slots[i]
		out := sweepJobOut{Name: j.spec.Name, Model: j.spec.Model, Steps: j.spec.Steps, Devices: sl.Devices, DeviceIDs: sl.DeviceIDs(),
			StartS: sl.Start, EndS: sl.End, IterationS: sp.iteration(i, sl.Devices), After: j.spec.After}
		for _, c := range sp.problem.Jobs[i].Choices {
			out.Choices = append(out.Choices, choiceOut{c.Devices, sp.iteration(i, c.Devices), c.Seconds})
		}
		if ran != nil {
			out.Measured = ran.job(i)
		}
		s.Jobs = append(s.Jobs, out)
	}
	if ran != nil {
		s.MeasuredMakespanS, s.Replans = &ran.res.Makespan, &ran.res.Replans
	}
	return s
}

// print prints the sweep's schedule (and how it ran), or its JSON.
func (f *sweepFlags) print(cmd *cobra.Command, sp *sweepPlan, ran *sweepRan) error {
	w := cmd.OutOrStdout()
	s := sp.summary(ran)
	if f.asJSON {
		return json.NewEncoder(w).Encode(s)
	}
	printSweep(w, s)
	return nil
}

// printSweep writes the schedule as a table, and the baselines beside it.
func printSweep(w io.Writer, s sweepSummary) {
	fmt.Fprintf(w, "sweep       %s: %d jobs on %d × %s (%d per node), planned in %.3g s\n", s.Sweep, len(s.Jobs), s.Devices, s.Device, s.DevicesPerNode, s.PlanS)
	fmt.Fprintf(w, "makespan    %s; one job at a time %s (%.2f×); equal split %s (%.2f×); lower bound %s\n",
		seconds(s.MakespanS), seconds(s.OneAtATimeS), s.OneAtATimeS/s.MakespanS, seconds(s.EqualSplitS), s.EqualSplitS/s.MakespanS, seconds(s.LowerBoundS))
	if s.MeasuredMakespanS != nil {
		fmt.Fprintf(w, "measured    %s (%.3f× the plan), %d re-plan(s)\n", seconds(*s.MeasuredMakespanS), *s.MeasuredMakespanS/s.MakespanS, *s.Replans)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "job\tdevices\tids\tstart\tend\titeration\tsteps\tafter\tran")
	for _, j := range s.Jobs {
		ranWords := ""
		if m := j.Measured; m != nil {
			ranWords = fmt.Sprintf("%s on %s, %s to %s", m.State, plan.DeviceList(m.DeviceIDs), seconds(m.StartS), seconds(m.EndS))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%.4g s\t%d\t%s\t%s\n", j.Name, j.Devices, plan.DeviceList(j.DeviceIDs), seconds(j.StartS), seconds(j.EndS),
			j.IterationS, j.Steps, strings.Join(j.After, ","), ranWords)
	}
	tw.Flush()
}

// seconds writes a duration in seconds, to four figures.
func seconds(s float64) string { return fmt.Sprintf("%.4g s", s) }

// chartFormat is --chart's format, or the usage error saying why not.
func chartFormat(path string) (chart.Format, error) {
	f, err := chart.FormatOf(path)
	if err != nil {
		return "", usagef("--chart %v", err)
	}
	return f, nil
}

// drawChart draws --chart: the schedule, and how the sweep ran.
func (f *sweepFlags) drawChart(cmd *cobra.Command, sp *sweepPlan, ran *sweepRan) error {
	if f.chart == "" {
		return nil
	}
	data, err := sweepChart(sp, ran, f.chart)
	if err != nil {
		return err
	}
	return writeOutput(cmd, "--chart", f.chart, data)
}

// sweepChart draws the sweep's Gantt charts in path's format.
func sweepChart(sp *sweepPlan, ran *sweepRan, path string) ([]byte, error) {
	format, err := chartFormat(path)
	if err != nil {
		return nil, err
	}
	planned := chart.Gantt{Title: fmt.Sprintf("%s planned on %d %s: %s (one at a time %s)", sp.l.path, sp.devices, sp.device, seconds(sp.sched.Makespan), seconds(sp.oneAtATime.Makespan)), Devices: sp.devices}
	for i, sl := range sp.sched.Slots {
		planned.Bars = append(planned.Bars, chart.Bar{Label: sp.l.jobs[i].spec.Name, First: sl.First, Devices: sl.Devices, Start: sl.Start, End: sl.End})
	}
	gs := []chart.Gantt{planned}
	if ran != nil {
		g := chart.Gantt{Title: fmt.Sprintf("as it ran: %s, %d re-plan(s)", seconds(ran.res.Makespan), ran.res.Replans), Devices: sp.devices}
		for i, sl := range ran.res.Ran {
			if ran.res.States[i] == sweep.Ended || ran.res.States[i] == sweep.Failed {
				g.Bars = append(g.Bars, chart.Bar{Label: sp.l.jobs[i].spec.Name, First: sl.First, Devices: sl.Devices, Start: sl.Start, End: math.Max(sl.End, sl.Start)})
			}
		}
		gs = append(gs, g)
	}
	return chart.Gantts(format, gs...)
}

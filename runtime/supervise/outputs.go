package supervise

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/google/pprof/profile"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/stage"
)

// OutputError is an output of a run that could not be written: Field
// names it in Outputs ("Dump", "Trace", "Timeline", "Profile"), Op what
// failed ("mkdir", "write", "draw").
type OutputError struct {
	Op, Field, Path string
	Err             error
}

func (e *OutputError) Error() string {
	return fmt.Sprintf("%s %s: %s: %v", e.Field, e.Path, e.Op, e.Err)
}
func (e *OutputError) Unwrap() error { return e.Err }

// write writes every output o names, for job's result res; initial is the
// run's --init values (nil: the model's seeded initialisation).
func (o *Outputs) write(j *Job, res *runtime.Result, initial *runtime.Checkpoint) error {
	if err := o.writeTrace(j.Plan, res, j.Options.Emulate); err != nil {
		return err
	}
	if o.Profile != "" {
		b, err := Profile(res)
		if err != nil {
			return err
		}
		if err := writeOutput("Profile", o.Profile, b); err != nil {
			return err
		}
	}
	if o.Dump == "" {
		return nil
	}
	var init map[string]*stage.Value[float32]
	if initial != nil {
		init = initial.Params
	}
	return dumpRun(o.Dump, j.Graph, j.Plan, res, j.Steps, init, o.DumpData)
}

// writeTrace writes the last iteration's measured timeline as Chrome trace
// JSON (in the shape of graphpipe sim --trace) and as a chart, each when
// named.
func (o *Outputs) writeTrace(plan *plan.Plan, res *runtime.Result, emulated bool) error {
	if o.Trace == "" && o.Timeline == "" {
		return nil
	}
	r, names := res.Timeline(plan), plan.StageNames()
	title := "measured: " + PlanTitle(plan)
	if emulated {
		title = "measured, EMULATED " + plan.Device.Name + ": " + PlanTitle(plan)
		for s := range names {
			names[s] += " EMULATED " + plan.Device.Name
		}
	}
	if o.Trace != "" {
		if err := writeOutput("Trace", o.Trace, microbatch.Trace(r, len(plan.Stages), names)); err != nil {
			return err
		}
	}
	if o.Timeline == "" {
		return nil
	}
	format, err := chart.FormatOf(o.Timeline)
	if err != nil {
		return &OutputError{Op: "draw", Field: "Timeline", Path: o.Timeline, Err: err}
	}
	pic, err := chart.Timelines(format, chart.Timeline{Title: title, Rows: plan.StageNames(), Result: r})
	if err != nil {
		return &OutputError{Op: "draw", Field: "Timeline", Path: o.Timeline, Err: err}
	}
	return writeOutput("Timeline", o.Timeline, pic)
}

// PlanTitle names a plan in a chart's or a trace's title.
func PlanTitle(p *plan.Plan) string {
	return fmt.Sprintf("%s, %s plan on %d %s, %s", p.Model.Name, p.Strategy, p.Devices, p.Device.Name, p.Schedule)
}

func writeOutput(field, path string, data []byte) error {
	if err := WriteFileAtomic(path, data); err != nil {
		return &OutputError{Op: "write", Field: field, Path: path, Err: err}
	}
	return nil
}

// Profile is per-op time as a pprof profile: each sample is one op's forward
// or backward time, under a frame for its stage.
func Profile(res *runtime.Result) ([]byte, error) {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "time", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "time", Unit: "nanoseconds"},
		Period:     1,
	}
	frame := func(name string) *profile.Location {
		f := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name, SystemName: name}
		p.Function = append(p.Function, f)
		l := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f}}}
		p.Location = append(p.Location, l)
		return l
	}
	for s, ops := range res.Ops {
		stageLoc := frame(fmt.Sprintf("stage %d", s))
		names := make([]string, 0, len(ops))
		for name := range ops {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			for pass, label := range []string{"forward", "backward"} {
				ns := int64(ops[name][pass] * 1e9)
				p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{frame(name + " " + label), stageLoc}, Value: []int64{ns}})
			}
		}
	}
	if err := p.CheckValid(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

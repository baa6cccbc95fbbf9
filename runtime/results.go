package runtime

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/pprof/profile"

	"github.com/graphpipe/graphpipe/chart"
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
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
func (o *Outputs) write(j *Job, res *Result, initial *Checkpoint) error {
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
func (o *Outputs) writeTrace(plan *plan.Plan, res *Result, emulated bool) error {
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
func Profile(res *Result) ([]byte, error) {
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

// StageTime sets one stage's measured compute per micro-batch (the mean
// over the last iteration's actions of its replica 0) beside the plan's.
type StageTime struct {
	Stage             int     `json:"stage"`
	PredictedForward  float64 `json:"predicted_forward_s"`
	MeasuredForward   float64 `json:"measured_forward_s"`
	PredictedBackward float64 `json:"predicted_backward_s"` // input and weight gradients
	MeasuredBackward  float64 `json:"measured_backward_s"`
}

// StageTimes compares each stage's planned and measured compute: where a
// run's iteration misses its prediction, this says which stage and pass.
// Stages without a timeline (none reported) are left out.
func StageTimes(plan *plan.Plan, res *Result) []StageTime {
	var out []StageTime
	for s, st := range plan.Stages {
		if s >= len(res.Events) || len(res.Events[s]) == 0 {
			continue
		}
		var f, b float64
		var nf int
		for _, e := range res.Events[s] {
			switch microbatch.Kind(e.Kind) {
			case microbatch.Forward:
				f += e.End - e.Start
				nf++
			case microbatch.Backward, microbatch.Weight:
				b += e.End - e.Start
			}
		}
		if nf == 0 {
			continue
		}
		out = append(out, StageTime{Stage: s, PredictedForward: st.ForwardS, MeasuredForward: f / float64(nf),
			PredictedBackward: st.BackwardS + st.WeightS, MeasuredBackward: b / float64(nf)})
	}
	return out
}

// dumpRun writes what graphpipe train --dump writes: initial parameters and
// data (both reproducible from the model's seed), and the workers' final
// parameters and the losses.
func dumpRun(dir string, g *dag.Graph, plan *plan.Plan, res *Result, steps int, init map[string]*stage.Value[float32], src stage.Source) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &OutputError{Op: "mkdir", Field: "Dump", Path: dir, Err: err}
	}
	all := make([]int, g.NumOps())
	for i := range all {
		all[i] = i
	}
	ex, err := stage.NewExecutor(g, all, g.Seed())
	if err != nil {
		return err
	}
	if init != nil {
		ex.LoadState(init)
	}
	if err := WriteParams(filepath.Join(dir, "init.safetensors"), ex); err != nil {
		return err
	}
	if src == nil {
		ds, err := stage.NewDataset(g)
		if err != nil {
			return err
		}
		src = ds
	}
	var data []tensor.Named
	for s := 0; s < steps; s++ {
		batch, err := src.Inputs(s, int(plan.BatchSize), nil)
		if err != nil {
			return err
		}
		for name, v := range batch {
			data = append(data, tensor.Named{Name: fmt.Sprintf("%d/%s", s, name), Shape: v.Shape, F32: v.Data, I32: v.Ints})
		}
	}
	state := ex.State()
	for name, v := range res.Params {
		copy(state[name].Data, v.Data)
	}
	return WriteDump(dir, ex, data, res.Losses)
}

// WriteParams writes the executor's parameters and buffers by name.
func WriteParams(path string, ex *stage.Executor) error {
	var entries []tensor.Named
	state := ex.State()
	for _, name := range append(ex.ParamNames(), ex.BufferNames()...) {
		v := state[name]
		entries = append(entries, tensor.Named{Name: name, Shape: v.Shape, F32: append([]float32(nil), v.Data...)})
	}
	b, err := tensor.EncodeSafetensors(entries, nil)
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, b)
}

// WriteDump writes a dump's data, final parameters and losses into dir
// (graphpipe train --dump and run --dump alike).
func WriteDump(dir string, ex *stage.Executor, data []tensor.Named, losses []float64) error {
	b, err := tensor.EncodeSafetensors(data, nil)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, "data.safetensors"), b); err != nil {
		return err
	}
	if err := WriteParams(filepath.Join(dir, "final.safetensors"), ex); err != nil {
		return err
	}
	l, _ := json.MarshalIndent(jsonLosses(losses), "", " ")
	return WriteFileAtomic(filepath.Join(dir, "losses.json"), append(l, '\n'))
}

// jsonLosses encodes a loss that is not finite as null.
func jsonLosses(losses []float64) []*float64 {
	out := make([]*float64, len(losses))
	for i, v := range losses {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[i] = &losses[i]
		}
	}
	return out
}

// WriteFileAtomic writes through a temporary file beside path, synced and
// renamed into place.
func WriteFileAtomic(path string, data []byte) error {
	tmp, err := CreateTemp(path)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// CreateTemp creates a new temporary file beside path, to be renamed onto
// it. Unlike os.CreateTemp (0600), it is created 0666 less the umask, as
// os.Create and the checkpoints do: what is renamed into place is readable as
// any other file the user writes.
func CreateTemp(path string) (*os.File, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	for try := 0; ; try++ {
		var b [6]byte
		rand.Read(b[:])
		f, err := os.OpenFile(filepath.Join(dir, "."+base+".tmp"+hex.EncodeToString(b[:])), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		return f, err
	}
}

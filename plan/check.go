package plan

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/partition"
)

// PlanError is one thing wrong with a plan: the stage it is about (-1: the
// plan as a whole), the field at fault (as the plan file spells it) and what
// is wrong, as dag.Error is for a model.
type PlanError struct {
	Stage int
	Field string
	Msg   string
	Err   error // the typed error it stands for, if any (a *ModelMismatchError)
}

func (e *PlanError) Error() string {
	if e.Stage < 0 {
		return e.Field + ": " + e.Msg
	}
	return fmt.Sprintf("stage %d: %s: %s", e.Stage, e.Field, e.Msg)
}

func (e *PlanError) Unwrap() error { return e.Err }

func planErr(stage int, field, format string, args ...any) error {
	return &PlanError{Stage: stage, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ModelMismatchError is a plan given a model it was not made for: the
// model hash the plan names (Plan.Model.SHA256) is not the model's
// (dag.ModelHash). Op names what refused it: "plan" (LoadPlan), "job"
// (runtime.Job.Validate), "coordinate", "run local".
type ModelMismatchError struct {
	Op        string
	PlanHash  string // the hash the plan names
	ModelHash string // the hash of the model it was given
}

func (e *ModelMismatchError) Error() string { return e.Op + ": " + e.Reason() }

// Reason is what is wrong, without the op: the message of the PlanError or
// runtime.JobError that carries it.
func (e *ModelMismatchError) Reason() string {
	return fmt.Sprintf("made for another model (the plan says hash %.12s, this model's is %.12s)", e.PlanHash, e.ModelHash)
}

// CheckModelHash is the one check that p was made for model g, by hash,
// wherever a plan meets a model (LoadPlan, a job, a run): nil, or a
// *ModelMismatchError naming op. The model's hash is computed once per
// graph (dag.ModelHash).
func (p *Plan) CheckModelHash(op string, g *dag.Graph) error {
	if h := dag.ModelHash(g); h != p.Model.SHA256 {
		return &ModelMismatchError{Op: op, PlanHash: p.Model.SHA256, ModelHash: h}
	}
	return nil
}

// LoadPlan decodes a plan file (DecodePlan) and, when g is not nil, checks
// it against the model it was made for (CheckModel). run, sim, explain and
// the workers all read plans through it.
func LoadPlan(data []byte, g *dag.Graph) (*Plan, error) {
	if g == nil {
		return DecodePlan(data)
	}
	p, err := decodePlan(data)
	if err != nil {
		return nil, err
	}
	if err := p.CheckModel(g); err != nil {
		return nil, err
	}
	return p, nil
}

// validate checks what a plan says of itself, without its model: the
// numbers agree, every stored time and size is finite and not negative,
// devices are within the plan's count and search's limit and no two stages
// share one, every stage's micro-batch per device follows from the plan's
// micro-batch and the stage's replicas, no op is in two stages, and the
// action lists form a valid schedule of a known kind.
func (p *Plan) validate() error {
	switch {
	case len(p.Stages) == 0:
		return planErr(-1, "stages", "a plan needs at least one stage")
	case len(p.Stages) > 1<<16:
		return planErr(-1, "stages", "%d stages is more than any plan has", len(p.Stages))
	case p.Devices < 1 || p.Devices > MaxDevices:
		return planErr(-1, "devices", "must be between 1 and %d (what search plans for), got %d", MaxDevices, p.Devices)
	case p.DevicesPerNode < 1:
		return planErr(-1, "devices_per_node", "must be positive, got %d", p.DevicesPerNode)
	case p.MemoryLimit < 0:
		return planErr(-1, "memory_limit_bytes", "must not be negative, got %d", p.MemoryLimit)
	case p.BatchSize < 1 || p.MicroBatch < 1 || p.BatchSize%p.MicroBatch != 0 || int64(p.MicroBatches) != p.BatchSize/p.MicroBatch:
		return planErr(-1, "batch_size, micro_batch, micro_batches", "%d, %d and %d do not agree", p.BatchSize, p.MicroBatch, p.MicroBatches)
	case p.MicroBatches > MicroBatchLimit:
		return planErr(-1, "micro_batches", "%d is over the %d a plan may have", p.MicroBatches, MicroBatchLimit)
	case !microbatch.Known(p.Schedule):
		return planErr(-1, "schedule", "unknown schedule %q (known: %s)", p.Schedule, strings.Join(microbatch.Names, ", "))
	case len(p.Actions) != len(p.Stages):
		return planErr(-1, "actions", "%d lists for %d stages", len(p.Actions), len(p.Stages))
	}
	if err := p.Device.Validate(); err != nil {
		return planErr(-1, "device", "%v", err)
	}
	if err := p.checkCompute(); err != nil {
		return err
	}
	if err := p.checkSelective(); err != nil {
		return err
	}
	if p.Cluster != nil {
		if err := p.Cluster.validate(p.Devices); err != nil {
			return err
		}
	}
	if q := p.Search.Sequential; q != nil && !(q.SamplesPerS > 0 && q.IterationS > 0 && q.Stages > 0 && q.Depth > 0 && q.MicroBatch > 0) {
		return planErr(-1, "search.sequential", "samples_per_s, iteration_s, stages, depth and micro_batch must be positive")
	}
	if err := p.checkNumbers(); err != nil {
		return err
	}
	if err := p.checkStages(); err != nil {
		return err
	}
	if err := p.checkEdges(); err != nil {
		return err
	}
	total := 0
	for _, l := range p.Actions {
		total += len(l)
	}
	if total > 1<<24 {
		return planErr(-1, "actions", "%d actions is more than any plan has", total)
	}
	if err := p.checkStaleness(); err != nil {
		return err
	}
	if _, err := p.ScheduleOf(); err != nil {
		var ce *microbatch.CheckError
		if errors.As(err, &ce) {
			return planErr(ce.Stage, "actions", "%s", strings.TrimPrefix(ce.Error(), fmt.Sprintf("schedule: stage %d: ", ce.Stage)))
		}
		return planErr(-1, "actions", "%v", err)
	}
	return nil
}

// nonNegative refuses a stored number that is negative, NaN, infinite or
// past MaxStored (a simulation's sums of it would overflow).
func nonNegative(stage int, field string, v float64) error {
	if !(v >= 0) || math.IsInf(v, 0) {
		return planErr(stage, field, "must be a finite number, not negative, got %g", v)
	}
	if v > MaxStored {
		return planErr(stage, field, "must be at most %g (sums of larger ones overflow), got %g", MaxStored, v)
	}
	return nil
}

// checkNumbers checks the plan-wide predictions and the search report.
func (p *Plan) checkNumbers() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"predicted.iteration_s", p.Predicted.IterationS}, {"predicted.samples_per_s", p.Predicted.SamplesPerS},
		{"predicted.bubble_fraction", p.Predicted.Bubble}, {"predicted.peak_memory_bytes", float64(p.Predicted.PeakMemory)},
		{"predicted.depth", float64(p.Predicted.Depth)}, {"predicted.bottleneck_s", p.Predicted.BottleneckS},
		{"search.seconds", p.Search.Seconds}, {"search.candidates", float64(p.Search.Candidates)},
		{"model.ops", float64(p.Model.Ops)}, {"iteration_fixed_s", p.FixedS}, {"core_slowdown", p.Slowdown},
	} {
		if err := nonNegative(-1, f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// checkStages checks each stage on its own: ids, ops, devices, its
// micro-batch per device, in-flight count, times and sizes.
func (p *Plan) checkStages() error {
	used := map[int]int{}     // device → stage
	where := map[string]int{} // op → stage
	for i, s := range p.Stages {
		if s.ID != i {
			return planErr(i, "id", "is %d; stages are numbered from 0 in order", s.ID)
		}
		if len(s.Ops) == 0 {
			return planErr(i, "ops", "a stage needs at least one op")
		}
		for _, op := range s.Ops {
			if other, dup := where[op]; dup {
				return planErr(i, "ops", "op %q is also in stage %d: an op belongs to exactly one stage", op, other)
			}
			where[op] = i
		}
		if err := p.checkDevices(i, s.Devices, used); err != nil {
			return err
		}
		if err := p.checkKind(i, s); err != nil {
			return err
		}
		if err := checkBuckets(i, s, s.Params); err != nil {
			return err
		}
		if err := p.checkState(i, s); err != nil {
			return err
		}
		if want := ceilDiv(p.MicroBatch, int64(len(s.Devices))); s.MicroBatch != want {
			return planErr(i, "device_micro_batch", "is %d, but a micro-batch of %d over the stage's %d device(s) is %d per device", s.MicroBatch, p.MicroBatch, len(s.Devices), want)
		}
		if most := p.mostInFlight(); s.InFlight < 1 || s.InFlight > most {
			return planErr(i, "in_flight", "must be between 1 and the plan's %d micro-batches%s, got %d", p.MicroBatches, map[bool]string{true: " and one of the next batch's", false: ""}[most > p.MicroBatches], s.InFlight)
		}
		for _, f := range []struct {
			name string
			v    float64
		}{
			{"forward_s", s.ForwardS}, {"backward_s", s.BackwardS}, {"weight_grad_s", s.WeightS}, {"flush_s", s.FlushS}, {"begin_s", s.BeginS}, {"core_slowdown", s.Slowdown},
			{"static_bytes", float64(s.StaticBytes)}, {"stash_bytes_per_micro_batch", float64(s.StashBytes)},
			{"peak_memory_bytes", float64(s.PeakBytes)}, {"params", float64(s.Params)}, {"allreduce_bucket_bytes", float64(s.BucketBytes)}, {"gather_s", s.GatherS}, {"gather_bucket_bytes", float64(s.GatherBucketBytes)},
		} {
			if err := nonNegative(i, f.name, f.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkKind checks a stage's device kind: one of the cluster's, which its
// devices are all of; none without a cluster.
func (p *Plan) checkKind(i int, s PlanStage) error {
	if p.Cluster == nil {
		if s.Kind != "" {
			return planErr(i, "device_kind", "is %q, but the plan's devices are of one kind (it has no cluster)", s.Kind)
		}
		return nil
	}
	t := p.Cluster.KindIndex(s.Kind)
	if t < 0 {
		return planErr(i, "device_kind", "%q is not one of the cluster's kinds", s.Kind)
	}
	for _, d := range s.Devices {
		if p.Cluster.KindOf(d) != t {
			return planErr(i, "devices", "device %d is not a %s (a stage's devices are of its kind)", d, s.Kind)
		}
	}
	return nil
}

// checkOpCount refuses stages that hold more or fewer ops than the model has.
func (p *Plan) checkOpCount() error {
	ops := 0
	for _, s := range p.Stages {
		ops += len(s.Ops)
	}
	if ops != p.Model.Ops {
		return planErr(-1, "stages", "hold %d ops in all, but the model has %d (model.ops): an op is missing or extra", ops, p.Model.Ops)
	}
	return nil
}

// checkDevices checks one stage's devices: some, each one of the plan's,
// none another stage's, no more than its micro-batch has samples.
func (p *Plan) checkDevices(stage int, devs []int, used map[int]int) error {
	if len(devs) == 0 {
		return planErr(stage, "devices", "a stage needs at least one device")
	}
	if int64(len(devs)) > p.MicroBatch {
		return planErr(stage, "devices", "%d devices for micro-batches of %d samples: a replica would have no rows", len(devs), p.MicroBatch)
	}
	for _, d := range devs {
		if d < 0 || d >= p.Devices {
			return planErr(stage, "devices", "device %d is not one of the plan's %d", d, p.Devices)
		}
		if other, dup := used[d]; dup {
			return planErr(stage, "devices", "device %d is also stage %d's", d, other)
		}
		used[d] = stage
	}
	return nil
}

// checkEdges checks that every edge joins two stages, once, with finite
// sizes and times.
func (p *Plan) checkEdges() error {
	seen := map[[2]int]int{}
	for i, e := range p.Edges {
		field := fmt.Sprintf("edges[%d]", i)
		if e.From < 0 || e.From >= len(p.Stages) || e.To < 0 || e.To >= len(p.Stages) || e.From == e.To {
			return planErr(-1, field, "%d → %d is not an edge between two stages", e.From, e.To)
		}
		if j, dup := seen[[2]int{e.From, e.To}]; dup {
			return planErr(-1, field, "%d → %d is also edges[%d]", e.From, e.To, j)
		}
		seen[[2]int{e.From, e.To}] = i
		if len(e.Tensors) == 0 {
			return planErr(-1, field+".tensors", "an edge carries at least one tensor")
		}
		if err := nonNegative(-1, field+".bytes_per_sample", float64(e.Bytes)); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{".transfer_s", e.Transfer}, {".send_s", e.SendS}, {".recv_s", e.RecvS}, {".hold_s", e.HoldS}} {
			if err := nonNegative(-1, field+f.name, f.v); err != nil {
				return err
			}
		}
		switch e.Transport {
		case "", TransportIPC, TransportNATS:
		default:
			return planErr(-1, field+".transport", "is %q, want %q or %q", e.Transport, TransportIPC, TransportNATS)
		}
	}
	return nil
}

// CheckModel checks a decoded plan against its model: made for it (by
// hash), every op of the model in exactly one stage and no other names,
// stages that are convex and whose dependencies are acyclic, and edges that
// bring every stage each tensor its ops read from another stage (directly,
// or relayed by stages between, as a sequential plan does).
func (p *Plan) CheckModel(g *dag.Graph) error {
	var mm *ModelMismatchError
	if errors.As(p.CheckModelHash("plan", g), &mm) {
		return &PlanError{Stage: -1, Field: "model.sha256", Msg: mm.Reason(), Err: mm}
	}
	stageOf := make([]int, g.NumOps())
	for i := range stageOf {
		stageOf[i] = -1
	}
	ops := make([][]int, len(p.Stages))
	for s, st := range p.Stages {
		for _, name := range st.Ops {
			i, ok := g.OpIndex(name)
			if !ok {
				return planErr(s, "ops", "op %q is not an op of model %q", name, g.Name())
			}
			stageOf[i] = s
			ops[s] = append(ops[s], i)
		}
	}
	for i, s := range stageOf {
		if s < 0 {
			return planErr(-1, "stages", "op %q of the model is in no stage", g.Op(i).Name)
		}
	}
	if err := p.checkOpCount(); err != nil {
		return err
	}
	for s := range p.Stages { // the buckets of what the ops hold, whatever params says
		var params int64
		for _, n := range OpElems(g, ops[s]) {
			params += n
		}
		if err := checkBuckets(s, p.Stages[s], params); err != nil {
			return err
		}
	}
	if _, err := partition.NewStageGraph(g, ops); err != nil {
		var pe *partition.Error
		if errors.As(err, &pe) {
			return planErr(pe.Stage, "ops", "%s", pe.Msg)
		}
		return planErr(-1, "stages", "%v", err)
	}
	return p.checkFlow(g, stageOf)
}

// checkFlow follows the edges in the stages' order: each edge may carry what
// its source computes or received, and every stage must receive each tensor
// its ops read from another stage.
func (p *Plan) checkFlow(g *dag.Graph, stageOf []int) error {
	has := make([]map[string]bool, len(p.Stages)) // per stage: what it computes or receives
	for s, st := range p.Stages {
		has[s] = map[string]bool{}
		for _, name := range st.Ops {
			has[s][name] = true
		}
	}
	for _, s := range p.stageOrder() {
		for i, e := range p.Edges {
			if e.From != s {
				continue
			}
			for _, t := range e.Tensors {
				if _, ok := g.OpIndex(t); !ok {
					return planErr(-1, fmt.Sprintf("edges[%d].tensors", i), "%q is not an op of model %q", t, g.Name())
				}
				if !has[s][t] {
					return planErr(-1, fmt.Sprintf("edges[%d].tensors", i), "stage %d sends %q, which it neither computes nor receives", s, t)
				}
				has[e.To][t] = true
			}
		}
	}
	for v := range stageOf {
		for _, u := range g.Producers(v) {
			if s, t := stageOf[u], stageOf[v]; s != t && !has[t][g.Op(u).Name] {
				return planErr(t, "edges", "op %q reads %q from stage %d, and no edge brings it", g.Op(v).Name, g.Op(u).Name, s)
			}
		}
	}
	return nil
}

// stageOrder is a topological order of the stages by their edges (which
// validate has found acyclic), sources first.
func (p *Plan) stageOrder() []int {
	in := make([]int, len(p.Stages))
	for _, e := range p.Edges {
		in[e.To]++
	}
	var order []int
	for s := range p.Stages {
		if in[s] == 0 {
			order = append(order, s)
		}
	}
	for k := 0; k < len(order); k++ {
		for _, e := range p.Edges {
			if e.From == order[k] {
				if in[e.To]--; in[e.To] == 0 {
					order = append(order, e.To)
				}
			}
		}
	}
	return order
}

// ceilDiv is a/b rounded up, for a ≥ 0 and b > 0; it does not add b − 1
// to a first, which overflows for a micro-batch near 2^63.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// checkCompute refuses a precision or attention the plan cannot be priced
// in, and a precision its devices have no rate for.
func (p *Plan) checkCompute() error {
	if err := CheckPrecision(p.Precision); err != nil {
		return planErr(-1, "precision", "%v", err)
	}
	if err := CheckAttention(p.Attention); err != nil {
		return planErr(-1, "attention", "%v", err)
	}
	devs := []Device{p.Device}
	if p.Cluster != nil {
		devs = devs[:0]
		for _, k := range p.Cluster.Kinds {
			devs = append(devs, k.Device)
		}
	}
	for _, d := range devs {
		if _, err := d.InPrecision(p.PrecisionName()); err != nil {
			return planErr(-1, "precision", "%v", err)
		}
	}
	return nil
}

// mostInFlight is the most micro-batches a stage of the plan may hold:
// an iteration's, and where the schedule has no flush (2bw) one more, the
// next batch's first forward run ahead of the update.
func (p *Plan) mostInFlight() int {
	if k, _ := microbatch.KindOf(p.Schedule); k.NoFlush {
		return p.MicroBatches + 1
	}
	return p.MicroBatches
}

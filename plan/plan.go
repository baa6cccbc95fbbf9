package plan

import (
	"fmt"

	"github.com/graphpipe/graphpipe/microbatch"
)

// PlanFormat is the plan file format this version writes and reads.
const PlanFormat = "graphpipe/plan@1"

// MaxDevices is the most devices a search plans for, and so the most a plan
// may name.
const MaxDevices = 4096

// MicroBatchLimit is the most micro-batches per iteration a plan may have,
// forced or searched: every stage's action list holds each one, so the plan
// file and the search's memory grow with it (BENCHMARKS.md's history).
const MicroBatchLimit = 65536

// Plan is a self-contained training plan: which model, which devices, the
// stages and their edges, every stage's action list, and the predictions.
type Plan struct {
	Format   string   `json:"format"`
	Model    ModelRef `json:"model"`
	Strategy string   `json:"strategy"`
	Schedule string   `json:"schedule"`
	// Precision is what the plan was priced in and trains in (Precisions);
	// "" is fp32 (PrecisionName).
	Precision string `json:"precision,omitempty"`
	// Attention is how attention runs (Attentions): "fused", or "" for
	// unfused (AttentionName).
	Attention      string `json:"attention,omitempty"`
	Device         Device `json:"device"`
	Devices        int    `json:"devices"`
	DevicesPerNode int    `json:"devices_per_node"`
	// Cluster, for devices of more than one kind, is the kinds (Device,
	// DevicesPerNode and MemoryLimit are then the first kind's, and each
	// stage names its kind); nil for devices of one kind.
	Cluster      *Cluster    `json:"cluster,omitempty"`
	MemoryLimit  int64       `json:"memory_limit_bytes"`
	BatchSize    int64       `json:"batch_size"`
	MicroBatch   int64       `json:"micro_batch"`
	MicroBatches int         `json:"micro_batches"`
	Stages       []PlanStage `json:"stages"`
	Edges        []PlanEdge  `json:"edges"`
	Actions      [][]string  `json:"actions"`
	// FixedS is what an iteration costs after its stages' actions: the
	// workers' reports to the coordinator (Device.IterationFixed); zero
	// where the profile measured none.
	FixedS float64 `json:"iteration_fixed_s,omitempty"`
	// Slowdown is how much longer the stages' ops take than alone, their
	// hosts' cores shared by the workers busy at once (the largest factor
	// of any stage: PlanStage.Slowdown); 0 where the profile measured no
	// sharing. The stages' times include it.
	Slowdown  float64      `json:"core_slowdown,omitempty"`
	Predicted Prediction   `json:"predicted"`
	Search    SearchReport `json:"search"`

	// BackpropFraction, for a plan priced for selective backprop, is the
	// fraction of samples expected to have a backward pass: the stages'
	// backward times and the edges' gradient transfers are the kept rows'
	// (selective.go); absent: every sample.
	BackpropFraction float64 `json:"backprop_fraction,omitempty"`

	sched *microbatch.Schedule // the schedule behind Actions; Actions is filled by FillActions
}

// ModelRef names the model a plan was made for; Run refuses another.
type ModelRef struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"` // of the model's canonical graphpipe/model@1 rendering
	Ops    int    `json:"ops"`
}

// PlanStage is one stage: its ops, devices, and its predicted costs.
type PlanStage struct {
	ID          int      `json:"id"`
	Ops         []string `json:"ops"`
	Devices     []int    `json:"devices"`
	Kind        string   `json:"device_kind,omitempty"` // the cluster's kind its devices are of (Cluster set)
	MicroBatch  int64    `json:"device_micro_batch"`    // samples per device per micro-batch
	InFlight    int      `json:"in_flight"`
	ForwardS    float64  `json:"forward_s"`
	BackwardS   float64  `json:"backward_s"`
	WeightS     float64  `json:"weight_grad_s"`
	FlushS      float64  `json:"flush_s"`
	StaticBytes int64    `json:"static_bytes"`
	StashBytes  int64    `json:"stash_bytes_per_micro_batch"`
	PeakBytes   int64    `json:"peak_memory_bytes"`
	Params      int64    `json:"params"`
	// BeginS is when the stage can begin its first action of an
	// iteration: once the coordinator's go has reached its workers
	// (Device.GoDelay) and it has made the model inputs it reads (op
	// times' input_s); zero where neither was measured.
	BeginS float64 `json:"begin_s,omitempty"`
	// Slowdown is the factor its op and optimizer times include for its
	// host's cores (or GPU) shared with the workers busy at once: its
	// profile's Device.Slowdown for the workers computing beside it, over
	// its passes in the simulated iteration, weighted by time; zero where
	// its profile measured no sharing.
	Slowdown float64 `json:"core_slowdown,omitempty"`
	// Recompute: the stage keeps only what it reads from outside for each
	// micro-batch in flight and reruns its forward at the start of each
	// backward (BackwardS includes that forward; StashBytes is what it
	// keeps; StaticBytes holds one micro-batch's full activations). Plans
	// without the field load as keeping every activation.
	Recompute bool `json:"recompute,omitempty"`
	// OptimizerState is where the stage's optimizer state and master
	// weights live (StatePlacements, state.go); "" is StateReplicated, as
	// every plan made before placements were part of plans.
	OptimizerState string `json:"optimizer_state,omitempty"`
	// StreamWeights: with OptimizerState host, the weights and gradients
	// stay in host memory too, streamed in (and out) per micro-batch.
	StreamWeights bool `json:"stream_weights,omitempty"`
	// HostCopyBytes is what the placement copies between host memory and
	// the device per iteration (per replica): host's gradients down and
	// weights up, streaming's per micro-batch; StateSavedBytes is what it
	// saves per device against StateReplicated. Both zero when replicated.
	HostCopyBytes   int64 `json:"host_copy_bytes,omitempty"`
	StateSavedBytes int64 `json:"state_saved_bytes,omitempty"`
	// BucketBytes, on a stage of several replicas whose state is on its
	// devices, is the size of the buckets its gradients are all-reduced in
	// while its last weight pass of an iteration runs (buckets.go), and
	// FlushS holds only what of that all-reduce outlasts the pass; zero
	// (and every plan made before buckets) all-reduces after the pass.
	BucketBytes int64 `json:"allreduce_bucket_bytes,omitempty"`
	// GatherS, on a stage whose optimizer state is sharded across several
	// replicas, is its all-gather of the updated parameters where it runs
	// late: it starts after the optimizer step and the stage's next
	// iteration begins with it (its first action waits for it: Timing's
	// Begin holds it), while the stages upstream make its first inputs;
	// FlushS then holds the step without it. Zero (and every plan made
	// before): the all-gather ends the flush.
	GatherS float64 `json:"gather_s,omitempty"`
	// GatherBucketBytes, on a stage whose all-gather runs late, cuts it
	// into buckets of the parameters in the order its forward reads them
	// (GatherBuckets): the rings run at once, and each op's forward waits
	// only for the buckets that hold its parameters, so the gather overlaps
	// the next iteration's first forward. GatherS then holds only what of
	// it that forward waits for (it may be 0). Zero (and every plan made
	// before): the first forward waits for the whole all-gather.
	GatherBucketBytes int64 `json:"gather_bucket_bytes,omitempty"`
}

// GathersLate says whether the stage's all-gather runs late (GatherS,
// GatherBucketBytes).
func (s *PlanStage) GathersLate() bool { return s.GatherS > 0 || s.GatherBucketBytes > 0 }

// PlanEdge is a stage edge and the tensors that cross it. In a sequential
// plan an edge also carries tensors that a stage only relays.
type PlanEdge struct {
	From     int      `json:"from"`
	To       int      `json:"to"`
	Tensors  []string `json:"tensors"`
	Bytes    int64    `json:"bytes_per_sample"`
	Transfer float64  `json:"transfer_s"` // per micro-batch, each direction
	Inter    bool     `json:"inter_node"`
	// Transport is how the run moves the edge's tensors (TransportIPC or
	// TransportNATS); plans made before it was recorded have none.
	Transport string `json:"transport,omitempty"`
	// SendS and RecvS are what a micro-batch's messages of the edge (its
	// tensors, either way: one message, or one to each replica across that
	// shares its rows) cost the stage sending them and the one taking
	// them, in their own seconds; zero where the profile measured none.
	SendS float64 `json:"send_s,omitempty"`
	RecvS float64 `json:"recv_s,omitempty"`
	// HoldS is the most a message of the edge waits for its sender's next
	// computing action to end before it travels (Device.SendHoldS); zero
	// where the profile measured none.
	HoldS float64 `json:"hold_s,omitempty"`
	// GradTransfer, in a plan priced for selective backprop, is a
	// micro-batch's gradients' transfer: the kept rows' alone
	// (GradTransferS); absent: Transfer, each way.
	GradTransfer float64 `json:"grad_transfer_s,omitempty"`
}

// Prediction is what the simulator says of one iteration.
type Prediction struct {
	IterationS  float64 `json:"iteration_s"`
	SamplesPerS float64 `json:"samples_per_s"`
	Bubble      float64 `json:"bubble_fraction"`
	PeakMemory  int64   `json:"peak_memory_bytes"`
	Depth       int     `json:"depth"`
	BottleneckS float64 `json:"bottleneck_s"` // the largest per-micro-batch stage time
	Feasible    bool    `json:"feasible"`
}

// SearchReport says how the plan was found.
type SearchReport struct {
	Seconds    float64  `json:"seconds"`
	Candidates int      `json:"candidates"` // plans simulated
	Chosen     string   `json:"chosen"`     // the planner whose plan this is
	Notes      []string `json:"notes,omitempty"`
	// Sequential is, for gpp, the best sequential plan the search found:
	// what --strategy spp would return (gpp runs spp's search too).
	Sequential *Baseline `json:"sequential,omitempty"`
}

// Baseline sums up a plan the search found and did not choose.
type Baseline struct {
	SamplesPerS float64 `json:"samples_per_s"`
	IterationS  float64 `json:"iteration_s"`
	Stages      int     `json:"stages"`
	Depth       int     `json:"depth"`
	MicroBatch  int64   `json:"micro_batch"`
}

// Pipeline is the plan's stage DAG as the schedules see it.
func (p *Plan) Pipeline() microbatch.Pipeline {
	pp := microbatch.Pipeline{Stages: len(p.Stages), MicroBatches: p.MicroBatches}
	for _, e := range p.Edges {
		pp.Edges = append(pp.Edges, [2]int{e.From, e.To})
	}
	return pp
}

// SetSchedule makes sch the schedule behind the plan, as the planner built it
// for the plan's stages and edges; nil drops it (ScheduleOf parses the action
// lists again when asked).
func (p *Plan) SetSchedule(sch *microbatch.Schedule) { p.sched = sch }

// FillActions writes the action lists of a chosen plan as text, from the
// schedule behind it, unless they are written already.
func (p *Plan) FillActions() {
	if p.sched == nil || p.Actions != nil {
		return
	}
	p.Actions = make([][]string, len(p.sched.Lists))
	for s, l := range p.sched.Lists {
		p.Actions[s] = make([]string, len(l))
		for i, a := range l {
			p.Actions[s][i] = a.String()
		}
	}
}

// ScheduleOf is the plan's schedule: the one the planner built, or the one
// its action lists spell, parsed and checked.
func (p *Plan) ScheduleOf() (*microbatch.Schedule, error) {
	if p.sched != nil {
		return p.sched, nil
	}
	kind, _ := microbatch.KindOf(p.Schedule) // an unknown name is the check's to refuse
	sch := &microbatch.Schedule{Name: p.Schedule, Pipe: p.Pipeline(), Split: kind.Split, NoFlush: kind.NoFlush}
	for s, l := range p.Actions {
		var acts []microbatch.Action
		for _, txt := range l {
			a, err := microbatch.ParseAction(txt)
			if err != nil {
				return nil, fmt.Errorf("stage %d: %w", s, err)
			}
			acts = append(acts, a)
		}
		sch.Lists = append(sch.Lists, acts)
	}
	if err := microbatch.Check(sch, nil); err != nil {
		return nil, err
	}
	p.sched = sch
	return sch, nil
}

// NodeOf is the node device d is on.
func (p *Plan) NodeOf(d int) int {
	if p.Cluster != nil {
		return p.Cluster.NodeOf(d)
	}
	return d / max(p.DevicesPerNode, 1)
}

// NodeWorkers is how many of p's workers (a device of a stage each) run on
// node n.
func (p *Plan) NodeWorkers(n int) int {
	k := 0
	for _, st := range p.Stages {
		for _, d := range st.Devices {
			if p.NodeOf(d) == n {
				k++
			}
		}
	}
	return k
}

// KindOf is the index of stage s's kind in the cluster (0 for devices of
// one kind).
func (p *Plan) KindOf(s int) int {
	if p.Cluster == nil {
		return 0
	}
	return p.Cluster.KindIndex(p.Stages[s].Kind)
}

// StageMemoryLimit is the memory per device stage s keeps within: its
// kind's.
func (p *Plan) StageMemoryLimit(s int) int64 {
	if p.Cluster == nil {
		return p.MemoryLimit
	}
	return p.Cluster.Kinds[p.KindOf(s)].MemoryLimit
}

// Timing is the simulator's view of the plan.
func (p *Plan) Timing() microbatch.Timing {
	var t microbatch.Timing
	if p.Cluster != nil { // each stage within its kind's memory
		for s := range p.Stages {
			t.Limit = append(t.Limit, p.StageMemoryLimit(s))
		}
	}
	for _, s := range p.Stages {
		if s.BeginS+s.GatherS > 0 && t.Begin == nil {
			t.Begin = make([]float64, len(p.Stages))
		}
	}
	for i, s := range p.Stages {
		if t.Begin != nil {
			t.Begin[i] = s.BeginS + s.GatherS
		}
		t.F = append(t.F, s.ForwardS)
		t.B = append(t.B, s.BackwardS)
		t.W = append(t.W, s.WeightS)
		t.Flush = append(t.Flush, s.FlushS)
		t.Devices = append(t.Devices, len(s.Devices))
		t.Static = append(t.Static, s.StaticBytes)
		t.Stash = append(t.Stash, s.StashBytes)
	}
	messages := false
	for _, e := range p.Edges {
		t.Act = append(t.Act, e.Transfer)
		t.Grad = append(t.Grad, e.GradTransferS())
		messages = messages || e.SendS > 0 || e.RecvS > 0 || e.HoldS > 0
	}
	if messages { // nil otherwise: what plans without them always had
		for _, e := range p.Edges {
			t.Post = append(t.Post, e.SendS)
			t.Take = append(t.Take, e.RecvS)
			t.Hold = append(t.Hold, e.HoldS)
		}
	}
	t.Fixed = p.FixedS
	return t
}

// simulate runs the plan's schedule and fills in the predictions. It returns
// the simulator's result through res when res is not nil.
func (p *Plan) simulate(res **microbatch.Result) error {
	sch, err := p.ScheduleOf()
	if err != nil {
		return err
	}
	sim := microbatch.Summarize // the events only for a caller that asks for them
	if res != nil {
		sim = microbatch.Simulate
	}
	r, err := sim(sch, p.Timing())
	if err != nil {
		return err
	}
	depth, _ := sch.Pipe.Depth()
	pr := Prediction{IterationS: r.Iteration, SamplesPerS: float64(p.BatchSize) / r.Iteration, Bubble: r.Bubble, Feasible: true}
	for s := range p.Stages {
		st := &p.Stages[s]
		st.InFlight, st.PeakBytes = r.InFlight[s], r.PeakMemory[s]
		pr.PeakMemory = max(pr.PeakMemory, r.PeakMemory[s])
		pr.Depth = max(pr.Depth, depth[s])
		pr.BottleneckS = max(pr.BottleneckS, st.ForwardS+st.BackwardS+st.WeightS)
		pr.Feasible = pr.Feasible && r.PeakMemory[s] <= p.StageMemoryLimit(s)
	}
	p.Predicted = pr
	if res != nil {
		*res = r
	}
	return nil
}

// Predict runs the plan's schedule through the simulator and fills in the
// predictions (Predicted, and each stage's in-flight count and peak memory).
func (p *Plan) Predict() error { return p.simulate(nil) }

// Simulate re-runs the plan's schedule through the simulator.
func (p *Plan) Simulate() (*microbatch.Result, error) {
	var r *microbatch.Result
	return r, p.simulate(&r)
}

// Recomputes says whether some stage of the plan recomputes its forward.
func (p *Plan) Recomputes() bool {
	for _, s := range p.Stages {
		if s.Recompute {
			return true
		}
	}
	return false
}

// Scaled is a copy of p with every planned duration (compute, flush,
// transfer, a message's cost at either end, the iteration's fixed cost) and the predicted iteration k times as long: an emulated run of
// it at k > 1 weighs a fixed cost per action k times less against the plan.
func (p *Plan) Scaled(k float64) *Plan {
	q := *p
	q.Stages = append([]PlanStage(nil), p.Stages...)
	q.Edges = append([]PlanEdge(nil), p.Edges...)
	for i := range q.Stages {
		st := &q.Stages[i]
		st.ForwardS, st.BackwardS, st.WeightS, st.FlushS, st.BeginS, st.GatherS = k*st.ForwardS, k*st.BackwardS, k*st.WeightS, k*st.FlushS, k*st.BeginS, k*st.GatherS
	}
	for i := range q.Edges {
		e := &q.Edges[i]
		e.Transfer, e.SendS, e.RecvS, e.HoldS = k*e.Transfer, k*e.SendS, k*e.RecvS, k*e.HoldS
	}
	q.FixedS *= k
	q.Predicted.IterationS *= k
	return &q
}

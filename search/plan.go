package search

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/partition"
)

// PlanFormat is the plan file format this version writes and reads.
const PlanFormat = "graphpipe/plan@1"

// Plan is a self-contained training plan: which model, which devices, the
// stages and their edges, every stage's action list, and the predictions.
type Plan struct {
	Format         string       `json:"format"`
	Model          ModelRef     `json:"model"`
	Strategy       string       `json:"strategy"`
	Schedule       string       `json:"schedule"`
	Device         Device       `json:"device"`
	Devices        int          `json:"devices"`
	DevicesPerNode int          `json:"devices_per_node"`
	MemoryLimit    int64        `json:"memory_limit_bytes"`
	BatchSize      int64        `json:"batch_size"`
	MicroBatch     int64        `json:"micro_batch"`
	MicroBatches   int          `json:"micro_batches"`
	Stages         []PlanStage  `json:"stages"`
	Edges          []PlanEdge   `json:"edges"`
	Actions        [][]string   `json:"actions"`
	Predicted      Prediction   `json:"predicted"`
	Search         SearchReport `json:"search"`

	sched *microbatch.Schedule // the schedule behind Actions; Actions is filled by finish
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
	MicroBatch  int64    `json:"device_micro_batch"` // samples per device per micro-batch
	InFlight    int      `json:"in_flight"`
	ForwardS    float64  `json:"forward_s"`
	BackwardS   float64  `json:"backward_s"`
	WeightS     float64  `json:"weight_grad_s"`
	FlushS      float64  `json:"flush_s"`
	StaticBytes int64    `json:"static_bytes"`
	StashBytes  int64    `json:"stash_bytes_per_micro_batch"`
	PeakBytes   int64    `json:"peak_memory_bytes"`
	Params      int64    `json:"params"`
	// Recompute: the stage keeps only what it reads from outside for each
	// micro-batch in flight and reruns its forward at the start of each
	// backward (BackwardS includes that forward; StashBytes is what it
	// keeps; StaticBytes holds one micro-batch's full activations). Plans
	// without the field load as keeping every activation.
	Recompute bool `json:"recompute,omitempty"`
}

// PlanEdge is a stage edge and the tensors that cross it. In a sequential
// plan an edge also carries tensors that a stage only relays.
type PlanEdge struct {
	From     int      `json:"from"`
	To       int      `json:"to"`
	Tensors  []string `json:"tensors"`
	Bytes    int64    `json:"bytes_per_sample"`
	Transfer float64  `json:"transfer_s"` // per micro-batch, each direction
	Inter    bool     `json:"inter_node"`
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

// ModelHash is the SHA-256 of the model's canonical rendering.
func ModelHash(g *dag.Graph) string {
	sum := sha256.Sum256(dag.Write(g.Model()))
	return hex.EncodeToString(sum[:])
}

// stageIn is a stage as a planner chose it.
type stageIn struct {
	ops  []int
	k    int
	cost stageCost
	blk  *block
}

// assemble turns chosen stages into a checked, simulated plan. chain makes the
// stages a sequential pipeline (each stage feeds the next, relaying what later
// stages need); otherwise the stage edges are the graph's.
func assemble(g *dag.Graph, o *Options, cm *costModel, b int64, in []stageIn, chain bool) (*Plan, error) {
	ops := make([][]int, len(in))
	for i, s := range in {
		ops[i] = s.ops
	}
	sg, err := partition.NewStageGraph(g, ops)
	if err != nil {
		return nil, fmt.Errorf("planner produced an invalid stage graph: %w", err)
	}
	if !chain { // number the stages topologically
		sorted := make([]stageIn, len(in))
		for k, s := range sg.Order() {
			sorted[k] = in[s]
			ops[k] = in[s].ops
		}
		in = sorted
		if sg, err = partition.NewStageGraph(g, ops); err != nil {
			return nil, err
		}
	}
	mbs := int(o.Batch / b)
	p := &Plan{Format: PlanFormat, Model: ModelRef{g.Name(), ModelHash(g), g.NumOps()}, Strategy: o.Strategy,
		Schedule: o.Schedule, Device: o.Device, Devices: o.Devices, DevicesPerNode: o.DevicesPerNode,
		MemoryLimit: o.MemoryLimit, BatchSize: o.Batch, MicroBatch: b, MicroBatches: mbs}
	for i, s := range in {
		st := PlanStage{ID: i, MicroBatch: s.cost.m, Params: s.blk.params, Recompute: s.cost.recompute}
		for _, op := range sg.Stages[i] {
			st.Ops = append(st.Ops, g.Op(op).Name)
		}
		st.ForwardS, st.BackwardS = s.cost.f, s.cost.bi+s.cost.bw
		if microbatch.Splits(o.Schedule) {
			st.BackwardS, st.WeightS = s.cost.bi, s.cost.bw
		}
		st.StaticBytes = s.cost.static + s.cost.work
		st.StashBytes = s.cost.stashPerMB
		p.Stages = append(p.Stages, st)
	}
	if chain {
		p.chainEdges(g, sg, cm)
	} else {
		for _, e := range sg.Edges {
			p.Edges = append(p.Edges, PlanEdge{From: e.From, To: e.To, Tensors: e.Tensors, Bytes: e.Bytes})
		}
	}
	return p, p.placeBest(in, cm)
}

// placeBest tries the placements of placements and keeps the one the
// simulator finds fastest (the first on ties).
func (p *Plan) placeBest(in []stageIn, cm *costModel) error {
	ks := make([]int, len(in))
	for i, s := range in {
		ks[i] = s.k
	}
	cands := placements(ks, p.Devices, p.DevicesPerNode)
	best, bestS := 0, 0.0
	for c, devs := range cands {
		if len(cands) == 1 {
			break
		}
		if err := p.setDevices(in, devs, cm); err != nil {
			return err
		}
		if err := p.simulate(nil); err != nil {
			return err
		}
		if c == 0 || p.Predicted.IterationS < bestS {
			best, bestS = c, p.Predicted.IterationS
		}
	}
	if err := p.setDevices(in, cands[best], cm); err != nil {
		return err
	}
	return p.simulate(nil)
}

// setDevices gives the stages their devices, prices what depends on where
// they are (each stage's flush and each edge's transfer) and builds the
// schedule for those prices.
func (p *Plan) setDevices(in []stageIn, devs [][]int, cm *costModel) error {
	for i := range p.Stages {
		st := &p.Stages[i]
		st.Devices = devs[i]
		st.FlushS = cm.flushAt(in[i].blk.params, in[i].k, p.spans(st.Devices))
	}
	for i := range p.Edges {
		e := &p.Edges[i]
		from, to := p.Stages[e.From], p.Stages[e.To]
		m := ceilDiv(p.MicroBatch, int64(min(len(from.Devices), len(to.Devices))))
		e.Inter = p.node(from.Devices[0]) != p.node(to.Devices[0]) || p.spans(from.Devices) || p.spans(to.Devices)
		e.Transfer = cm.dev.transfer(float64(e.Bytes*m), e.Inter)
	}
	return p.schedule()
}

// chainEdges links stage i to i+1 with every tensor live across that cut:
// produced in stages ≤ i and read in stages > i.
func (p *Plan) chainEdges(g *dag.Graph, sg *partition.StageGraph, cm *costModel) {
	for i := 0; i+1 < len(sg.Stages); i++ {
		e := PlanEdge{From: i, To: i + 1}
		for s := 0; s <= i; s++ {
			for _, op := range sg.Stages[s] {
				for _, c := range g.Consumers(op) {
					if sg.StageOf(c) > i {
						e.Tensors = append(e.Tensors, g.Op(op).Name)
						e.Bytes += g.Out(op).Bytes()
						break
					}
				}
			}
		}
		sort.Strings(e.Tensors)
		p.Edges = append(p.Edges, e)
	}
}

func (p *Plan) node(dev int) int { return dev / p.DevicesPerNode }

// spans says whether devices lie on more than one node.
func (p *Plan) spans(devs []int) bool {
	for _, d := range devs {
		if p.node(d) != p.node(devs[0]) {
			return true
		}
	}
	return false
}

// pipeline is the plan's stage DAG as the schedules see it.
func (p *Plan) pipeline() microbatch.Pipeline {
	pp := microbatch.Pipeline{Stages: len(p.Stages), MicroBatches: p.MicroBatches}
	for _, e := range p.Edges {
		pp.Edges = append(pp.Edges, [2]int{e.From, e.To})
	}
	return pp
}

// schedule builds the action lists for the plan's priced stages and edges
// (1F1B warms up to hide transfers where memory allows: microbatch.Warmup).
// They stay in memory during the search and are written out as text by
// finish, for the plan that is kept.
func (p *Plan) schedule() error {
	sch, err := microbatch.NewTimed(p.Schedule, p.pipeline(), p.Timing(), p.MemoryLimit)
	if err != nil {
		return err
	}
	p.sched = sch
	return nil
}

// finish writes the action lists of a chosen plan as text.
func (p *Plan) finish() {
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
	sch := &microbatch.Schedule{Name: p.Schedule, Pipe: p.pipeline(), Split: microbatch.Splits(p.Schedule)}
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

// Timing is the simulator's view of the plan.
func (p *Plan) Timing() microbatch.Timing {
	var t microbatch.Timing
	for _, s := range p.Stages {
		t.F = append(t.F, s.ForwardS)
		t.B = append(t.B, s.BackwardS)
		t.W = append(t.W, s.WeightS)
		t.Flush = append(t.Flush, s.FlushS)
		t.Devices = append(t.Devices, len(s.Devices))
		t.Static = append(t.Static, s.StaticBytes)
		t.Stash = append(t.Stash, s.StashBytes)
	}
	for _, e := range p.Edges {
		t.Act = append(t.Act, e.Transfer)
		t.Grad = append(t.Grad, e.Transfer)
	}
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
	pr := Prediction{IterationS: r.Iteration, SamplesPerS: float64(p.BatchSize) / r.Iteration, Bubble: r.Bubble}
	for s := range p.Stages {
		st := &p.Stages[s]
		st.InFlight, st.PeakBytes = r.InFlight[s], r.PeakMemory[s]
		pr.PeakMemory = max(pr.PeakMemory, r.PeakMemory[s])
		pr.Depth = max(pr.Depth, depth[s])
		pr.BottleneckS = max(pr.BottleneckS, st.ForwardS+st.BackwardS+st.WeightS)
	}
	pr.Feasible = pr.PeakMemory <= p.MemoryLimit
	p.Predicted = pr
	if res != nil {
		*res = r
	}
	return nil
}

// Simulate re-runs the plan's schedule through the simulator.
func (p *Plan) Simulate() (*microbatch.Result, error) {
	var r *microbatch.Result
	return r, p.simulate(&r)
}

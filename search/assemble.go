package search

import (
	"fmt"
	"sort"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// stageIn is a stage as a planner chose it.
type stageIn struct {
	ops  []int
	k    int // devices
	kind int // of the cluster's kinds (0 for devices of one kind)
	cost stageCost
	blk  *block
}

// assemble turns chosen stages into a checked, simulated plan. chain makes the
// stages a sequential pipeline (each stage feeds the next, relaying what later
// stages need); otherwise the stage edges are the graph's.
func assemble(g *dag.Graph, o *Options, cm *costModel, b int64, in []stageIn, chain bool) (*plan.Plan, error) {
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
	p := &plan.Plan{Format: plan.PlanFormat, Model: plan.ModelRef{Name: g.Name(), SHA256: cm.modelHash(), Ops: g.NumOps()}, Strategy: o.Strategy,
		Schedule: o.Schedule, Device: o.Device, Devices: o.Devices, DevicesPerNode: o.DevicesPerNode,
		MemoryLimit: o.MemoryLimit, BatchSize: o.Batch, MicroBatch: b, MicroBatches: mbs, Cluster: o.Cluster}
	if o.Precision != "fp32" { // a plan without one is fp32 (plan.Plan.PrecisionName), as plans were before
		p.Precision = o.Precision
	}
	if o.Attention == plan.Fused {
		p.Attention = plan.Fused
	}
	if cm.kept > 0 {
		p.BackpropFraction = cm.kept
	}
	for i, s := range in {
		st := plan.PlanStage{ID: i, MicroBatch: s.cost.m, Params: s.blk.params, Recompute: s.cost.recompute}
		setPlacement(&st, s, cm.kind(s.kind))
		if o.Cluster != nil {
			st.Kind = o.Cluster.Kinds[s.kind].Name()
		}
		for _, op := range sg.Stages[i] {
			st.Ops = append(st.Ops, g.Op(op).Name)
		}
		st.ForwardS, st.BackwardS = s.cost.f, s.cost.bi+s.cost.bw
		if o.sched.Split {
			st.BackwardS, st.WeightS = s.cost.bi, s.cost.bw
		}
		st.StaticBytes = s.cost.static + s.cost.work
		st.StashBytes = s.cost.stashPerMB
		st.BeginS = stageBegin(g, o, cm, in, i, cm.kind(s.kind).slow)
		p.Stages = append(p.Stages, st)
	}
	if chain {
		chainEdges(p, g, sg, cm)
	} else {
		for _, e := range sg.Edges {
			p.Edges = append(p.Edges, plan.PlanEdge{From: e.From, To: e.To, Tensors: e.Tensors, Bytes: edgeBytes(g, e.Tensors, cm)})
		}
	}
	if o.sched.NoFlush && tooStale(p) {
		cm.stale.n.Add(1)
		return p, nil // not Feasible: no schedule without a flush keeps it one update stale (twobw.go)
	}
	return p, placeBest(p, in, cm)
}

// placeBest tries the placements of placements and keeps the one the
// simulator finds fastest; of placements as fast, the one whose stages'
// all-reduces take the fewest device-seconds (allReduceS), and the first of
// those. The warm-up tuning that follows (tune) runs stages further ahead
// and fills their slack, so a flush that waits on no one before it may end
// the iteration after: two placements that simulate as fast before tuning
// may not after it, and the one whose all-reduces stay inside nodes is the
// one tuning shortens (the figures: commit 6ded562).
func placeBest(p *plan.Plan, in []stageIn, cm *costModel) error {
	cands := kindPlacements(p, in)
	best, bestS, bestAR := 0, 0.0, 0.0
	priced := stageTimes(p) // as the DP priced them: shareCores scales them per placement
	for c, devs := range cands {
		if len(cands) == 1 {
			break
		}
		setStageTimes(p, priced)
		if err := placeOn(p, in, devs, cm); err != nil {
			return err
		}
		it, ar := p.Predicted.IterationS, allReduceS(p)
		if c == 0 || it < bestS*(1-1e-9) || it <= bestS*(1+1e-9) && ar < bestAR*(1-1e-9) {
			best, bestS, bestAR = c, it, ar
		}
	}
	setStageTimes(p, priced)
	return placeOn(p, in, cands[best], cm)
}

// allReduceS is the device-seconds of p's stages' flushes and all-gathers
// run late: each stage's devices times its FlushS and GatherS.
func allReduceS(p *plan.Plan) float64 {
	var s float64
	for _, st := range p.Stages {
		s += float64(len(st.Devices)) * (st.FlushS + st.GatherS)
	}
	return s
}

// stageTime is what shareCores scales of a stage, and the factor it
// applied.
type stageTime struct{ f, b, w, begin, slow float64 }

// stageTimes is p's stages' times.
func stageTimes(p *plan.Plan) []stageTime {
	out := make([]stageTime, len(p.Stages))
	for s, st := range p.Stages {
		out[s] = stageTime{st.ForwardS, st.BackwardS, st.WeightS, st.BeginS, st.Slowdown}
	}
	return out
}

// setStageTimes puts back times stageTimes took.
func setStageTimes(p *plan.Plan, ts []stageTime) {
	for s, t := range ts {
		st := &p.Stages[s]
		st.ForwardS, st.BackwardS, st.WeightS, st.BeginS, st.Slowdown = t.f, t.b, t.w, t.begin, t.slow
	}
}

// placeOn places the stages on devs, prices and predicts the plan, and
// prices the sharing of its hosts' cores by how many workers are busy at
// once (shareCores).
func placeOn(p *plan.Plan, in []stageIn, devs [][]int, cm *costModel) error {
	if err := setDevices(p, in, devs, cm); err != nil {
		return err
	}
	if err := p.Predict(); err != nil {
		return err
	}
	if err := lateGathers(p, cm); err != nil {
		return err
	}
	return shareCores(p, in, cm)
}

// setDevices gives the stages their devices, prices what depends on where
// they are (each stage's flush and each edge's transfer) and builds the
// schedule for those prices.
func setDevices(p *plan.Plan, in []stageIn, devs [][]int, cm *costModel) error {
	for i := range p.Stages {
		st := &p.Stages[i]
		st.Devices = devs[i]
		kc := cm.kind(in[i].kind)
		st.FlushS, st.BucketBytes = kc.planFlush(p, i, kc.slow)
		st.GatherS, st.GatherBucketBytes = 0, 0 // lateGathers moves it again
	}
	workers := 0
	for _, st := range p.Stages {
		workers += len(st.Devices)
	}
	p.FixedS = p.Device.IterationFixed(workers)
	for i := range p.Edges {
		priceEdge(p, i, in, cm)
	}
	return schedule(p)
}

// priceEdge prices edge i of p where its stages are: the transport the run
// will use, a micro-batch's transfer over it, and what its messages cost
// the stage at either end. Between stages of kf and kt replicas, each
// replica sends every replica across the rows they share (runtime's
// peers): messages of a micro-batch's rows over max(kf, kt), fanOut of
// them from each sender and fanIn into each receiver. A sender's messages
// go one after another: its cost is fanOut messages', and the last of them
// lands (fanOut−1) send calls after the first would; and the messages of a
// sender, or into a receiver, pass its link one after another: the last
// lands when all their bytes have. Over NATS on a host of more workers
// than two, a message waits for a core as long as the profile's joins
// measured (Device.JoinExtra).
func priceEdge(p *plan.Plan, i int, in []stageIn, cm *costModel) {
	e := &p.Edges[i]
	from, to := p.Stages[e.From], p.Stages[e.To]
	kf, kt := len(from.Devices), len(to.Devices)
	fanOut, fanIn := ceilDiv(int64(kt), int64(kf)), ceilDiv(int64(kf), int64(kt))
	m := ceilDiv(p.MicroBatch, int64(max(kf, kt)))
	bytes := float64(e.Bytes * m)
	e.Inter = node(p, from.Devices[0]) != node(p, to.Devices[0]) || spans(p, from.Devices) || spans(p, to.Devices)
	a, b := in[e.From].kind, in[e.To].kind
	var l link
	if a != b { // between kinds: the cluster's link between nodes, over NATS
		bw, lat := p.Cluster.Link(a, b)
		l = link{plan.TransportNATS, lat, bw}
	} else {
		l = edgeLink(cm.kind(a).dev, e.Inter)
		if l.transport == plan.TransportIPC && !p.IPCTensors(cm.g, i) {
			l = natsLink(cm.kind(a).dev, e.Inter)
		}
	}
	e.Transport = l.transport
	msg := plan.MessageBytes(e.Transport, bytes)
	send, _ := cm.kind(a).dev.MessageCPU(msg)
	_, recv := cm.kind(b).dev.MessageCPU(msg)
	transfer := func(bytes float64) float64 {
		t := l.time(bytes)
		if bytes > 0 { // the messages share a sender's or a receiver's link: their bytes pass one after another
			s, _ := cm.kind(a).dev.MessageCPU(plan.MessageBytes(e.Transport, bytes))
			t += float64(max(fanOut, fanIn)-1)*bytes/l.bw + float64(fanOut-1)*s
		}
		if bytes > 0 && a == b && !e.Inter && e.Transport == plan.TransportNATS { // more workers on the host than two: the message waits for a core
			t += cm.kind(a).dev.JoinExtra(p.NodeWorkers(node(p, to.Devices[0])))
		}
		return t
	}
	e.Transfer, e.GradTransfer = transfer(bytes), cm.gradTransfer(transfer, bytes)
	e.SendS, e.RecvS = float64(fanOut)*send, float64(fanIn)*recv
	e.HoldS = cm.kind(a).dev.SendHoldS
}

// kindPlacements are placements of each kind's stages on its devices (the
// same for devices of one kind): placements', a kind with fewer candidates
// than another keeping its last in the later ones.
func kindPlacements(p *plan.Plan, in []stageIn) [][][]int {
	if p.Cluster == nil {
		ks := make([]int, len(in))
		for i, s := range in {
			ks[i] = s.k
		}
		return placements(ks, p.Devices, p.DevicesPerNode)
	}
	perKind := make([][][][]int, len(p.Cluster.Kinds)) // per kind, its candidates
	which := make([][]int, len(p.Cluster.Kinds))       // per kind, its stages
	n := 1                                             // candidates: the most any kind has
	for t, k := range p.Cluster.Kinds {
		var ks []int
		for i, s := range in {
			if s.kind == t {
				ks, which[t] = append(ks, s.k), append(which[t], i)
			}
		}
		if len(ks) > 0 {
			perKind[t] = placements(ks, k.Devices, k.DevicesPerNode)
			n = max(n, len(perKind[t]))
		}
	}
	out := make([][][]int, n)
	for c := range out {
		out[c] = make([][]int, len(in))
	}
	for c := range out {
		for t := range p.Cluster.Kinds {
			if len(perKind[t]) == 0 {
				continue
			}
			devs := perKind[t][min(c, len(perKind[t])-1)]
			base := p.Cluster.Base(t)
			for j, i := range which[t] {
				for _, d := range devs[j] {
					out[c][i] = append(out[c][i], base+d)
				}
			}
		}
	}
	return out
}

// edgeBytes is the bytes per sample of the named ops' outputs, a stage
// edge's tensors, in the plan's precision.
func edgeBytes(g *dag.Graph, tensors []string, cm *costModel) int64 {
	var b int64
	for _, name := range tensors {
		if i, ok := g.OpIndex(name); ok {
			b += cm.tensorBytes(g.Out(i))
		}
	}
	return b
}

// chainEdges links stage i to i+1 with every tensor live across that cut:
// produced in stages ≤ i and read in stages > i.
func chainEdges(p *plan.Plan, g *dag.Graph, sg *partition.StageGraph, cm *costModel) {
	for i := 0; i+1 < len(sg.Stages); i++ {
		e := plan.PlanEdge{From: i, To: i + 1}
		for s := 0; s <= i; s++ {
			for _, op := range sg.Stages[s] {
				for _, c := range g.Consumers(op) {
					if sg.StageOf(c) > i {
						e.Tensors = append(e.Tensors, g.Op(op).Name)
						e.Bytes += cm.tensorBytes(g.Out(op))
						break
					}
				}
			}
		}
		sort.Strings(e.Tensors)
		p.Edges = append(p.Edges, e)
	}
}

func node(p *plan.Plan, dev int) int { return p.NodeOf(dev) }

// spans says whether devices lie on more than one node.
func spans(p *plan.Plan, devs []int) bool {
	for _, d := range devs {
		if node(p, d) != node(p, devs[0]) {
			return true
		}
	}
	return false
}

// schedule builds the action lists for the plan's priced stages and edges
// (1F1B warms up to hide transfers where memory allows: microbatch.Warmup).
// They stay in memory during the search and are written out as text by
// FillActions, for the plan that is kept.
func schedule(p *plan.Plan) error {
	sch, err := microbatch.NewTimed(p.Schedule, p.Pipeline(), p.Timing(), p.MemoryLimit)
	if err != nil {
		return err
	}
	p.SetSchedule(sch)
	return nil
}

// modelInputs is the model inputs ops read, each once, in order.
func modelInputs(g *dag.Graph, ops []int) []string {
	var out []string
	seen := map[string]bool{}
	for _, i := range ops {
		for _, t := range g.OpInputs(i) {
			if t.Producer < 0 && !seen[t.Name] {
				seen[t.Name] = true
				out = append(out, t.Name)
			}
		}
	}
	return out
}

// stageBegin is when stage s of in can begin its first action: once the
// coordinator's go has reached its last worker (workers are told stage by
// stage) and it has made the model inputs it reads, slowed by slow.
func stageBegin(g *dag.Graph, o *Options, cm *costModel, in []stageIn, s int, slow float64) float64 {
	return cm.kind(in[s].kind).dev.GoDelay(lastWorker(in, s)) + slow*o.OpTimes.InputSeconds(modelInputs(g, in[s].ops), o.Batch)
}

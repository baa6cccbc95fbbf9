package search

import (
	"math"
	"slices"
	"sync"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
)

// costModel prices ops, stages and transfers on one device type.
type costModel struct {
	g        *dag.Graph
	dev      plan.Device
	devices  int
	perNode  int
	limit    int64      // bytes per device
	optBytes int64      // optimizer state bytes per parameter
	mu       sync.Mutex // guards opTimes
	opTimes  map[int64][]opTime
	measured []*plan.OpSeries // by op, from Options.OpTimes; nil: priced from FLOPs and bytes

	sets  opSets // scratch for newBlock
	mixes []bool // per op: its kind mixes samples (dag.Kind.MixesSamples), looked up once

	hashOnce sync.Once
	hash     string // dag.ModelHash(g), for every plan assembled

	// kinds, on a cluster of several device kinds (Options.Cluster), is a
	// cost model per kind, this one the first; nil on devices of one kind
	kinds []*costModel

	// recompute: "auto" (the planner may make a stage recompute its forward
	// during backward), "off" or "all" (every stage does: price and
	// priceOps return the recomputing variant)
	recompute string

	// slow is how much longer every op takes than alone, with a node's
	// workers sharing its host's cores (plan.Device.Slowdown): 1 where the
	// profile measured no sharing
	slow float64
	// msgs says whether the profile prices messages (messageCPU)
	msgs bool

	// tu is how the planners that price with this model run: the
	// default's, or the Search's (spaces.costModel)
	tu tuning

	// prec is the precision the plan is priced in (Options.Precision);
	// prod is dev as its matrix products run in it (plan.Device.InPrecision),
	// what ops of dag.Kind.Products are priced on; act is the bytes of an
	// activation element (plan.ActivationBytes) and copyB the bytes per
	// parameter of a weight copy in the precision (plan.WeightCopyBytes)
	prec  string
	prod  plan.Device
	act   int64
	copyB int64
	// fused: attention runs fused (Options.Attention): its scores' FLOPs
	// priced at the device's float32 rate, on the CUDA cores, the backward
	// making them again; its probabilities kept none of
	fused bool

	// state is where the stages' optimizer state may live
	// (Options.OptimizerState: auto, replicated, sharded, host); stream
	// says whether a stage may stream its weights from host memory
	// (Options.NoStreaming), streamB is the bytes a streamed weight takes
	// (its precision's copy, else float32); hostBW and hostMem are the
	// host link's and the host memory's bandwidth (state.go)
	state   string
	mayRec  bool // the planner may let a stage recompute (Options.mayRecompute)
	stream  bool
	streamB int64
	hostBW  float64
	hostMem float64
	// kept is selective backprop's fraction of rows with a backward pass
	// (Options.BackpropFraction; selective.go); 0: every row
	kept float64
	// versionB is the bytes per parameter of a second version of the
	// weights (its float32 copy and its copy in the precision), turnB what
	// making it costs the step in memory traffic (the newest read, the copy
	// written), where the schedule has no flush (2bw: versions.go); 0 else
	versionB, turnB int64
	stale           staleLeft // plans the planners left out as too stale (twobw.go)
	// overlap: a stage's all-reduce may overlap its last weight pass
	// (overlap.go); split: the schedule splits the backward, so that pass
	// is the weight gradients alone
	overlap, split bool
	buckets        bucketCache // the stages' buckets, priced (overlap.go)
}

// opTime is one op's time for one call on a per-device micro-batch.
type opTime struct{ f, bi, bw float64 }

func newCostModel(g *dag.Graph, o *Options) *costModel {
	cm := &costModel{g: g, dev: o.Device, devices: o.Devices, perNode: o.DevicesPerNode,
		limit: o.MemoryLimit, optBytes: o.OptimizerBytes, opTimes: map[int64][]opTime{}, recompute: o.Recompute,
		slow: o.Device.Slowdown(plan.HostWorkers(o.Devices, o.DevicesPerNode)), tu: defaultTuning(),
		prec: o.Precision, act: plan.ActivationBytes(o.Precision), copyB: plan.WeightCopyBytes(o.Precision),
		fused: o.Attention == plan.Fused}
	cm.prod, _ = o.Device.InPrecision(o.Precision) // withDefaults checked the device has it
	cm.state, cm.stream, cm.streamB, cm.mayRec = o.OptimizerState, !o.NoStreaming, cm.copyB, o.mayRecompute()
	if cm.streamB == 0 {
		cm.streamB = 4
	}
	cm.hostBW, _, _ = o.Device.HostLink()
	cm.hostMem = o.Device.HostStepBW()
	cm.msgs = o.Device.SendS > 0 || o.Device.SendBW > 0 || o.Device.RecvS > 0 || o.Device.RecvBW > 0
	if o.OpTimes != nil {
		cm.measured, _ = resolveOpTimes(o.OpTimes, g) // checked by withDefaults
	}
	cm.mixes = make([]bool, g.NumOps())
	for i := range cm.mixes {
		cm.mixes[i] = g.Op(i).Kind.MixesSamples()
	}
	cm.selective(o.BackpropFraction)
	cm.versions(o.sched)
	cm.overlap, cm.split = !o.NoOverlap, o.sched.Split
	return cm
}

// kind is the cost model of kind t's stages.
func (cm *costModel) kind(t int) *costModel {
	if cm.kinds == nil {
		return cm
	}
	return cm.kinds[t]
}

// modelHash is the graph's dag.ModelHash, computed once.
func (cm *costModel) modelHash() string {
	cm.hashOnce.Do(func() { cm.hash = dag.ModelHash(cm.g) })
	return cm.hash
}

// times returns every op's time at per-device micro-batch m (cached), on
// a host its node's workers share (slow).
func (cm *costModel) times(m int64) []opTime {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if t, ok := cm.opTimes[m]; ok {
		return t
	}
	t := make([]opTime, cm.g.NumOps())
	for i := range t {
		t[i] = cm.keptTimes(cm.opTime(i, m))
		if cm.slow != 1 {
			t[i] = opTime{cm.slow * t[i].f, cm.slow * t[i].bi, cm.slow * t[i].bw}
		}
	}
	cm.opTimes[m] = t
	return t
}

// opTime prices one op: its measured times where the search has them (an
// OpTimes), else forward, input gradient and weight gradient, each a
// kernel whose memory traffic is its activations (per sample × m, in the
// precision's bytes) plus its parameters (a product's in its weight copy,
// where the precision makes one), except gathers (embeddings), which touch
// only the rows they read. A product's FLOPs run at the precision's rate.
func (cm *costModel) opTime(i int, m int64) opTime {
	if cm.measured != nil {
		return seriesAt(cm.measured[i], m)
	}
	c := cm.g.Cost(i)
	mf := float64(m)
	act := float64(cm.actBytes(c.MemBytes - 4*c.Params))
	dev, weight := cm.dev, 4.0
	if cm.g.Op(i).Kind.Products() {
		dev = cm.prod
		if cm.copyB > 0 {
			weight = float64(cm.copyB)
		}
	}
	mem := act*mf + weight*float64(c.Params)
	if cm.g.Op(i).Kind.Gathers() {
		mem = act * mf
	}
	if cm.fused && c.ScoreFLOPs > 0 {
		return cm.fusedAttention(c, dev, mf, mem, act)
	}
	t := opTime{f: kernel(dev, c.FwdFLOPs*mf, mem)}
	t.bi = kernel(dev, c.BwdInputFLOPs*mf, act*mf)
	if c.BwdWeightFLOPs > 0 {
		t.bw = kernel(dev, c.BwdWeightFLOPs*mf, mem)
	}
	return t
}

// fusedBackward is the fused attention backward's scores FLOPs over its
// forward's: per (query, key, head) the forward's q·k and P·v are 4·dh
// FLOPs; the backward's query pass makes q·k and gO·v and adds dS·k (6·dh),
// its key pass makes q·k and gO·v and adds dS·q and P·gO (8·dh).
const fusedBackward = 14.0 / 4

// fusedAttention prices an attention op of cost c that runs fused: its
// projections as products on dev, its scores and mixing kernels on the
// CUDA cores at the device's float32 rate (cm.dev), reading the heads
// (activations) once a pass; the unfused backward's 2× the scores' FLOPs
// become fusedBackward× (made again, not read).
func (cm *costModel) fusedAttention(c dag.Cost, dev plan.Device, mf, mem, act float64) opTime {
	proj := c.FwdFLOPs - c.ScoreFLOPs
	t := opTime{f: kernel(dev, proj*mf, mem) + kernel(cm.dev, c.ScoreFLOPs*mf, act*mf)}
	t.bi = kernel(dev, (c.BwdInputFLOPs-2*c.ScoreFLOPs)*mf, act*mf) + kernel(cm.dev, fusedBackward*c.ScoreFLOPs*mf, act*mf)
	if c.BwdWeightFLOPs > 0 {
		t.bw = kernel(dev, c.BwdWeightFLOPs*mf, mem)
	}
	return t
}

// stashBytes is op i's stash per sample in the precision's bytes, a fused
// attention's probabilities left out for its rows' log-sum-exps (4 bytes
// each, float32: a head's row per query).
func (cm *costModel) stashBytes(i int) int64 {
	c := cm.g.Cost(i)
	b := c.StashBytes
	if cm.fused && c.ScoreBytes > 0 {
		x := cm.g.OpInputs(i)[0].Shape
		rows := int64(cm.g.Op(i).Attrs.Heads) * x[0]
		return satAdd(cm.actBytes(b-c.ScoreBytes), satMul(4, rows))
	}
	return cm.actBytes(b)
}

// actBytes is b, bytes of float32 activations as the dag counts them, in
// the precision's bytes (bf16: half).
func (cm *costModel) actBytes(b int64) int64 {
	if cm.act == 4 {
		return b
	}
	return satMul(b, cm.act) / 4
}

// tensorBytes is a tensor's bytes per sample in the plan's precision.
func (cm *costModel) tensorBytes(t *dag.Tensor) int64 { return plan.TensorBytes(t, cm.prec) }

// static is the per-device memory of a stage's parameters: weights, gradients
// and optimizer state, and the weights' copy in the precision (bf16);
// data-parallel replicas each hold all of it.
func (cm *costModel) static(params int64) int64 {
	return satMul(params, 8+cm.optBytes+cm.copyB+cm.versionB)
}

// setMemory fills c's memory terms for blk on k devices at per-device
// micro-batch m, its state at placement pl.
func (cm *costModel) setMemory(c *stageCost, blk *block, k int, m int64, pl placement) {
	c.static = cm.placedStatic(pl, blk, k)
	c.stashPerMB = satMul(blk.stash, m)
	c.work = satMul(blk.work, m)
}

// held is what blk holds at per-device micro-batch m besides its static
// bytes, regardless (base) and per micro-batch in flight, as the cost
// model prices its stages (recomputing, where every stage does).
func (cm *costModel) held(blk *block, m int64) (base, stash int64) {
	base, stash = satMul(blk.work, m), satMul(blk.stash, m)
	if cm.recompute == "all" {
		return satAdd(base, stash), satMul(blk.inputs, m)
	}
	return base, stash
}

// primaryFor is the placement a stage of blk on k devices at per-device
// micro-batch m is priced at first: primary's, where every stage's state
// is in host memory the one spill finds.
func (cm *costModel) primaryFor(blk *block, k int, m int64) placement {
	pl := cm.primary(k)
	if pl == placeHost {
		base, stash := cm.held(blk, m)
		pl = cm.spill(blk, k, base, stash)
	}
	return pl
}

// finish prices c, its pass times set, as a stage of blk on k devices with
// mbs micro-batches per iteration and its state at placement pl: its pass
// times where the weights stream, its flush, period, link and memory, and
// the variant the cost model makes of it (recomputed).
func (cm *costModel) finish(c stageCost, blk *block, k, mbs int, pl placement) stageCost {
	if pl == placeStreamed {
		c.f, c.bi, c.bw = cm.streamTimes(blk.params, c.f, c.bi, c.bw)
	}
	r := cm.dpRing(k)
	c.flush = cm.dpFlush(pl, blk.params, k, r, r.allReduce(4*float64(blk.params)), c.window(cm.split), cm.slow)
	c.period = c.f + c.bi + c.bw + c.flush/float64(mbs) + cm.messages(blk, c.m)
	c.link = 2 * transfer(cm.dev, float64(max(blk.inB, blk.outB))*float64(c.m), cm.interDP())
	cm.setMemory(&c, blk, k, c.m, pl)
	c.place, c.host = pl, cm.hostBytes(pl, blk.params, mbs)
	unsplittable(&c, blk, k)
	return cm.variant(c, blk)
}

// recomputed is c for a stage that keeps only its inputs per micro-batch in
// flight and reruns its forward at the start of each backward: the backward
// takes the forward's time more, each micro-batch in flight stashes only
// the tensors the stage reads from outside, and the full activations of one
// micro-batch (the stash c kept per micro-batch) are live during its
// backward, on top of the working memory.
func recomputed(c stageCost, blk *block) stageCost {
	r := c
	r.bi += c.f
	r.period += c.f
	r.stashPerMB = satMul(blk.inputs, c.m)
	r.work = satAdd(c.work, c.stashPerMB)
	r.recompute = true
	return r
}

// variant is c as the search prices it: recomputed when every stage must
// recompute.
func (cm *costModel) variant(c stageCost, blk *block) stageCost {
	if cm.recompute == "all" {
		return recomputed(c, blk)
	}
	return c
}

// satMul is a·b for a, b ≥ 0, or math.MaxInt64 where that overflows: the
// bytes of an absurd batch saturate (and fit nowhere) instead of wrapping
// negative (and fitting anywhere).
func satMul(a, b int64) int64 {
	if a > 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// satAdd is a+b for a, b ≥ 0, or math.MaxInt64 where that overflows.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// maxInFlight is the most micro-batches in flight that fit in limit, given
// the bytes held regardless (base) and per micro-batch (stash): -1 if none
// fit, math.MaxInt if every count does.
func maxInFlight(base, stash, limit int64) int {
	switch {
	case base > limit:
		return -1
	case stash == 0:
		return math.MaxInt
	}
	return int(min((limit-base)/stash, math.MaxInt32))
}

// optimizerStep is a stage's optimizer step: weights, gradients and state
// read and written once, on a host its node's workers share.
func (cm *costModel) optimizerStep(params int64) float64 {
	return cm.optimizerStepAt(params, cm.slow)
}

// optimizerStepAt is optimizerStep slowed by slow.
func (cm *costModel) optimizerStepAt(params int64, slow float64) float64 {
	if params <= 0 {
		return 0
	}
	// weights and gradients read, weights written, the state read and
	// written; the weight copy (bf16) rounded from the weights
	opt := float64(params) * float64(8+2*cm.optBytes+2*cm.copyB) / cm.dev.MemBW
	if slow != 1 {
		opt *= slow
	}
	return opt
}

// messages is what a block's boundary messages cost it per micro-batch at
// per-device micro-batch m (messageCPU).
func (cm *costModel) messages(blk *block, m int64) float64 {
	if !cm.msgs {
		return 0
	}
	return messageCPU(cm.dev, float64(blk.inB)*float64(m), float64(blk.outB)*float64(m))
}

// interDP says whether the planner prices a stage-to-stage link as crossing
// nodes. Placement is not known inside the DP, so it assumes the worst link
// whenever the run spans nodes; the simulator uses the real placement.
func (cm *costModel) interDP() bool { return cm.devices > cm.perNode }

// block is a candidate stage: a convex set of ops, with per-sample sizes.
type block struct {
	ops        []int
	params     int64
	maxParams  int64 // the most parameters of one op: what a streamed stage holds twice
	stash      int64 // bytes per sample kept for backward
	work       int64 // bytes per sample of the largest output and its gradient
	inB, outB  int64 // bytes per sample crossing into and out of the block
	inputs     int64 // bytes per sample of every tensor the block reads from outside: a recomputing stage's stash
	fwdSamples float64
	// whole: an op of the block computes a sample from others of its
	// micro-batch (batch_norm), so the block runs on one device, never
	// split across data-parallel replicas.
	whole bool
}

// newBlock sums the stats of ops; cross gives the boundary bytes.
func (cm *costModel) newBlock(ops []int, cross func(ops []int) (int64, int64)) *block {
	b := &block{ops: ops}
	for _, i := range ops {
		c := cm.g.Cost(i)
		b.params += c.Params
		b.maxParams = max(b.maxParams, c.Params)
		b.stash += cm.stashBytes(i)
		b.work = max(b.work, 2*cm.tensorBytes(cm.g.Out(i)))
		b.fwdSamples += c.FwdFLOPs
		b.whole = b.whole || cm.mixes[i]
	}
	b.inB, b.outB = cross(ops)
	b.inputs = cm.inputBytes(ops)
	return b
}

// opSets marks sets of ops for newBlock's sums: a mark per op stamped with
// the set's generation, so that a set costs its size, not the graph's.
type opSets struct {
	mu         sync.Mutex // guards everything below
	in, seen   []uint32   // per op: in the set; its output counted
	gen        uint32
	seenInputs []string // the model inputs counted
}

// begin marks ops as the set (the caller holds mu).
func (s *opSets) begin(n int, ops []int) {
	if s.in == nil {
		s.in, s.seen = make([]uint32, n), make([]uint32, n)
	}
	s.gen++
	for _, i := range ops {
		s.in[i] = s.gen
	}
	s.seenInputs = s.seenInputs[:0]
}

// inputBytes is the bytes per sample of the tensors ops read from outside
// themselves (model inputs and other ops' outputs), each counted once.
func (cm *costModel) inputBytes(ops []int) int64 {
	s := &cm.sets
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begin(cm.g.NumOps(), ops)
	var n int64
	for _, i := range ops {
		for _, t := range cm.g.OpInputs(i) {
			switch {
			case t.Producer >= 0:
				if s.in[t.Producer] == s.gen || s.seen[t.Producer] == s.gen {
					continue
				}
				s.seen[t.Producer] = s.gen
			case slices.Contains(s.seenInputs, t.Name):
				continue
			default:
				s.seenInputs = append(s.seenInputs, t.Name)
			}
			n = satAdd(n, cm.tensorBytes(t))
		}
	}
	return n
}

// boundary is the bytes per sample of the largest op output entering and the
// largest leaving a set of ops. In a graph plan each stage edge is a link of
// its own, so a stage's busiest link carries about one producer's tensor; a
// tensor counts once however many ops of the other side read it.
func (cm *costModel) boundary(ops []int) (in, out int64) {
	s := &cm.sets
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begin(cm.g.NumOps(), ops)
	for _, i := range ops {
		for _, t := range cm.g.OpInputs(i) {
			if t.Producer >= 0 && s.in[t.Producer] != s.gen {
				in = max(in, cm.tensorBytes(t))
			}
		}
		for _, c := range cm.g.Consumers(i) {
			if s.in[c] != s.gen {
				out = max(out, cm.tensorBytes(cm.g.Out(i)))
				break
			}
		}
	}
	return in, out
}

// stageCost is a block's price on k devices at micro-batch b with M
// micro-batches per iteration.
type stageCost struct {
	m          int64   // per-device micro-batch
	f, bi, bw  float64 // seconds per micro-batch
	flush      float64 // seconds per iteration
	period     float64 // f+bi+bw + flush/M: the DP's per-micro-batch time
	link       float64 // seconds a boundary link is busy per micro-batch (activations and gradients)
	static     int64
	stashPerMB int64 // bytes per device per micro-batch in flight
	work       int64
	recompute  bool // the stage reruns its forward during backward (recomputed)
	place      placement
	host       int64 // bytes its placement copies between host and device per iteration (hostBytes)
}

// ceilDiv is a/b rounded up, for a ≥ 0 and b > 0; it does not add b − 1
// to a first, which overflows for a batch near 2^63.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// memory is the per-device peak of a stage holding inflight micro-batches.
func (s *stageCost) memory(inflight int) int64 {
	return satAdd(satAdd(s.static, satMul(int64(inflight), s.stashPerMB)), s.work)
}

// priceOps prices an arbitrary op set on k devices at micro-batch b.
func (cm *costModel) priceOps(ops []int, blk *block, k int, b int64, mbs int) stageCost {
	m := ceilDiv(b, int64(k))
	t := cm.times(m)
	c := stageCost{m: m}
	for _, op := range ops {
		c.f += t[op].f
		c.bi += t[op].bi
		c.bw += t[op].bw
	}
	return cm.finish(c, blk, k, mbs, cm.primaryFor(blk, k, m))
}

// unsplittable makes a block that must run whole fit nowhere on more than
// one device.
func unsplittable(c *stageCost, blk *block, k int) {
	if blk.whole && k > 1 {
		c.static = math.MaxInt64
	}
}

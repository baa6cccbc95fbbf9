package stage

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Executor runs one stage's ops for a micro-batch at a time on its backend:
// Forward, then Backward for the gradients of the stage's inputs, then (now
// or deferred by the schedule) Weights for its parameters' gradients, which
// accumulate across the micro-batches of an iteration; then it ends the step
// (EndStep, ApplyStep: step.go).
type Executor struct {
	g       *dag.Graph
	ops     []int // the stage's ops, in topological order
	kernels map[int]kernel.Kernel[float32]
	be      Backend // where it computes and the state lives
	// Params and Grads are the stage's parameters and their gradients by
	// name (dag.Param.Key): the state on the CPU backend, the host's copies
	// on another (Backend says when they are current). Nothing but the
	// executor and its backend writes them during training.
	Params map[string]*Value[float32]
	Grads  map[string]*Value[float32]
	// Buffers is the stage's buffers by name (batch_norm's running
	// statistics): state that forward passes update and no optimizer steps.
	Buffers map[string]*Value[float32]
	mbs     map[int]*microBatch // the stash, per micro-batch in flight
	// OpSeconds accumulates each op's time: [0] forward, [1] backward (for
	// the inputs, and for the weights whether in Backward or in Weights).
	OpSeconds map[string]*[2]float64
	// SyncOps makes OpSeconds time each op on a device to its end, not to
	// its launch: the device is synchronised after every op (for timing
	// ops, at the cost of overlap; graphpipe profile --model).
	SyncOps bool
	devErr  error       // the first device error of a backward pass (GPU kernels)
	ctx     kernel.Pass // what the running pass tells its kernels

	train    *TrainOptions // the optimizer's, the schedule's and clipping's (SetOptimizer)
	lossOp   string        // the loss op's name when the stage holds it
	stepping bool          // a step's first training Forward has run
	losses   []lossPart    // the step's losses, in Forward's order
	pending  *stepCheck    // EndStep's check, until ApplyStep
	// shard is the replica's share of a stage whose optimizer state is
	// sharded (ShardOptimizer, shard.go); nil: it holds all of it
	shard *shardView
	// ovl is the step's all-reduce overlapped with its last weight pass
	// (OverlapNext, overlap.go); nil: after the pass, in EndStep
	ovl *overlap
	// late: a sharded stage's all-gather runs after ApplyStep returns
	// (GatherLate, gather_late.go); gathering is the one running, lateErr
	// the error one ended with, not yet returned
	late      bool
	gathering *lateGather
	lateErr   error
	// gatherBks cuts a late all-gather into buckets (GatherBuckets); nil:
	// whole
	gatherBks []Bucket
	// opStarts, where set (by tests), is told each op a forward pass
	// starts, once its inputs and parameters are in
	opStarts func(i int)

	// Recompute makes Forward keep, until the micro-batch's Backward, only
	// what it was fed, and Backward rerun the forward first (recompute.go):
	// activation memory for one micro-batch instead of one per micro-batch
	// in flight, for one more forward; the same computation bit for bit.
	Recompute bool
	// SampleLoss makes a training Forward at the stage holding the loss
	// compute each sample's loss (SampleLosses), for selective backprop
	// (selective.go, compact.go).
	SampleLoss bool
	selScale   float32 // EndStep's scale of the gradients (Selected); 0: 1

	// versions is the stale version of the weights where the executor
	// keeps two (SetTwoVersions, twobw.go); reading is the version the
	// pass running reads (nil: Params)
	versions *versions
	reading  map[string]*Value[float32]
}

// allOps is every op of g, in order: a whole-model executor's ops.
func allOps(g *dag.Graph) []int {
	all := make([]int, g.NumOps())
	for i := range all {
		all[i] = i
	}
	return all
}

// microBatch is what one micro-batch keeps between its passes.
type microBatch struct {
	vals   map[string]*Value[float32] // fed tensors and op outputs
	stash  map[int]any                // per op, what its backward needs
	grads  map[string]*Value[float32] // gradients of tensors, filled by Backward
	weight bool                       // Weights is still owed
	pos    Position                   // where its samples are in training
	feeds  map[string]*Value[float32] // what Forward was fed
	shed   bool                       // only the feeds are kept: Backward recomputes the rest
	lossAt int                        // its entry in the step's losses, -1 for none
	// kept, once Compact cut the micro-batch, is the rows its backward
	// passes run on, of rows (none: they do nothing); nil: every row
	kept       []int
	rows       int
	sampleLoss []float64 // each sample's loss (SampleLoss), at the loss's stage
}

// NewExecutor prepares the ops (indices into g) of a stage on a backend
// (on: at most one; none is CPU()), initialising their parameters from
// seed. It fails on an op the backend cannot compute.
func NewExecutor(g *dag.Graph, ops []int, seed int64, on ...Backend) (*Executor, error) {
	be, err := oneBackend(on)
	if err != nil {
		return nil, err
	}
	e := &Executor{g: g, Params: map[string]*Value[float32]{}, Grads: map[string]*Value[float32]{},
		Buffers: map[string]*Value[float32]{}, mbs: map[int]*microBatch{}, OpSeconds: map[string]*[2]float64{}, ctx: kernel.Pass{Seed: seed}}
	pos := map[int]int{}
	for k, i := range g.Order() {
		pos[i] = k
	}
	e.ops = append([]int(nil), ops...)
	sort.Slice(e.ops, func(a, b int) bool { return pos[e.ops[a]] < pos[e.ops[b]] })
	for _, i := range e.ops {
		e.OpSeconds[g.Op(i).Name] = &[2]float64{}
		if i == g.Loss() {
			e.lossOp = g.Op(i).Name
		}
	}
	e.initState(seed)
	if e.kernels, err = be.bind(e); err != nil {
		return nil, err
	}
	e.be = be
	return e, nil
}

// initState initialises the parameters and buffers, and makes the
// gradients (zeros).
func (e *Executor) initState(seed int64) {
	g := e.g
	for k, vals := range initAll(g, e.ops, seed) {
		i := e.ops[k]
		for _, p := range g.Params(i) {
			e.Params[p.Key] = vals[p.Name]
			e.Grads[p.Key] = NewValue[float32](vals[p.Name].Shape...)
		}
		for _, b := range g.Buffers(i) {
			e.Buffers[b.Key] = vals[b.Name]
		}
	}
}

// Backend is the backend the executor runs on.
func (e *Executor) Backend() Backend { return e.be }

// Device is the GPU the executor computes on (its CUDA backend's), nil on
// the CPU: whose Counts say what a step asked of it.
func (e *Executor) Device() *cuda.Device {
	if b, ok := e.be.(*cudaBackend); ok {
		return b.d
	}
	return nil
}

// UseDevice moves the executor onto CUDA(d): the same as making it on that
// backend, its optimizer and the optimizer's state carried over. Call it
// between steps, with nothing in flight.
func (e *Executor) UseDevice(d *cuda.Device) error { return e.use(CUDA(d)) }

// use moves the executor onto backend b.
func (e *Executor) use(b Backend) error {
	switch {
	case len(e.mbs) > 0:
		return fmt.Errorf("stage: UseDevice with %d micro-batches in flight", len(e.mbs))
	case e.stepping:
		return fmt.Errorf("stage: UseDevice in the middle of a step (between its first Forward and ApplyStep)")
	case e.shard != nil || e.Offloaded():
		return fmt.Errorf("stage: UseDevice on an executor whose optimizer state is sharded or offloaded: move it first")
	}
	if err := e.be.fetch(); err != nil { // the host's copies are the state the new backend starts from
		return err
	}
	kernels, err := b.bind(e)
	if err != nil {
		return err
	}
	if e.train != nil {
		st, n, err := e.be.optimizerState()
		if err != nil {
			return err
		}
		if err := b.setOptimizer(*e.train); err != nil {
			return err
		}
		if err := b.loadOptimizerState(st, n); err != nil {
			return err
		}
	}
	old := e.be
	e.kernels, e.be = kernels, b
	return old.close()
}

// initAll is InitParams of every op in ops, over the cores: each op's
// parameters come from a generator of their own, so the split changes
// nothing (a large model's draws take seconds on one core).
func initAll(g *dag.Graph, ops []int, seed int64) []map[string]*Value[float32] {
	out := make([]map[string]*Value[float32], len(ops))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.GOMAXPROCS(0), len(ops)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1)) - 1; k < len(ops); k = int(next.Add(1)) - 1 {
				out[k] = InitParams(g, ops[k], seed)
			}
		}()
	}
	wg.Wait()
	return out
}

// ParamNames lists the stage's parameters, sorted.
func (e *Executor) ParamNames() []string { return sortedNames(e.Params) }

// BufferNames lists the stage's buffers, sorted.
func (e *Executor) BufferNames() []string { return sortedNames(e.Buffers) }

// State is the stage's parameters and buffers by name: what an init file,
// a dump or a checkpoint holds of it. On the CUDA backend these are the
// host's copies, which may be behind the device's: HostState brings them
// up to date first.
func (e *Executor) State() map[string]*Value[float32] {
	if err := e.settleGather(); err != nil {
		e.lateErr = err // the next call that returns errors says it
	}
	out := make(map[string]*Value[float32], len(e.Params)+len(e.Buffers))
	for n, v := range e.Params {
		out[n] = v
	}
	for n, v := range e.Buffers {
		out[n] = v
	}
	return out
}

func sortedNames(m map[string]*Value[float32]) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// params is op i's parameters, then its buffers: what its kernel reads
// (the parameters of the version the pass reads: twobw.go).
func (e *Executor) params(i int) []*Value[float32] {
	var out []*Value[float32]
	src := e.Params
	if e.reading != nil {
		src = e.reading
	}
	for _, p := range e.g.Params(i) {
		out = append(out, src[p.Key])
	}
	for _, b := range e.g.Buffers(i) {
		out = append(out, e.Buffers[b.Key])
	}
	return out
}

// paramGrads is op i's parameters' gradients, nil for its buffers.
func (e *Executor) paramGrads(i int) []*Value[float32] {
	var out []*Value[float32]
	for _, p := range e.g.Params(i) {
		out = append(out, e.Grads[p.Key])
	}
	for range e.g.Buffers(i) {
		out = append(out, nil)
	}
	return out
}

// Forward runs the stage on micro-batch mb, whose samples are at pos in
// training. feeds holds every tensor the stage reads from outside (model
// inputs and other stages' outputs), batch-major. It returns every op
// output of the stage; the stash is kept until the micro-batch's backward
// passes are done. On CUDA only the outputs read outside the stage carry
// host data, valid until the micro-batch's backward passes are done, and
// in an evaluation the loss and its inputs; the others, and a training
// Forward's loss (which the step reads on the device: StepReport.Loss),
// carry their shape only.
func (e *Executor) Forward(mb int, pos Position, feeds map[string]*Value[float32]) (map[string]*Value[float32], error) {
	if !e.gathersByOp(pos) { // a bucketed gather is waited for op by op (run)
		if err := e.settleGather(); err != nil {
			return nil, err
		}
	}
	if _, busy := e.mbs[mb]; busy {
		return nil, fmt.Errorf("stage: micro-batch %d is already in flight", mb)
	}
	if err := e.readFor(pos); err != nil {
		return nil, err
	}
	e.ctx.Pos = pos
	if e.ctx.Pos.Rows == 0 {
		for _, v := range feeds {
			e.ctx.Pos.Rows = v.Shape[0]
			break
		}
	}
	if !pos.Eval {
		if err := e.openStep(); err != nil {
			return nil, err
		}
	}
	if err := e.be.begin(mb); err != nil {
		return nil, err
	}
	out, err := e.forward(mb, feeds)
	if err == nil { // what leaves the stage comes to the host
		err = e.be.outputs(out, pos.Eval)
	}
	if err == nil && !pos.Eval {
		err = e.recordLoss(e.mbs[mb], out)
	}
	if err == nil && !pos.Eval {
		err = e.sampleLosses(e.mbs[mb])
	}
	if err == nil && e.Recompute && !pos.Eval {
		err = e.shed(mb)
	}
	if err != nil { // nothing of a failed micro-batch stays on the device
		if _, ok := e.mbs[mb]; ok {
			e.release(mb)
		} else {
			e.be.release(mb)
		}
		return nil, err
	}
	return out, nil
}

// lossReads says whether the loss op reads name (an evaluation's accuracy
// needs the logits on the host).
func (e *Executor) lossReads(name string) bool {
	if l := e.g.Loss(); l >= 0 {
		for _, t := range e.g.OpInputs(l) {
			if t.Name == name {
				return true
			}
		}
	}
	return false
}

func (e *Executor) forward(mb int, feeds map[string]*Value[float32]) (map[string]*Value[float32], error) {
	m := &microBatch{grads: map[string]*Value[float32]{}, pos: e.ctx.Pos, feeds: feeds, lossAt: -1}
	out, err := e.run(m)
	if err != nil {
		return nil, err
	}
	e.mbs[mb] = m
	return out, nil
}

// run computes every op of the stage forward from m's feeds into m's values
// and stash, and returns the op outputs.
func (e *Executor) run(m *microBatch) (map[string]*Value[float32], error) {
	m.vals, m.stash = make(map[string]*Value[float32], len(m.feeds)+len(e.ops)), make(map[int]any, len(e.ops))
	for k, v := range m.feeds {
		m.vals[k] = v
	}
	out := map[string]*Value[float32]{}
	for _, i := range e.ops {
		if err := e.gatherFor(i); err != nil {
			return nil, err
		}
		if e.opStarts != nil {
			e.opStarts(i)
		}
		start := time.Now()
		var x []*Value[float32]
		for _, t := range e.g.OpInputs(i) {
			v, ok := m.vals[t.Name]
			if !ok {
				return nil, fmt.Errorf("stage: op %q: input %q was not fed", e.g.Op(i).Name, t.Name)
			}
			x = append(x, v)
		}
		y, st, err := e.kernels[i].Forward(x, e.params(i))
		if e.opDone(); err == nil {
			err = e.devErr
		}
		e.OpSeconds[e.g.Op(i).Name][0] += time.Since(start).Seconds()
		if err != nil {
			return nil, err
		}
		m.vals[e.g.Op(i).Name], m.stash[i] = y, st
		out[e.g.Op(i).Name] = y
	}
	return out, nil
}

// Backward propagates gradients through the stage for micro-batch mb. grads
// holds the gradients of the stage's outputs read elsewhere, and of the loss
// (a [1] value: the weight of this micro-batch's mean loss, b/B). It returns
// the gradients of the fed float tensors. With weights set it also adds the
// parameters' gradients; otherwise Weights must follow.
func (e *Executor) Backward(mb int, grads map[string]*Value[float32], weights bool) (map[string]*Value[float32], error) {
	m, ok := e.mbs[mb]
	if !ok {
		return nil, fmt.Errorf("stage: micro-batch %d has no forward pass", mb)
	}
	for k, v := range grads {
		m.grads[k] = v
	}
	e.seedLoss(m, grads)
	if weights {
		if err := e.weightPass(); err != nil {
			return nil, err
		}
		defer e.endWeightPass()
	}
	if m.kept != nil && len(m.kept) == 0 { // selective backprop kept none of its rows
		return e.skipBackward(mb, m, weights)
	}
	if e.lossOp != "" && m.grads[e.lossOp] != nil {
		m.grads[e.lossOp] = keptSeed(m, m.grads[e.lossOp])
	}
	e.ctx.Pos = m.pos
	if err := e.readFor(m.pos); err != nil {
		return nil, err
	}
	e.be.resume(mb)
	if m.shed {
		if err := e.recompute(m); err != nil {
			return nil, err
		}
	}
	for j := len(e.ops) - 1; j >= 0; j-- {
		i := e.ops[j]
		start := time.Now()
		gy, ok := m.grads[e.g.Op(i).Name]
		if !ok {
			e.opFinal(i)
			continue // nothing downstream of this op needs a gradient
		}
		x, gx := e.inputsAndGrads(m, i)
		var gp []*Value[float32]
		if weights {
			gp = e.paramGrads(i)
		}
		e.kernels[i].Backward(gy, x, e.params(i), m.vals[e.g.Op(i).Name], m.stash[i], gx, gp)
		e.opDone()
		e.OpSeconds[e.g.Op(i).Name][1] += time.Since(start).Seconds()
		e.opFinal(i)
	}
	if e.devErr != nil {
		return nil, e.devErr
	}
	m.weight = !weights
	out := map[string]*Value[float32]{}
	for name, v := range m.grads {
		if _, fed := m.vals[name]; fed && e.isFed(name) {
			out[name] = v
		}
	}
	if err := e.be.inputGrads(out); err != nil { // the gradients of what was fed go to the host
		return nil, err
	}
	if weights {
		if err := e.release(mb); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// skipBackward is Backward of a micro-batch whose rows selective backprop
// all skipped: no gradient computed or returned.
func (e *Executor) skipBackward(mb int, m *microBatch, weights bool) (map[string]*Value[float32], error) {
	m.weight = !weights
	if weights {
		return map[string]*Value[float32]{}, e.release(mb)
	}
	return map[string]*Value[float32]{}, nil
}

// opDone waits for the op just launched on the device, when SyncOps asks.
func (e *Executor) opDone() {
	if e.SyncOps && e.devErr == nil {
		if err := e.be.waitOp(); err != nil {
			e.devErr = err
		}
	}
}

// release forgets micro-batch mb's stash (and its device memory).
func (e *Executor) release(mb int) error {
	delete(e.mbs, mb)
	return e.be.release(mb)
}

func (e *Executor) isFed(name string) bool {
	i, ok := e.g.OpIndex(name)
	if !ok {
		return true // a model input
	}
	for _, j := range e.ops {
		if j == i {
			return false
		}
	}
	return true
}

// inputsAndGrads returns op i's input values and their gradient buffers
// (created on first use; nil for int32 tensors and model inputs).
func (e *Executor) inputsAndGrads(m *microBatch, i int) (x, gx []*Value[float32]) {
	for _, t := range e.g.OpInputs(i) {
		v := m.vals[t.Name]
		x = append(x, v)
		if t.DType != dag.Float32 || t.Producer < 0 { // indices and model inputs need no gradient
			gx = append(gx, nil)
			continue
		}
		g, ok := m.grads[t.Name]
		if !ok {
			g = e.newGrad(v.Shape)
			m.grads[t.Name] = g
		}
		gx = append(gx, g)
	}
	return x, gx
}

// Weights adds micro-batch mb's parameter gradients, deferred from Backward,
// and releases its stash.
func (e *Executor) Weights(mb int) error {
	m, ok := e.mbs[mb]
	if !ok || !m.weight {
		return fmt.Errorf("stage: micro-batch %d owes no weight gradients", mb)
	}
	if err := e.weightPass(); err != nil {
		return err
	}
	defer e.endWeightPass()
	if m.kept != nil && len(m.kept) == 0 {
		return e.release(mb)
	}
	e.ctx.Pos = m.pos
	if err := e.readFor(m.pos); err != nil {
		return err
	}
	for _, i := range e.ops {
		if len(e.g.Params(i)) == 0 {
			continue
		}
		gy, ok := m.grads[e.g.Op(i).Name]
		if !ok {
			e.opFinal(i)
			continue
		}
		start := time.Now()
		e.be.resume(mb)
		x, _ := e.inputsAndGrads(m, i)
		gx := make([]*Value[float32], len(x)) // inputs' gradients are done
		e.kernels[i].Backward(gy, x, e.params(i), m.vals[e.g.Op(i).Name], m.stash[i], gx, e.paramGrads(i))
		e.opDone()
		e.OpSeconds[e.g.Op(i).Name][1] += time.Since(start).Seconds()
		e.opFinal(i)
	}
	if e.devErr != nil {
		return e.devErr
	}
	return e.release(mb)
}

// newGrad is a gradient buffer, where the backend keeps it.
func (e *Executor) newGrad(shape []int) *Value[float32] { return e.be.newGrad(shape) }

// InFlight is the number of micro-batches stashed.
func (e *Executor) InFlight() int { return len(e.mbs) }

// ZeroGrads drops the step in flight without an update: the accumulated
// gradients cleared, wherever the backend keeps them (for timing passes
// outside training). It reports a device failure.
func (e *Executor) ZeroGrads() error {
	e.closeStep()
	return e.be.clearGrads()
}

// Close gives back what the backend holds (on a device, the training state,
// brought to the host first, so State is current after it, and any
// micro-batch still in flight); the executor must not run again.
func (e *Executor) Close() error {
	first := e.settleGather()
	for mb := range e.mbs {
		if err := e.release(mb); err != nil && first == nil {
			first = err
		}
	}
	if err := e.be.close(); err != nil && first == nil {
		first = err
	}
	return first
}

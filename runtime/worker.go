package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Worker runs one replica of one stage of a plan: its action list, once per
// iteration, on its rows of every micro-batch. Its state is cut in parts,
// each with the fields it guards: its role in the plan, its links to the
// other workers, its feed of data, its timeline, the watch its heartbeat
// reads and the test hook's kill point.
type Worker struct {
	ID      int32 // worker id, also its endpoint's
	Stage   int
	Replica int
	// Emulate replaces computation by waits of the plan's times and
	// transfers by their modelled times; frames still flow (sleeper).
	Emulate bool

	role role
	do   executor        // computer, or sleeper when emulating
	ex   *stage.Executor // nil when emulating
	dev  *cuda.Device    // the worker's device, nil on the CPU
	// lastStep is the executor's report of the last iteration's step
	// (stage.Executor.EndStep; zero when emulating).
	lastStep stage.StepReport
	sb       selective // selective backprop's part (selective.go)
	backprop int       // the last iteration's samples with a backward pass (selective backprop)

	links    links
	feed     feed
	timeline timeline
	watch    *watch
	kill     killHook
	// streamShards: stream checkpoint shards even where the directory is
	// seen (Config.StreamCheckpoints)
	streamShards bool
	// twoBW is a schedule without a flush's iterations (twobw.go), nil
	// for a flushed one; steps is the run's length, whose last iteration
	// runs nothing ahead
	twoBW *twoBW
	steps int64
	// ovp is the stage's buckets, where its all-reduce overlaps its last
	// weight pass, and ovl an iteration's in flight (overlap.go)
	ovp *overlapPlan
	ovl *overlapRun
	// gatherBks is the stage's late all-gather's buckets (overlap.go)
	gatherBks []stage.Bucket
}

// NewWorker prepares worker id of job's plan over an endpoint, as job's
// Options and this process's Config say.
func NewWorker(job *Job, id int, ep *wire.Endpoint) (*Worker, error) {
	g, plan, o := job.Graph, job.Plan, job.Options
	sch, err := plan.ScheduleOf()
	if err != nil {
		return nil, err
	}
	lay := layout(plan)
	st, rep := lay.where(id)
	if st < 0 {
		return nil, fmt.Errorf("plan: worker %d is beyond its %d devices", id, lay.total)
	}
	w := &Worker{ID: int32(id), Stage: st, Replica: rep, role: newRole(g, plan, lay, sch, st),
		feed:  feed{spec: o.Data, reads: map[string]bool{}, evalRows: -1},
		watch: newWatch(job.Config.Timings.WithDefaults(), plan.Stages[st]), streamShards: job.Config.StreamCheckpoints,
		twoBW: newTwoBW(sch), steps: int64(job.Steps)}
	w.do = computer{w}
	w.links.open(ep)
	ops, err := w.role.takeOps(st, w.feed.reads)
	if err != nil {
		return nil, err
	}
	if w.Emulate = o.Emulate; w.Emulate {
		w.do = sleeper{w}
		return w, nil // nothing is computed: no parameters, data or optimizer
	}
	if w.ex, err = stage.NewExecutor(g, ops, g.Seed(), stage.DeviceBackend(job.Config.Device)); err != nil {
		return nil, err
	}
	w.dev = job.Config.Device
	w.ex.Recompute = plan.Stages[st].Recompute
	if err := w.ex.SetPrecision(job.Config.Precision); err != nil {
		return nil, err
	}
	w.links.bf16 = job.Config.Precision == "bf16"
	if err := w.ex.SetAttention(job.Config.Attention == "fused"); err != nil { // plan.Fused
		return nil, err
	}
	w.deviceSets()
	if err := w.feed.open(g, w.ID, int(plan.BatchSize)); err != nil {
		w.Close()
		return nil, err
	}
	w.feed.prefetch()
	if err := w.ex.SetOptimizer(o.Train); err != nil {
		return nil, err
	}
	if err := w.placeState(); err != nil {
		return nil, err
	}
	w.openOverlap(ops)
	if err := w.openSelective(job); err != nil {
		w.Close()
		return nil, err
	}
	if w.twoBW != nil { // the next batch's forwards run ahead of the update on the newest weights
		if err := w.ex.SetTwoVersions(); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// Close lets go of the worker's sender and data files.
func (w *Worker) Close() {
	w.links.close()
	w.feed.close()
}

// iteration is one iteration's state at a worker.
type iteration struct {
	n       int64
	batch   map[string]*stage.Value[float32]
	feeds   map[int]map[string]*stage.Value[float32] // per micro-batch: model inputs and received activations
	outs    map[int]map[string]*stage.Value[float32] // per micro-batch: this stage's op outputs
	grads   map[int]map[string]*stage.Value[float32] // per micro-batch: gradients received
	ingrads map[int]map[string]*stage.Value[float32] // per micro-batch: gradients of what was fed
	loss    float64
	msgs    [][]byte // the messages received, whose memory feeds and gradients may be
	// kept is, with selective backprop, each micro-batch's kept rows (of
	// the whole micro-batch), and sampleLosses, at the loss's stage, each
	// micro-batch's per-sample losses (selective.go); backprop is the
	// batch's kept samples
	kept         map[int][]int
	sampleLosses map[int][]float64
	backprop     int
}

// Run executes iteration n and steps the optimizer. It returns this stage's
// share of the iteration's loss (zero unless it holds the loss).
func (w *Worker) Run(ctx context.Context, n int64) (float64, error) {
	loss, err := w.compute(ctx, n)
	if err != nil {
		return 0, err
	}
	return loss, w.update(n, false)
}

// compute is iteration n up to the optimizer step: the stage's action list,
// then the executor's end of the step (flush).
func (w *Worker) compute(ctx context.Context, n int64) (float64, error) {
	sch := w.iterationSchedule(n) // without a flush: the first, a steady or the last iteration's (twobw.go)
	it := w.takeIteration(n)
	cur, err := microbatch.NewCursor(sch, w.Stage, w.role.timing)
	if err != nil {
		return 0, err
	}
	w.kill.begin()
	w.timeline.begin(w.dev)
	if err := w.do.begin(it); err != nil {
		return 0, err
	}
	l := &w.links
	l.meter.reset()
	for a, ok := cur.Next(); ok; a, ok = cur.Next() {
		start := time.Now()
		if a.Kind != microbatch.Send && a.Kind != microbatch.Recv {
			w.watch.busy(fmt.Sprintf("iteration %d action %v", n, a))
		}
		jt, ja, err := w.own(it, a) // the next batch's, where a runs ahead of the update
		if err == nil {
			err = l.release(ctx, ja, w.mbKey(jt, ja.MB))
		}
		if err == nil {
			err = l.giveBack(ctx, w.ex, false)
		}
		if err == nil {
			err = l.devSends.finished(w.ex)
		}
		if err == nil {
			err = w.step(ctx, jt, cur, ja)
		}
		w.watch.busy("")
		if err != nil {
			return 0, fmt.Errorf("stage %d replica %d, iteration %d, action %v: %w", w.Stage, w.Replica, n, a, err)
		}
		if a.Kind == microbatch.Send && w.kill.sent() {
			w.die("after-send")
		}
		w.timeline.record(a, start)
	}
	if err := l.out.drain(ctx); err != nil {
		return 0, fmt.Errorf("stage %d replica %d, iteration %d, sending: %w", w.Stage, w.Replica, n, err)
	}
	if err := l.giveBack(ctx, w.ex, true); err != nil {
		return 0, fmt.Errorf("stage %d replica %d, iteration %d: %w", w.Stage, w.Replica, n, err)
	}
	if err := l.devSends.finished(w.ex); err != nil {
		return 0, err
	}
	_, end := cur.Finish()
	if err := w.do.flush(ctx, it, end); err != nil {
		return 0, err
	}
	l.recycle(it)
	l.meter.finish()
	return it.loss, nil
}

// flush has the executor end iteration n's step (stage.Executor.EndStep):
// the gradients brought together, all-reduced among the stage's replicas,
// checked and clipped by the global norm, talking to the other workers
// through stepComm. The report waits in w.lastStep for update.
func (w *Worker) flush(ctx context.Context, it *iteration) error {
	n := it.n
	w.die("before-step")
	w.selected(it)
	rep, err := w.ex.EndStep(ctx, int(n), stepComm{w, n})
	if err != nil {
		return fmt.Errorf("stage %d replica %d, iteration %d, %w", w.Stage, w.Replica, n, err)
	}
	w.recordLosses(it)
	w.lastStep, w.backprop = rep, it.backprop
	return nil
}

// stepComm is what the executor's step needs of the other workers in
// iteration n: the ring all-reduce among the stage's replicas
// (allreduce.go) and the pooled gradient norm (clip.go).
type stepComm struct {
	w *Worker
	n int64
}

func (c stepComm) AllReduce(ctx context.Context, grads []*stage.Value[float32]) error {
	if ok, err := c.w.waitBuckets(c.n); ok {
		return err
	}
	return c.w.allReduce(ctx, c.n, grads)
}

// Replicas is the stage's replica count: a stage of one has nothing to
// all-reduce (stage.Replicated).
func (c stepComm) Replicas() int { return c.w.role.lay.count[c.w.Stage] }

func (c stepComm) PoolNorms(ctx context.Context, squares map[string]float64) (float64, error) {
	return c.w.globalNorm(ctx, c.n, squares)
}

// update ends iteration n (stage.Executor.ApplyStep): the optimizer steps
// on the gradients, or, with skip, the iteration is undone (its buffer
// updates restored, the optimizer untouched); the gradients are cleared
// either way.
func (w *Worker) update(n int64, skip bool) error {
	defer stage.PaceGC()
	if !w.Emulate {
		w.watch.busy(fmt.Sprintf("iteration %d optimizer step", n))
		err := w.ex.ApplyStep(skip)
		w.watch.busy("")
		if err != nil {
			return fmt.Errorf("stage %d replica %d, iteration %d, %w", w.Stage, w.Replica, n, err)
		}
		w.timeline.updated(w.dev)
	}
	w.links.ep.Forget(n)
	w.watch.warmed()
	return nil
}

// settle ends the worker's last iteration's all-gather where its stage
// gathers late (stage.Executor.SettleGather).
func (w *Worker) settle() error {
	if w.Emulate {
		return nil
	}
	if err := w.ex.SettleGather(); err != nil {
		return fmt.Errorf("stage %d replica %d, the last all-gather: %w", w.Stage, w.Replica, err)
	}
	return nil
}

// DeviceCalls is what the worker asked of its device in its last iteration
// whose optimizer step is done: nil on the CPU, or before such an
// iteration.
func (w *Worker) DeviceCalls() *cuda.Counts { return w.timeline.calls }

// GradNorm is the last iteration's global gradient norm before clipping
// (0 without clipping or when emulating).
func (w *Worker) GradNorm() float64 { return w.lastStep.GradNorm }

// Events is the timeline of the last iteration Run finished.
func (w *Worker) Events() []Event { return w.timeline.last() }

// Links is the transfers of the last iteration the worker finished.
func (w *Worker) Links() []LinkTime { return w.links.meter.lastTimes() }

// step does the action at the cursor a (microbatch.Cursor's contract):
// a Recv takes its data and moves the cursor's clock to when it landed; a
// Send steps the cursor for when its data lands and sends it; a compute
// action steps the cursor for its planned end and runs.
func (w *Worker) step(ctx context.Context, it *iteration, cur *microbatch.Cursor, a microbatch.Action) error {
	switch a.Kind {
	case microbatch.Recv:
		land, err := w.do.recv(ctx, it, a)
		cur.Step(land)
		return err
	case microbatch.Send:
		_, land := cur.Step(0)
		return w.do.send(ctx, it, a, land)
	}
	_, end := cur.Step(0)
	return w.do.compute(ctx, it, a, end)
}

// executor does a worker's actions as its cursor meets them, times in
// seconds from the iteration's start by the cursor's clock.
type executor interface {
	// begin starts an iteration: its batch read, the buffers kept.
	begin(it *iteration) error
	// compute runs a forward, backward or weight gradient, planned to end at end.
	compute(ctx context.Context, it *iteration, a microbatch.Action, end float64) error
	// send delivers a Send's data, planned to land at land.
	send(ctx context.Context, it *iteration, a microbatch.Action, land float64) error
	// recv takes a Recv's data and says when it landed.
	recv(ctx context.Context, it *iteration, a microbatch.Action) (land float64, err error)
	// flush ends the action list, planned to end at end: the gradients
	// made ready for the optimizer's step.
	flush(ctx context.Context, it *iteration, end float64) error
}

// computer is the executor that trains: the stage's executor computes and
// tensors go over the wire.
type computer struct{ w *Worker }

func (c computer) begin(it *iteration) error {
	if it.batch != nil {
		return nil // read when a forward of it ran ahead (twobw.go)
	}
	var err error
	it.batch, err = c.w.feed.batch(int(it.n), int(c.w.role.plan.BatchSize))
	return err
}

func (c computer) compute(ctx context.Context, it *iteration, a microbatch.Action, _ float64) error {
	if err := c.w.armOverlap(ctx, it, a); err != nil {
		return err
	}
	return c.w.act(it, a)
}

func (c computer) send(ctx context.Context, it *iteration, a microbatch.Action, _ float64) error {
	return c.w.send(ctx, it, a)
}

func (c computer) recv(ctx context.Context, it *iteration, a microbatch.Action) (float64, error) {
	err := c.w.recv(ctx, it, a)
	return c.w.timeline.now(), err
}

func (c computer) flush(ctx context.Context, it *iteration, _ float64) error {
	if err := c.w.flush(ctx, it); err != nil {
		return err
	}
	it.loss = c.w.lastStep.Loss
	return nil
}

// act computes a forward, backward or weight gradient.
func (w *Worker) act(it *iteration, a microbatch.Action) error {
	b := int(w.role.plan.MicroBatch)
	lo, hi := w.rows()
	weight := float32(hi-lo) / float32(w.role.plan.BatchSize) // this replica's share of the batch's mean loss
	switch a.Kind {
	case microbatch.Forward:
		feeds := w.feedsOf(it, a.MB)
		for name, v := range it.batch {
			feeds[name] = stage.SliceRows(v, a.MB*b+lo, a.MB*b+hi)
		}
		out, err := w.ex.Forward(w.mbKey(it, a.MB), stage.Position{Step: int(it.n), Sample: a.MB*b + lo}, feeds)
		if err != nil {
			return err
		}
		it.outs[a.MB] = out
		w.selectRows(it, a.MB, lo)
		return nil
	case microbatch.Backward:
		g := it.grads[a.MB]
		if g == nil {
			g = map[string]*stage.Value[float32]{}
		}
		if w.role.loss != "" {
			g[w.role.loss] = &stage.Value[float32]{Shape: []int{1}, Data: []float32{weight}}
		}
		if err := w.compact(it, a.MB, lo, hi); err != nil {
			return err
		}
		in, err := w.ex.Backward(w.mbKey(it, a.MB), g, !w.role.split)
		it.ingrads[a.MB] = in
		delete(it.outs, a.MB)
		return err
	case microbatch.Weight:
		return w.ex.Weights(w.mbKey(it, a.MB))
	}
	return fmt.Errorf("unsupported action kind %c", a.Kind)
}

func (w *Worker) feedsOf(it *iteration, mb int) map[string]*stage.Value[float32] {
	if it.feeds[mb] == nil {
		it.feeds[mb] = map[string]*stage.Value[float32]{}
	}
	return it.feeds[mb]
}

// rows is this replica's rows of a micro-batch.
func (w *Worker) rows() (int, int) {
	return w.clip(rowRange(int(w.role.plan.MicroBatch), w.role.lay.count[w.Stage], w.Replica))
}

// clip cuts a replica's rows to those of a partial evaluation micro-batch.
func (w *Worker) clip(lo, hi int) (int, int) {
	if w.feed.evalRows < 0 {
		return lo, hi
	}
	return min(lo, w.feed.evalRows), min(hi, w.feed.evalRows)
}

// peer is a replica at the other end of an edge whose rows overlap ours:
// rows [lo, hi) of the micro-batch are exchanged with it.
type peer struct {
	id      int32
	replica int
	lo, hi  int
}

// peers lists the replicas of the stage across a Send or Recv's edge.
func (w *Worker) peers(a microbatch.Action) []peer {
	e := w.role.plan.Edges[a.Edge]
	other := e.To // activations go to the consumer, gradients come from it
	if (a.Kind == microbatch.Send) != (a.Dir == microbatch.Act) {
		other = e.From
	}
	b := int(w.role.plan.MicroBatch)
	lo, hi := w.rows()
	var out []peer
	for r := 0; r < w.role.lay.count[other]; r++ {
		plo, phi := w.clip(rowRange(b, w.role.lay.count[other], r))
		if l, h := max(lo, plo), min(hi, phi); l < h {
			out = append(out, peer{w.role.lay.id(other, r), r, l, h})
		}
	}
	return out
}

// send ships the edge's tensors, each overlapping replica its rows:
// activations from this stage's outputs or, for a relay, from what it was
// fed; gradients of what it was fed. The messages are queued (sender):
// their frames are made from the tensors' memory as they go out.
func (w *Worker) send(ctx context.Context, it *iteration, a microbatch.Action) error {
	peers := w.peers(a)
	if len(peers) == 0 {
		return nil // no replica across shares rows with this one (an evaluation's partial batch)
	}
	names, vals, err := w.edgeValues(it, a)
	if err != nil {
		return err
	}
	for _, p := range peers {
		if w.links.ipc[a.Edge] && !w.Emulate {
			sent, err := w.sendDevice(ctx, it, a, p, names, vals)
			if err != nil {
				return err
			}
			if sent {
				continue
			}
		}
		if err := w.sendBytes(ctx, it, a, p, names, vals); err != nil {
			return err
		}
	}
	return nil
}

// edgeValues is what a Send carries, by name: activations from this
// stage's outputs or, for a relay, from what it was fed; gradients of what
// it was fed (none for an int32 tensor).
func (w *Worker) edgeValues(it *iteration, a microbatch.Action) ([]string, []*stage.Value[float32], error) {
	var names []string
	var vals []*stage.Value[float32]
	for _, name := range w.role.plan.Edges[a.Edge].Tensors {
		var v *stage.Value[float32]
		if a.Dir == microbatch.Act {
			if v = it.outs[a.MB][name]; v == nil {
				v = it.feeds[a.MB][name]
			}
		} else {
			v = it.ingrads[a.MB][name]
		}
		if v == nil {
			if a.Dir == microbatch.Act {
				return nil, nil, fmt.Errorf("edge %d: tensor %q was neither computed nor received", a.Edge, name)
			}
			continue // no gradient flows to it (an int32 tensor)
		}
		names, vals = append(names, name), append(vals, v)
	}
	return names, vals, nil
}

// sendBytes queues the message of vals to peer p as bytes: its rows of
// them, from host memory or downloaded as the frames go (devsend.go).
func (w *Worker) sendBytes(ctx context.Context, it *iteration, a microbatch.Action, p peer, names []string, vals []*stage.Value[float32]) error {
	lo, hi := w.rows()
	p, lo, _, kept := w.gradRows(it, a, p, lo, hi)
	specs, pieces, lent, err := w.messageSpecs(names, vals, p.lo-lo, p.hi-lo)
	if err != nil {
		return err
	}
	if kept != nil {
		specs = append(specs, keptSpec(kept))
	}
	payload, err := wire.LayoutTensors(specs)
	if err != nil {
		return err
	}
	for _, v := range lent {
		w.links.devSends.add(v)
	}
	meter := w.links.meter.sent(a.Edge, byte(a.Dir), TransportNATS, payload.Len())
	done := func(err error, secs float64) {
		meter(err, secs)
		for i, p := range pieces {
			p.release(err != nil)
			w.links.devSends.done(lent[i])
		}
	}
	k := msgKey(it.n, int32(a.MB), edgeKey(a.Edge, w.Replica), byte(a.Dir))
	return w.links.out.queue(&sendJob{ctx: ctx, mb: w.mbKey(it, a.MB), peer: p.id, k: k, p: payload, done: done, host: len(lent) == 0})
}

// recv takes an edge's messages from every overlapping replica and places
// their rows: activations become feeds; gradients are summed per tensor in
// the order the schedule receives them. A message from the one replica
// across the edge is read where it lies (wire.DecodeTensorsView).
func (w *Worker) recv(ctx context.Context, it *iteration, a microbatch.Action) error {
	lo, hi := w.rows()
	parts := map[string]*stage.Value[float32]{}
	for _, p := range w.peers(a) {
		msg, err := w.links.ep.Receive(ctx, msgKey(it.n, int32(a.MB), edgeKey(a.Edge, p.replica), byte(a.Dir)))
		if err != nil {
			return err
		}
		if wire.IsDeviceTensors(msg) {
			if err := w.recvDevice(ctx, it, a, p, msg, parts); err != nil {
				return err
			}
			continue
		}
		start := time.Now()
		it.msgs = append(it.msgs, msg)
		ts, err := wire.DecodeTensorsView(msg)
		if err == nil {
			ts, err = w.takeKept(it, a, ts)
		}
		if err != nil {
			return err
		}
		q, qlo, qhi, _ := w.gradRows(it, a, p, lo, hi)
		for _, t := range ts {
			if err := place(parts, t, q, qlo, qhi); err != nil {
				return fmt.Errorf("edge %d: %w", a.Edge, err)
			}
		}
		w.links.meter.received(a.Edge, byte(a.Dir), TransportNATS, len(msg), time.Since(start).Seconds())
	}
	w.deliver(it, a, parts)
	return nil
}

// place puts tensor t, rows [p.lo, p.hi) of the micro-batch from peer p,
// into its whole value of this replica's rows [lo, hi): t itself when it
// holds them all.
func place(parts map[string]*stage.Value[float32], t wire.Tensor, p peer, lo, hi int) error {
	if len(t.Shape) == 0 || t.Shape[0] != p.hi-p.lo {
		return fmt.Errorf("tensor %q has shape %v for rows [%d, %d)", t.Name, t.Shape, p.lo, p.hi)
	}
	whole := parts[t.Name]
	if whole == nil && p.lo == lo && p.hi == hi {
		parts[t.Name] = &stage.Value[float32]{Shape: t.Shape, Data: t.F32, Ints: t.I32}
		return nil
	}
	if whole == nil {
		shape := append([]int{hi - lo}, t.Shape[1:]...)
		whole = &stage.Value[float32]{Shape: shape}
		if t.I32 != nil {
			whole.Ints = make([]int32, sizeOf(shape))
		} else {
			whole.Data = make([]float32, sizeOf(shape))
		}
		parts[t.Name] = whole
	}
	per := sizeOf(t.Shape[1:])
	if t.I32 != nil {
		copy(whole.Ints[(p.lo-lo)*per:], t.I32)
	} else {
		copy(whole.Data[(p.lo-lo)*per:], t.F32)
	}
	return nil
}

// deliver makes a Recv's tensors the micro-batch's: activations its feeds,
// gradients added to those received before.
func (w *Worker) deliver(it *iteration, a microbatch.Action, parts map[string]*stage.Value[float32]) {
	for name, v := range parts {
		if a.Dir == microbatch.Act {
			w.feedsOf(it, a.MB)[name] = v
			continue
		}
		if it.grads[a.MB] == nil {
			it.grads[a.MB] = map[string]*stage.Value[float32]{}
		}
		if old := it.grads[a.MB][name]; old != nil {
			for i := range old.Data {
				old.Data[i] += v.Data[i]
			}
		} else {
			it.grads[a.MB][name] = v
		}
	}
}

func sizeOf(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Params is the stage's parameters and buffers by name, brought to the
// host (none when emulating).
func (w *Worker) Params() (map[string]*stage.Value[float32], error) {
	if w.ex == nil {
		return nil, nil
	}
	return w.ex.HostState()
}

// OpSeconds is each op's accumulated [forward, backward] time (none when emulating).
func (w *Worker) OpSeconds() map[string][2]float64 {
	out := map[string][2]float64{}
	if w.ex == nil {
		return out
	}
	for name, t := range w.ex.OpSeconds {
		out[name] = *t
	}
	return out
}

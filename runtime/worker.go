package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
)

// Worker runs one stage of a plan: its action list, once per iteration.
type Worker struct {
	ID    int32
	g     *dag.Graph
	plan  *search.Plan
	sched []microbatch.Action
	ex    *stage.Executor
	ep    *Endpoint
	opt   stage.Optimizer
	data  *stage.Dataset
	loss  string // the loss op's name when this stage holds it
	ops   map[string]bool
	reads map[string]bool // the model inputs this stage's ops read

	// Emulate replaces computation by waits of the plan's times and
	// transfers by their modelled times; frames still flow.
	Emulate  bool
	linkFree map[[2]int]time.Time // emulation: when each (edge, dir) link is free
	vnow     time.Time            // emulation: when the stage is next free, by the plan's clock
	events   []Event              // this iteration's timeline
	iterZero time.Time
}

// Event is one measured action of a stage, in seconds from its iteration's start.
type Event struct {
	Kind  byte    `json:"kind"`
	MB    int     `json:"mb"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// Options are how a run trains.
type Options struct {
	Train   stage.TrainOptions
	Emulate bool // wait the plan's times instead of computing
}

// NewWorker prepares stage id of plan over an endpoint.
func NewWorker(g *dag.Graph, plan *search.Plan, id int, ep *Endpoint, o Options) (*Worker, error) {
	sch, err := plan.ScheduleOf()
	if err != nil {
		return nil, err
	}
	w := &Worker{ID: int32(id), g: g, plan: plan, sched: sch.Lists[id], ep: ep, ops: map[string]bool{}, reads: map[string]bool{},
		linkFree: map[[2]int]time.Time{}}
	var ops []int
	for _, name := range plan.Stages[id].Ops {
		i, ok := g.OpIndex(name)
		if !ok {
			return nil, fmt.Errorf("plan: stage %d names op %q the model lacks", id, name)
		}
		ops = append(ops, i)
		w.ops[name] = true
		for _, t := range g.OpInputs(i) {
			if t.Producer < 0 {
				w.reads[t.Name] = true
			}
		}
		if i == g.Loss() {
			w.loss = name
		}
	}
	if w.Emulate = o.Emulate; w.Emulate {
		return w, nil // nothing is computed: no parameters, data or optimizer
	}
	if w.ex, err = stage.NewExecutor(g, ops, g.Seed()); err != nil {
		return nil, err
	}
	if w.data, err = stage.NewDataset(g); err != nil {
		return nil, err
	}
	if w.opt, err = stage.NewOptimizer(o.Train.Optimizer, o.Train.LR, o.Train.Momentum); err != nil {
		return nil, err
	}
	return w, nil
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
}

// Run executes iteration n and steps the optimizer. It returns this stage's
// share of the iteration's loss (zero unless it holds the loss).
func (w *Worker) Run(ctx context.Context, n int64) (float64, error) {
	it := &iteration{n: n, feeds: map[int]map[string]*stage.Value[float32]{}, outs: map[int]map[string]*stage.Value[float32]{},
		grads: map[int]map[string]*stage.Value[float32]{}, ingrads: map[int]map[string]*stage.Value[float32]{}}
	w.iterZero, w.events = time.Now(), w.events[:0]
	w.vnow = w.iterZero
	var err error
	if !w.Emulate {
		if it.batch, err = w.data.Inputs(int(n), int(w.plan.BatchSize), w.reads); err != nil {
			return 0, err
		}
	}
	for _, a := range w.sched {
		start := time.Now()
		if err := w.act(ctx, it, a); err != nil {
			return 0, fmt.Errorf("stage %d, iteration %d, action %v: %w", w.ID, n, a, err)
		}
		if a.Kind == microbatch.Forward || a.Kind == microbatch.Backward || a.Kind == microbatch.Weight {
			w.events = append(w.events, Event{byte(a.Kind), a.MB, start.Sub(w.iterZero).Seconds(), time.Since(w.iterZero).Seconds()})
		}
	}
	if w.Emulate {
		w.wait(ctx, w.plan.Stages[w.ID].FlushS)
	} else {
		w.opt.Step(w.ex.Params, w.ex.Grads)
		w.ex.ZeroGrads()
	}
	w.ep.Forget(n)
	return it.loss, nil
}

// Events is the timeline of the last iteration Run finished.
func (w *Worker) Events() []Event { return append([]Event(nil), w.events...) }

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// wait advances the stage's planned clock by d seconds and sleeps until it:
// deadlines are absolute, so timer overshoot does not accumulate, while a
// message that really arrives late still delays the stage.
func (w *Worker) wait(ctx context.Context, d float64) {
	if now := time.Now(); now.After(w.vnow) && d == 0 {
		return
	}
	w.vnow = w.vnow.Add(time.Duration(d * float64(time.Second)))
	sleep(ctx, time.Until(w.vnow))
}

// emulate stands in for computing an action: compute waits its planned time;
// a send carries the modelled arrival time, the link being busy one transfer
// at a time; a receive waits until that time.
func (w *Worker) emulate(ctx context.Context, it *iteration, a microbatch.Action) error {
	st := w.plan.Stages[w.ID]
	switch a.Kind {
	case microbatch.Forward:
		w.wait(ctx, st.ForwardS)
	case microbatch.Backward:
		w.wait(ctx, st.BackwardS+st.WeightS)
	case microbatch.Send:
		e := w.plan.Edges[a.Edge]
		link := [2]int{a.Edge, int(a.Dir)}
		start := w.vnow
		if free := w.linkFree[link]; free.After(start) {
			start = free
		}
		arrive := start.Add(time.Duration(e.Transfer * float64(time.Second)))
		w.linkFree[link] = arrive
		peer := int32(e.To)
		if a.Dir == microbatch.Grad {
			peer = int32(e.From)
		}
		stamp := []byte(arrive.Format(time.RFC3339Nano))
		return w.ep.Send(ctx, peer, msgKey{it.n, int32(a.MB), int32(a.Edge), byte(a.Dir)}, stamp)
	case microbatch.Recv:
		msg, err := w.ep.Receive(ctx, msgKey{it.n, int32(a.MB), int32(a.Edge), byte(a.Dir)})
		if err != nil {
			return err
		}
		arrive, err := time.Parse(time.RFC3339Nano, string(msg))
		if err != nil {
			return fmt.Errorf("emulated transfer: %w", err)
		}
		if arrive.After(w.vnow) {
			w.vnow = arrive
		}
		if late := time.Now(); late.After(w.vnow) {
			w.vnow = late // the message itself came later than planned
		}
		sleep(ctx, time.Until(w.vnow))
	}
	return nil
}

func (w *Worker) act(ctx context.Context, it *iteration, a microbatch.Action) error {
	if w.Emulate {
		return w.emulate(ctx, it, a)
	}
	b := int(w.plan.MicroBatch)
	switch a.Kind {
	case microbatch.Recv:
		return w.recv(ctx, it, a)
	case microbatch.Send:
		return w.send(ctx, it, a)
	case microbatch.Forward:
		feeds := w.feedsOf(it, a.MB)
		for name, v := range it.batch {
			feeds[name] = stage.SliceRows(v, a.MB*b, (a.MB+1)*b)
		}
		out, err := w.ex.Forward(a.MB, feeds)
		if err != nil {
			return err
		}
		it.outs[a.MB] = out
		if w.loss != "" {
			it.loss += float64(b) / float64(w.plan.BatchSize) * float64(out[w.loss].Data[0])
		}
		return nil
	case microbatch.Backward:
		g := it.grads[a.MB]
		if g == nil {
			g = map[string]*stage.Value[float32]{}
		}
		if w.loss != "" {
			g[w.loss] = &stage.Value[float32]{Shape: []int{1}, Data: []float32{float32(b) / float32(w.plan.BatchSize)}}
		}
		in, err := w.ex.Backward(a.MB, g, true)
		it.ingrads[a.MB] = in
		delete(it.outs, a.MB)
		return err
	}
	return fmt.Errorf("unsupported action kind %c", a.Kind)
}

func (w *Worker) feedsOf(it *iteration, mb int) map[string]*stage.Value[float32] {
	if it.feeds[mb] == nil {
		it.feeds[mb] = map[string]*stage.Value[float32]{}
	}
	return it.feeds[mb]
}

// send ships the edge's tensors: activations from this stage's outputs or,
// for a relay, from what it was fed; gradients of what it was fed.
func (w *Worker) send(ctx context.Context, it *iteration, a microbatch.Action) error {
	e := w.plan.Edges[a.Edge]
	var ts []Tensor
	for _, name := range e.Tensors {
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
				return fmt.Errorf("edge %d: tensor %q was neither computed nor received", a.Edge, name)
			}
			continue // no gradient flows to it (an int32 tensor)
		}
		ts = append(ts, Tensor{Name: name, Shape: v.Shape, F32: v.Data, I32: v.Ints})
	}
	payload, err := EncodeTensors(ts)
	if err != nil {
		return err
	}
	peer := int32(e.To)
	if a.Dir == microbatch.Grad {
		peer = int32(e.From)
	}
	return w.ep.Send(ctx, peer, msgKey{it.n, int32(a.MB), int32(a.Edge), byte(a.Dir)}, payload)
}

// recv takes an edge's message: activations become feeds; gradients are
// summed per tensor in the order the schedule receives them.
func (w *Worker) recv(ctx context.Context, it *iteration, a microbatch.Action) error {
	msg, err := w.ep.Receive(ctx, msgKey{it.n, int32(a.MB), int32(a.Edge), byte(a.Dir)})
	if err != nil {
		return err
	}
	ts, err := DecodeTensors(msg)
	if err != nil {
		return err
	}
	for _, t := range ts {
		v := &stage.Value[float32]{Shape: t.Shape, Data: t.F32, Ints: t.I32}
		if a.Dir == microbatch.Act {
			w.feedsOf(it, a.MB)[t.Name] = v
			continue
		}
		if it.grads[a.MB] == nil {
			it.grads[a.MB] = map[string]*stage.Value[float32]{}
		}
		if old := it.grads[a.MB][t.Name]; old != nil {
			for i := range old.Data {
				old.Data[i] += v.Data[i]
			}
		} else {
			it.grads[a.MB][t.Name] = v
		}
	}
	return nil
}

// Params is the stage's parameters (none when emulating).
func (w *Worker) Params() map[string]*stage.Value[float32] {
	if w.ex == nil {
		return nil
	}
	return w.ex.Params
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

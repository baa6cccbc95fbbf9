package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

func now() time.Time            { return time.Now() }
func since(t time.Time) float64 { return time.Since(t).Seconds() }

// Coordinate runs plan with workers that join over t: it waits for one worker
// per stage, assigns the stages, collects each iteration's reports (calling
// progress with the iteration's loss) and the final parameters.
func Coordinate(ctx context.Context, g *dag.Graph, plan *plan.Plan, t wire.Transport, run string, steps int, o Options,
	progress func(iter int64, loss float64)) (*Result, error) {
	if h := dag.ModelHash(g); h != plan.Model.SHA256 {
		return nil, fmt.Errorf("plan: made for model %q with hash %.12s, this model's is %.12s", plan.Model.Name, plan.Model.SHA256, h)
	}
	gen := max(o.Gen, 1)
	ctl, err := wire.NewEndpoint(t, run, gen+ctlGenOffset, coordinator)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	// beat from the start: a worker watches for the heartbeats from its
	// assignment on, and the others may take a while to join
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go beat(ctx, t, coordBeats(run), []byte{})
	model, planJSON := dag.Write(g.Model()), plan.Encode()
	lay := layout(plan)
	workers := make([]int32, lay.total) // by worker id: each one's control address
	where := make([]string, lay.total)
	joinCtx, joined := ctx, func() {}
	if o.JoinTimeout > 0 {
		joinCtx, joined = context.WithTimeoutCause(ctx, o.JoinTimeout, fmt.Errorf("not all joined within %v", o.JoinTimeout))
	}
	defer joined()
	if o.Stop != nil { // asked to stop while waiting: nothing to save
		var stopJoin context.CancelCauseFunc
		joinCtx, stopJoin = context.WithCancelCause(joinCtx)
		defer stopJoin(nil)
		go func() {
			select {
			case <-o.Stop:
				stopJoin(&StoppedError{Step: startStep(o)})
			case <-joinCtx.Done():
			}
		}()
	}
	who := make([]Joined, lay.total)
	slots := freeSlots{taken: make([]bool, lay.total)}
	for n := range workers {
		_, msg, err := ctl.ReceiveAny(joinCtx, ctlEdge, 'a', mbHello)
		if err != nil {
			var se *StoppedError
			if c := context.Cause(joinCtx); errors.As(c, &se) {
				return nil, se
			} else if c != nil {
				err = c
			}
			return nil, fmt.Errorf("waiting for workers: %d of %d joined: %w", n, lay.total, err)
		}
		var h hello
		if err := json.Unmarshal(msg, &h); err != nil {
			return nil, err
		}
		s, err := slots.take(h)
		if err != nil {
			return nil, err
		}
		if o.Resume != nil {
			o.Start = o.Resume.Manifest.Step
		}
		a := assignment{Gen: gen, Stage: s, Model: model, Plan: planJSON, Options: o, Steps: steps, Workers: lay.total}
		if err := sendJSON(ctx, ctl, h.Worker, 0, mbAssign, a); err != nil {
			return nil, err
		}
		workers[s], where[s] = h.Worker, h.Device
		who[s] = Joined{Host: h.Host, PID: h.PID, Device: h.Device, Agent: h.Agent}
	}
	if o.Resume != nil && !o.Emulate {
		if err := sendResume(ctx, ctl, g, plan, lay, workers, o.Resume); err != nil {
			return nil, err
		}
	}
	name := func(id int) string {
		s, r := lay.where(id)
		return fmt.Sprintf("worker %d (stage %d, replica %d)", id, s, r)
	}
	if err := watchWorkers(ctx, t, run, gen, lay.total, name, cancel); err != nil {
		return nil, err
	}
	res, err := collect(ctx, ctl, g, plan, lay, workers, run, steps, o, progress)
	if res != nil {
		res.Devices, res.Joined = where, who
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && cause != context.Canceled && !IsDataError(err) {
		return nil, cause
	}
	return res, err
}

// freeSlots hands out worker ids to the workers that join: the one a
// launcher placed a worker on (hello.Slot), or the next free one.
type freeSlots struct {
	taken []bool
	next  int
}

func (f *freeSlots) take(h hello) (int, error) {
	if h.Slot != nil {
		s := *h.Slot
		if s < 0 || s >= len(f.taken) || f.taken[s] {
			return 0, fmt.Errorf("worker %d (host %s, pid %d) joined as worker %d, which is taken or beyond the plan's %d", h.Worker, h.Host, h.PID, s, len(f.taken))
		}
		f.taken[s] = true
		return s, nil
	}
	for f.next < len(f.taken) && f.taken[f.next] {
		f.next++
	}
	if f.next == len(f.taken) {
		return 0, fmt.Errorf("worker %d (host %s, pid %d) joined a generation whose workers are all there", h.Worker, h.Host, h.PID)
	}
	f.taken[f.next] = true
	return f.next, nil
}

// startStep is the first iteration a run makes.
func startStep(o Options) int {
	if o.Resume != nil {
		return o.Resume.Manifest.Step
	}
	return 0
}

// collector drives a run's iterations from the coordinator.
type collector struct {
	ctl     *wire.Endpoint
	g       *dag.Graph
	plan    *plan.Plan
	lay     replicas
	workers []int32
	run     string
	steps   int
	o       Options
	res     *Result
	saved   int // the step of the newest checkpoint written, 0 for none
	skips   int // steps skipped in a row
}

// collect drives the iterations and gathers reports and parameters.
func collect(ctx context.Context, ctl *wire.Endpoint, g *dag.Graph, plan *plan.Plan, lay replicas, workers []int32, run string, steps int, o Options, progress func(int64, float64)) (*Result, error) {
	c := &collector{ctl: ctl, g: g, plan: plan, lay: lay, workers: workers, run: run, steps: steps, o: o,
		res: &Result{Params: map[string]*stage.Value[float32]{}}}
	for n := startStep(o); n < steps; n++ {
		select {
		case <-o.Stop:
			return nil, c.stop(ctx, n)
		default:
		}
		if err := c.iteration(ctx, n, progress); err != nil {
			return nil, err
		}
	}
	for range workers {
		_, msg, err := ctl.ReceiveAny(ctx, ctlEdge, 'g', mbParams)
		if err != nil {
			return nil, workerFailure(ctl, err)
		}
		if err := decodeParams(msg, c.res.Params); err != nil {
			return nil, err
		}
	}
	return c.res, nil
}

// iteration runs iteration n: go, the reports, the verdict on its values,
// a due checkpoint.
func (c *collector) iteration(ctx context.Context, n int, progress func(int64, float64)) error {
	began := time.Now()
	if err := c.tell(ctx, int64(n), mbGo, goOn); err != nil {
		return err
	}
	total := 0.0
	bad, badStage := "", 0
	c.res.Events = make([][]Event, len(c.plan.Stages))
	for s := range c.workers {
		r, err := c.ctl.Receive(ctx, msgKey(int64(n)*reportStride+int64(s), mbReport, ctlEdge, 'a'))
		if err != nil {
			return workerFailure(c.ctl, err)
		}
		var rep Report
		if err := json.Unmarshal(r, &rep); err != nil {
			return err
		}
		total += float64(rep.Loss)
		if s == 0 && c.o.Train.ClipGradNorm > 0 && !c.o.Emulate {
			c.res.GradNorms = append(c.res.GradNorms, rep.GradNorm)
		}
		st, replica := c.lay.where(s)
		if rep.NonFinite != "" && bad == "" {
			bad, badStage = rep.NonFinite, st
		}
		if replica != 0 {
			continue
		}
		c.res.Events[st] = rep.Events
		if rep.OpSeconds != nil {
			if c.res.Ops == nil {
				c.res.Ops = make([]map[string][2]float64, len(c.plan.Stages))
			}
			c.res.Ops[st] = rep.OpSeconds
		}
	}
	if bad == "" && !finite(total) {
		bad, badStage = fmt.Sprintf("the loss is %v", total), len(c.plan.Stages)-1
	}
	c.res.Losses = append(c.res.Losses, total)
	c.res.Iters = append(c.res.Iters, time.Since(began).Seconds())
	if err := c.judge(ctx, n, bad, badStage); err != nil {
		return err
	}
	if progress != nil {
		progress(int64(n), total)
	}
	if c.o.Data.EvalDue(n, c.steps) && !c.o.Emulate {
		r, err := collectEval(ctx, c.ctl, c.workers, n)
		if err != nil {
			return err
		}
		c.res.Evals = append(c.res.Evals, r)
		if c.o.OnEval != nil {
			c.o.OnEval(r)
		}
	}
	if k := c.o.CheckpointEvery; k > 0 && (n+1)%k == 0 && !c.o.Emulate {
		err := c.checkpoint(ctx, n+1, func(id int32) wire.Key { return msgKey(int64(n)*reportStride+int64(id), mbCkpt, ctlEdge, 'g') })
		var ne *NonFiniteError
		if errors.As(err, &ne) {
			c.tell(ctx, int64(n+1), mbGo, goAbort)
		}
		return err
	}
	return nil
}

// judge acts on what the stages found of iteration n's values: bad says
// where the first stage found one not finite ("" if none). The run stops
// there, or, when steps may be skipped, every stage is told to step or to
// skip.
func (c *collector) judge(ctx context.Context, n int, bad string, badStage int) error {
	skipping := c.o.OnNonFinite == NonFiniteSkip && !c.o.Emulate
	if bad == "" {
		c.skips = 0
		if skipping {
			return c.tell(ctx, int64(n), mbVerdict, verdictStep)
		}
		return nil
	}
	e := c.nonFinite(n+1, badStage, bad)
	if !skipping {
		c.tell(ctx, int64(n+1), mbGo, goAbort)
		return e
	}
	if c.skips++; c.skips > cmp.Or(c.o.MaxSkips, 10) {
		e.Skips = c.skips - 1
		c.tell(ctx, int64(n), mbVerdict, goAbort)
		return e
	}
	c.res.Skipped = append(c.res.Skipped, n)
	if c.o.Skipped != nil {
		c.o.Skipped(int64(n), fmt.Sprintf("stage %d, %s", badStage, bad))
	}
	return c.tell(ctx, int64(n), mbVerdict, verdictSkip)
}

// nonFinite is the error that ends the run at step (counted from 1).
func (c *collector) nonFinite(step, stage int, what string) *NonFiniteError {
	e := &NonFiniteError{Step: step, Stage: stage, What: what}
	if c.saved > 0 {
		e.Saved, e.Dir = c.saved, c.o.CheckpointDir
	} else if c.o.Resume != nil && !c.o.Init {
		e.Resumed = c.o.Resume.Manifest.Step
	}
	return e
}

// tell sends every worker one control message.
func (c *collector) tell(ctx context.Context, iter int64, mb int32, what string) error {
	for _, w := range c.workers {
		if err := c.ctl.Send(ctx, w, msgKey(iter, mb, ctlEdge, 'a'), []byte(what)); err != nil {
			return err
		}
	}
	return nil
}

// stop ends the run before iteration n, as Options.Stop asked: with a
// checkpoint at step n when the run keeps them and has none there yet.
func (c *collector) stop(ctx context.Context, n int) error {
	save := c.o.CheckpointDir != "" && !c.o.Emulate && c.saved != n
	order := goStop
	if save {
		order = goStopAndSave
	}
	if err := c.tell(ctx, int64(n), mbGo, order); err != nil {
		return err
	}
	if save {
		key := func(id int32) wire.Key { return msgKey(int64(id), mbStopState, ctlEdge, 'g') }
		if err := c.checkpoint(ctx, n, key); err != nil {
			return err
		}
	}
	return &StoppedError{Step: n, Dir: c.o.CheckpointDir, Saved: c.saved == n && c.o.CheckpointDir != ""}
}

// collectEval sums every worker's share of the evaluation after
// iteration n.
func collectEval(ctx context.Context, ctl *wire.Endpoint, workers []int32, n int) (stage.EvalResult, error) {
	var sums stage.EvalSums
	for s := range workers {
		msg, err := ctl.Receive(ctx, msgKey(int64(n)*reportStride+int64(s), mbEval, ctlEdge, 'a'))
		if err != nil {
			return stage.EvalResult{}, workerFailure(ctl, err)
		}
		var part stage.EvalSums
		if err := json.Unmarshal(msg, &part); err != nil {
			return stage.EvalResult{}, err
		}
		sums.Add(part)
	}
	return sums.Result(n + 1), nil
}

// workerFailure prefers a worker's own account of its failure.
func workerFailure(ctl *wire.Endpoint, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, msg, e := ctl.ReceiveAny(ctx, ctlEdge, 'a', mbError)
	if e != nil {
		return err
	}
	var m map[string]string
	json.Unmarshal(msg, &m)
	if m["data"] != "" {
		return &DataError{m["error"]}
	}
	return fmt.Errorf("a worker failed: %s", m["error"])
}

func encodeParams(p map[string]*stage.Value[float32]) ([]byte, error) {
	var entries []tensor.Named
	for name, v := range p {
		entries = append(entries, tensor.Named{Name: name, Shape: v.Shape, F32: v.Data})
	}
	return tensor.EncodeSafetensors(entries, nil)
}

func decodeParams(b []byte, into map[string]*stage.Value[float32]) error {
	entries, _, err := tensor.DecodeSafetensors(b)
	if err != nil {
		return err
	}
	for _, e := range entries {
		into[e.Name] = &stage.Value[float32]{Shape: e.Shape, Data: e.F32}
	}
	return nil
}

// checkpoint gathers every stage's state at step (iterations done), each
// stage's replica 0 sending it under key, and writes it, unless a value in
// it is not finite: that ends the run (a NonFiniteError) with nothing written.
func (c *collector) checkpoint(ctx context.Context, step int, key func(id int32) wire.Key) error {
	ck := &Checkpoint{Params: map[string]*stage.Value[float32]{}, Optim: map[string][]float32{}}
	for s := range c.plan.Stages {
		msg, err := c.ctl.Receive(ctx, key(c.lay.id(s, 0)))
		if err != nil {
			return err
		}
		entries, meta, err := tensor.DecodeSafetensors(msg)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !stage.Finite(e.F32) {
				return c.nonFinite(step, s, fmt.Sprintf("%s holds a value that is not finite (NaN or Inf) after the update", e.Name))
			}
			if name, ok := cutState(e.Name); ok {
				ck.Params[name] = &stage.Value[float32]{Shape: e.Shape, Data: e.F32}
			} else if slot, ok := strings.CutPrefix(e.Name, "optim:"); ok {
				ck.Optim[slot] = e.F32
			}
		}
		ck.Manifest.OptStep, _ = strconv.Atoi(meta["optimizer_step"])
	}
	g := c.g
	ck.Manifest.Step, ck.Manifest.Model, ck.Manifest.ModelHash = step, g.Name(), dag.ModelHash(g)
	ck.Manifest.Run, ck.Manifest.Seed = c.run, g.Seed()
	ck.Manifest.Plan = fmt.Sprintf("%s, %d stages on %d devices", c.plan.Strategy, len(c.plan.Stages), c.lay.total)
	ck.Manifest.Optimizer = c.o.Train.Optimizer
	if err := WriteCheckpoint(c.o.CheckpointDir, ck); err != nil {
		return fmt.Errorf("checkpoint after step %d into %s: %w", step, c.o.CheckpointDir, err)
	}
	c.saved = step
	return nil
}

// sendResume gives every worker its stage's share of a checkpoint.
func sendResume(ctx context.Context, ctl *wire.Endpoint, g *dag.Graph, plan *plan.Plan, lay replicas, workers []int32, c *Checkpoint) error {
	if c.Manifest.ModelHash != dag.ModelHash(g) {
		return fmt.Errorf("checkpoint: made for model %q with hash %.12s, this model's is %.12s", c.Manifest.Model, c.Manifest.ModelHash, dag.ModelHash(g))
	}
	for id, w := range workers {
		st, _ := lay.where(id)
		var entries []tensor.Named
		for _, opName := range plan.Stages[st].Ops {
			i, _ := g.OpIndex(opName)
			for _, b := range g.Buffers(i) {
				v, ok := c.Params[b.Key]
				if !ok {
					return fmt.Errorf("checkpoint: lacks buffer %q", b.Key)
				}
				entries = append(entries, tensor.Named{Name: "buffer:" + b.Key, Shape: v.Shape, F32: v.Data})
			}
			for _, p := range g.Params(i) {
				name := p.Key
				v, ok := c.Params[name]
				if !ok {
					return fmt.Errorf("checkpoint: lacks parameter %q", name)
				}
				entries = append(entries, tensor.Named{Name: "param:" + name, Shape: v.Shape, F32: v.Data})
				for slot, s := range c.Optim {
					if rest, ok := strings.CutPrefix(slot, name+"."); ok && !strings.Contains(rest, ".") {
						entries = append(entries, tensor.Named{Name: "optim:" + slot, Shape: []int{len(s)}, F32: s})
					}
				}
			}
		}
		b, err := tensor.EncodeSafetensors(entries, map[string]string{"optimizer_step": strconv.Itoa(c.Manifest.OptStep)})
		if err != nil {
			return err
		}
		if err := ctl.Send(ctx, w, msgKey(0, mbResume, ctlEdge, 'g'), b); err != nil {
			return err
		}
	}
	return nil
}

// cutState strips a state message entry's "param:" or "buffer:" prefix: a
// checkpoint holds parameters and buffers under their names, side by side.
func cutState(entry string) (string, bool) {
	if name, ok := strings.CutPrefix(entry, "param:"); ok {
		return name, true
	}
	return strings.CutPrefix(entry, "buffer:")
}

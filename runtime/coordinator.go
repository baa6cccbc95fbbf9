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
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

func now() time.Time            { return time.Now() }
func since(t time.Time) float64 { return time.Since(t).Seconds() }

// Coordinate runs job with workers that join over t: it waits for one
// worker per device of the plan, assigns the stages, collects each
// iteration's reports (calling progress, when set, with the iteration's
// loss) and the final parameters.
func Coordinate(ctx context.Context, job *Job, t wire.Transport, progress func(iter int64, loss float64)) (*Result, error) {
	g, plan := job.Graph, job.Plan
	if h := dag.ModelHash(g); h != plan.Model.SHA256 {
		return nil, fmt.Errorf("plan: made for model %q with hash %.12s, this model's is %.12s", plan.Model.Name, plan.Model.SHA256, h)
	}
	ctl, err := wire.NewEndpoint(t, job.Run, job.gen()+ctlGenOffset, coordinator)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	// beat from the start: a worker watches for the heartbeats from its
	// assignment on, and the others may take a while to join
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tm := job.Config.Timings
	go tm.Beat(ctx, t, CoordinatorBeats(job.Run), nothing)
	c := &collector{ctl: ctl, job: job, lay: layout(plan), res: &Result{Params: map[string]*stage.Value[float32]{}}}
	who, err := c.assign(ctx)
	if err != nil {
		return nil, err
	}
	if r := job.Config.Resume; r != nil && !job.Options.Emulate {
		if err := sendResume(ctx, ctl, g, plan, c.lay, c.workers, r); err != nil {
			return nil, err
		}
	}
	lay := c.lay
	name := func(id int) string {
		s, r := lay.where(id)
		return fmt.Sprintf("worker %d (stage %d, replica %d)", id, s, r)
	}
	if err := tm.watchWorkers(ctx, t, job.Run, job.gen(), lay.total, name, cancel); err != nil {
		return nil, err
	}
	res, err := c.collect(ctx, progress)
	if res != nil {
		res.Joined = who
		for _, j := range who {
			res.Devices = append(res.Devices, j.Device)
		}
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && cause != context.Canceled && !IsDataError(err) {
		return nil, cause
	}
	return res, err
}

// nothing is the coordinator's heartbeat: its arrival is the news.
func nothing() []byte { return []byte{} }

// assign waits for a worker per slot of the plan (Config.JoinTimeout
// bounds the wait, Config.Stop ends it) and gives each its stage; it says
// who joined, by worker id.
func (c *collector) assign(ctx context.Context) ([]Joined, error) {
	job, lay := c.job, c.lay
	joinCtx, joined := ctx, func() {}
	if d := job.Config.JoinTimeout; d > 0 {
		joinCtx, joined = context.WithTimeoutCause(ctx, d, fmt.Errorf("not all joined within %v", d))
	}
	defer joined()
	if stop := job.Config.Stop; stop != nil { // asked to stop while waiting: nothing to save
		var stopJoin context.CancelCauseFunc
		joinCtx, stopJoin = context.WithCancelCause(joinCtx)
		defer stopJoin(nil)
		go func() {
			select {
			case <-stop:
				stopJoin(&StoppedError{Step: job.From()})
			case <-joinCtx.Done():
			}
		}()
	}
	o := job.Options
	if job.Config.Resume != nil {
		o.Start = job.From()
	}
	a := assignment{Gen: job.gen(), Model: dag.Write(job.Graph.Model()), Plan: job.Plan.Encode(), Options: o,
		Timings: job.Config.Timings, Steps: job.Steps, Workers: lay.total}
	c.workers = make([]int32, lay.total) // by worker id: each one's control address
	who := make([]Joined, lay.total)
	slots := freeSlots{taken: make([]bool, lay.total)}
	for n := range c.workers {
		h, err := c.hello(joinCtx, n)
		if err != nil {
			return nil, err
		}
		if a.Stage, err = slots.take(h); err != nil {
			return nil, err
		}
		if err := sendJSON(ctx, c.ctl, h.Worker, 0, mbAssign, a); err != nil {
			return nil, err
		}
		c.workers[a.Stage] = h.Worker
		who[a.Stage] = Joined{Host: h.Host, PID: h.PID, Device: h.Device, BLAS: h.BLAS, Agent: h.Agent}
	}
	return who, nil
}

// hello takes the next worker's hello, n having joined before it.
func (c *collector) hello(joinCtx context.Context, n int) (hello, error) {
	var h hello
	_, msg, err := c.ctl.ReceiveAny(joinCtx, ctlEdge, 'a', mbHello)
	if err != nil {
		var se *StoppedError
		if cause := context.Cause(joinCtx); errors.As(cause, &se) {
			return h, se
		} else if cause != nil {
			err = cause
		}
		return h, fmt.Errorf("waiting for workers: %d of %d joined: %w", n, c.lay.total, err)
	}
	return h, json.Unmarshal(msg, &h)
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

// collector drives a run's iterations from the coordinator.
type collector struct {
	ctl     *wire.Endpoint
	job     *Job
	lay     replicas
	workers []int32 // by worker id: each one's control address
	res     *Result
	saved   int // the step of the newest checkpoint written, 0 for none
	skips   int // steps skipped in a row
}

// collect drives the iterations and gathers reports and parameters.
func (c *collector) collect(ctx context.Context, progress func(int64, float64)) (*Result, error) {
	for n := c.job.From(); n < c.job.Steps; n++ {
		select {
		case <-c.job.Config.Stop:
			return nil, c.stop(ctx, n)
		default:
		}
		if err := c.iteration(ctx, n, progress); err != nil {
			return nil, err
		}
	}
	for range c.workers {
		_, msg, err := c.ctl.ReceiveAny(ctx, ctlEdge, 'g', mbParams)
		if err != nil {
			return nil, workerFailure(c.ctl, err)
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
	c.res.Events = make([][]Event, len(c.job.Plan.Stages))
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
		if s == 0 && c.job.Options.Train.ClipGradNorm > 0 && !c.job.Options.Emulate {
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
				c.res.Ops = make([]map[string][2]float64, len(c.job.Plan.Stages))
			}
			c.res.Ops[st] = rep.OpSeconds
		}
		if rep.DeviceCalls != nil {
			if c.res.DeviceCalls == nil {
				c.res.DeviceCalls = make([]*cuda.Counts, len(c.job.Plan.Stages))
			}
			c.res.DeviceCalls[st] = rep.DeviceCalls
		}
	}
	if bad == "" && !finite(total) {
		bad, badStage = fmt.Sprintf("the loss is %v", total), len(c.job.Plan.Stages)-1
	}
	c.res.Losses = append(c.res.Losses, total)
	c.res.Iters = append(c.res.Iters, time.Since(began).Seconds())
	if err := c.judge(ctx, n, bad, badStage); err != nil {
		return err
	}
	if progress != nil {
		progress(int64(n), total)
	}
	if c.job.Options.Data.EvalDue(n, c.job.Steps) && !c.job.Options.Emulate {
		r, err := collectEval(ctx, c.ctl, c.workers, n)
		if err != nil {
			return err
		}
		c.res.Evals = append(c.res.Evals, r)
		if c.job.Config.OnEval != nil {
			c.job.Config.OnEval(r)
		}
	}
	if k := c.job.Options.CheckpointEvery; k > 0 && (n+1)%k == 0 && !c.job.Options.Emulate {
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
	skipping := c.job.Options.OnNonFinite == NonFiniteSkip && !c.job.Options.Emulate
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
	if c.skips++; c.skips > cmp.Or(c.job.Config.MaxSkips, 10) {
		e.Skips = c.skips - 1
		c.tell(ctx, int64(n), mbVerdict, goAbort)
		return e
	}
	c.res.Skipped = append(c.res.Skipped, n)
	if f := c.job.Config.Skipped; f != nil {
		f(int64(n), fmt.Sprintf("stage %d, %s", badStage, bad))
	}
	return c.tell(ctx, int64(n), mbVerdict, verdictSkip)
}

// nonFinite is the error that ends the run at step (counted from 1).
func (c *collector) nonFinite(step, stage int, what string) *NonFiniteError {
	e := &NonFiniteError{Step: step, Stage: stage, What: what}
	if c.saved > 0 {
		e.Saved, e.Dir = c.saved, c.job.Config.CheckpointDir
	} else if c.job.Config.Resume != nil && !c.job.Options.Init {
		e.Resumed = c.job.From()
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

// stop ends the run before iteration n, as Config.Stop asked: with a
// checkpoint at step n when the run keeps them and has none there yet.
func (c *collector) stop(ctx context.Context, n int) error {
	dir := c.job.Config.CheckpointDir
	save := dir != "" && !c.job.Options.Emulate && c.saved != n
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
	return &StoppedError{Step: n, Dir: dir, Saved: c.saved == n && dir != ""}
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
	for s := range c.job.Plan.Stages {
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
	g, p, dir := c.job.Graph, c.job.Plan, c.job.Config.CheckpointDir
	ck.Manifest.Step, ck.Manifest.Model, ck.Manifest.ModelHash = step, g.Name(), dag.ModelHash(g)
	ck.Manifest.Run, ck.Manifest.Seed = c.job.Run, g.Seed()
	ck.Manifest.Plan = fmt.Sprintf("%s, %d stages on %d devices", p.Strategy, len(p.Stages), c.lay.total)
	ck.Manifest.Optimizer = c.job.Options.Train.Optimizer
	if err := WriteCheckpoint(dir, ck); err != nil {
		return fmt.Errorf("checkpoint after step %d into %s: %w", step, dir, err)
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

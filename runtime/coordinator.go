package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/search"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

func now() time.Time            { return time.Now() }
func since(t time.Time) float64 { return time.Since(t).Seconds() }

// Coordinate runs plan with workers that join over t: it waits for one worker
// per stage, assigns the stages, collects each iteration's reports (calling
// progress with the iteration's loss) and the final parameters.
func Coordinate(ctx context.Context, g *dag.Graph, plan *search.Plan, t Transport, run string, steps int, o Options,
	progress func(iter int64, loss float64)) (*Result, error) {
	if h := search.ModelHash(g); h != plan.Model.SHA256 {
		return nil, fmt.Errorf("plan: made for model %q with hash %.12s, this model's is %.12s", plan.Model.Name, plan.Model.SHA256, h)
	}
	gen := max(o.Gen, 1)
	ctl, err := NewEndpoint(t, run, gen+ctlGenOffset, coordinator)
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
	for s := range workers {
		_, msg, err := ctl.ReceiveAny(joinCtx, ctlEdge, 'a', mbHello)
		if err != nil {
			if c := context.Cause(joinCtx); c != nil {
				err = c
			}
			return nil, fmt.Errorf("waiting for workers: %d of %d joined: %w", s, lay.total, err)
		}
		var h hello
		if err := json.Unmarshal(msg, &h); err != nil {
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
		res.Devices = where
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && cause != context.Canceled {
		return nil, cause
	}
	return res, err
}

// collect drives the iterations and gathers reports and parameters.
func collect(ctx context.Context, ctl *Endpoint, g *dag.Graph, plan *search.Plan, lay replicas, workers []int32, run string, steps int, o Options, progress func(int64, float64)) (*Result, error) {
	res := &Result{Params: map[string]*stage.Value[float32]{}}
	start := 0
	if o.Resume != nil {
		start = o.Resume.Manifest.Step
	}
	for n := start; n < steps; n++ {
		began := time.Now()
		for _, w := range workers {
			if err := ctl.Send(ctx, w, msgKey{int64(n), mbGo, ctlEdge, 'a'}, []byte{}); err != nil {
				return nil, err
			}
		}
		total := 0.0
		res.Events = make([][]Event, len(plan.Stages))
		for s := range workers {
			r, err := ctl.Receive(ctx, msgKey{int64(n)*reportStride + int64(s), mbReport, ctlEdge, 'a'})
			if err != nil {
				return nil, workerFailure(ctl, err)
			}
			var rep Report
			if err := json.Unmarshal(r, &rep); err != nil {
				return nil, err
			}
			total += rep.Loss
			st, replica := lay.where(s)
			if replica != 0 {
				continue
			}
			res.Events[st] = rep.Events
			if rep.OpSeconds != nil {
				if res.Ops == nil {
					res.Ops = make([]map[string][2]float64, len(plan.Stages))
				}
				res.Ops[st] = rep.OpSeconds
			}
		}
		res.Losses = append(res.Losses, total)
		res.Iters = append(res.Iters, time.Since(began).Seconds())
		if progress != nil {
			progress(int64(n), total)
		}
		if k := o.CheckpointEvery; k > 0 && (n+1)%k == 0 && !o.Emulate {
			if err := checkpoint(ctx, ctl, g, plan, lay, run, n, o); err != nil {
				return nil, err
			}
		}
	}
	for range workers {
		_, msg, err := ctl.ReceiveAny(ctx, ctlEdge, 'g', mbParams)
		if err != nil {
			return nil, workerFailure(ctl, err)
		}
		if err := decodeParams(msg, res.Params); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// workerFailure prefers a worker's own account of its failure.
func workerFailure(ctl *Endpoint, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, msg, e := ctl.ReceiveAny(ctx, ctlEdge, 'a', mbError)
	if e != nil {
		return err
	}
	var m map[string]string
	json.Unmarshal(msg, &m)
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

// checkpoint gathers every stage's state after iteration n and writes it.
func checkpoint(ctx context.Context, ctl *Endpoint, g *dag.Graph, plan *search.Plan, lay replicas, run string, n int, o Options) error {
	c := &Checkpoint{Params: map[string]*stage.Value[float32]{}, Optim: map[string][]float32{}}
	for s := range plan.Stages {
		id := lay.id(s, 0)
		msg, err := ctl.Receive(ctx, msgKey{int64(n)*reportStride + int64(id), mbCkpt, ctlEdge, 'g'})
		if err != nil {
			return err
		}
		entries, meta, err := tensor.DecodeSafetensors(msg)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if name, ok := cutState(e.Name); ok {
				c.Params[name] = &stage.Value[float32]{Shape: e.Shape, Data: e.F32}
			} else if slot, ok := strings.CutPrefix(e.Name, "optim:"); ok {
				c.Optim[slot] = e.F32
			}
		}
		c.Manifest.OptStep, _ = strconv.Atoi(meta["optimizer_step"])
	}
	c.Manifest.Step, c.Manifest.Model, c.Manifest.ModelHash = n+1, g.Name(), search.ModelHash(g)
	c.Manifest.Run, c.Manifest.Seed = run, g.Seed()
	c.Manifest.Plan = fmt.Sprintf("%s, %d stages on %d devices", plan.Strategy, len(plan.Stages), lay.total)
	c.Manifest.Optimizer = o.Train.Optimizer
	if err := WriteCheckpoint(o.CheckpointDir, c); err != nil {
		return fmt.Errorf("checkpoint after step %d into %s: %w", n+1, o.CheckpointDir, err)
	}
	return nil
}

// sendResume gives every worker its stage's share of a checkpoint.
func sendResume(ctx context.Context, ctl *Endpoint, g *dag.Graph, plan *search.Plan, lay replicas, workers []int32, c *Checkpoint) error {
	if c.Manifest.ModelHash != search.ModelHash(g) {
		return fmt.Errorf("checkpoint: made for model %q with hash %.12s, this model's is %.12s", c.Manifest.Model, c.Manifest.ModelHash, search.ModelHash(g))
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
		if err := ctl.Send(ctx, w, msgKey{0, mbResume, ctlEdge, 'g'}, b); err != nil {
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

package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor"
)

// A stage's state handed over whole, as a stream (stream.go): every
// stage's parameters to the coordinator at the end of the run (sendFinal,
// collectFinal), and to every worker its stage's share of the checkpoint it
// resumes from (sendResume, receiveResume). A checkpoint's shards are
// shard.go's.

// finalReport is a worker's word at the end of its run: whether its
// stage's parameters follow on the bulk stream (replica 0's do).
type finalReport struct {
	Stream bool `json:"stream"`
}

// sendFinal hands the stage's parameters over at the end of the run.
func (w *Worker) sendFinal(ctx context.Context, ctl, bulk *wire.Endpoint, a *assignment) error {
	rep := finalReport{Stream: !w.Emulate && w.Replica == 0}
	b, _ := json.Marshal(rep)
	if err := ctl.Send(ctx, coordinator, msgKey(int64(a.Stage), mbParams, ctlEdge, 'g'), b); err != nil {
		return err
	}
	if !rep.Stream {
		return nil
	}
	state, err := w.Params()
	if err != nil {
		return err
	}
	var entries []tensor.Named
	for name, v := range state {
		entries = append(entries, tensor.Named{Name: name, Shape: v.Shape, F32: v.Data})
	}
	sw := newStreamWriter(ctx, bulk, coordinator, streamID{streamFinal, 0, w.ID})
	if err := streamNamed(sw, entries); err != nil {
		sw.Fail(err)
		return err
	}
	return sw.Close()
}

// collectFinal takes every worker's word at the end of the run, and the
// parameters of each stage's replica 0, as they stream.
func (c *collector) collectFinal(ctx context.Context) error {
	// the parameters arrive tensor by tensor, each read in blocks first:
	// collect more eagerly meanwhile, so that the heap does not grow to
	// twice what is kept before it is collected
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	for range c.workers {
		k, msg, err := c.ctl.ReceiveAny(ctx, ctlEdge, 'g', mbParams)
		if err != nil {
			return workerFailure(c.ctl, err)
		}
		var rep finalReport
		if err := json.Unmarshal(msg, &rep); err != nil {
			return fmt.Errorf("worker %d's last word: %w", k.Iter, err)
		}
		id := int32(k.Iter)
		if id < 0 || int(id) >= len(c.left) {
			return fmt.Errorf("a last word from worker %d, beyond the plan's %d", id, len(c.left))
		}
		if rep.Stream {
			r := newStreamReader(ctx, c.bulk, id, streamID{streamFinal, 0, id})
			if _, err := tensor.DecodeSafetensorsFrom(r, -1, func(e tensor.Named) error {
				c.res.Params[e.Name] = &stage.Value[float32]{Shape: e.Shape, Data: e.F32}
				return nil
			}); err != nil {
				return fmt.Errorf("worker %d's parameters: %w", id, err)
			}
		}
		// it owes nothing more and leaves, while the others' parameters
		// may take a while yet
		c.left[id].Store(true)
	}
	return nil
}

// sendResume streams every worker its stage's share of a checkpoint, as
// the state message the worker reads ("param:", "buffer:", "optim:").
func sendResume(ctx context.Context, bulk *wire.Endpoint, job *Job, lay replicas, c *Checkpoint) error {
	g, plan := job.Graph, job.Plan
	for id := range lay.total {
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
		heads := make([]tensor.Head, len(entries))
		byName := map[string][]float32{}
		for i, e := range entries {
			heads[i] = tensor.Head{Name: e.Name, Shape: e.Shape, DType: "F32"}
			byName[e.Name] = e.F32
		}
		sw := newStreamWriter(ctx, bulk, int32(id), streamID{streamResume, 0, int32(id)})
		err := tensor.StreamSafetensors(sw, heads, resumeMeta(c), func(h tensor.Head, w io.Writer) error {
			return tensor.WriteF32(w, byName[h.Name])
		})
		if err != nil {
			sw.Fail(err)
			return err
		}
		if err := sw.Close(); err != nil {
			return err
		}
	}
	return nil
}

// receiveResume reads this worker's share of the checkpoint it resumes
// from, as it streams, and loads it.
func (w *Worker) receiveResume(ctx context.Context, bulk *wire.Endpoint) error {
	var entries []tensor.Named
	r := newStreamReader(ctx, bulk, coordinator, streamID{streamResume, 0, w.ID})
	meta, err := tensor.DecodeSafetensorsFrom(r, -1, func(e tensor.Named) error {
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return fmt.Errorf("the checkpoint to resume from: %w", err)
	}
	return w.loadEntries(entries, meta)
}

// loadEntries restores a share of a checkpoint (sendResume's stream):
// "param:<name>", "buffer:<name>" and "optim:<name>.<slot>", the
// optimizer's step in the metadata.
func (w *Worker) loadEntries(entries []tensor.Named, meta map[string]string) error {
	kinds := map[string]string{} // the stage's values: "param" or "buffer" by name
	for _, name := range w.ex.ParamNames() {
		kinds[name] = "param"
	}
	for _, name := range w.ex.BufferNames() {
		kinds[name] = "buffer"
	}
	have := w.ex.State()
	vals, optim := map[string]*stage.Value[float32]{}, map[string][]float32{}
	for _, e := range entries {
		kind, name, _ := strings.Cut(e.Name, ":")
		switch kind {
		case "param", "buffer":
			if kinds[name] != kind || len(have[name].Data) != len(e.F32) {
				return fmt.Errorf("checkpoint: %s %q does not fit stage %d", valueKind(kind), name, w.Stage)
			}
			vals[name] = &stage.Value[float32]{Shape: have[name].Shape, Data: e.F32}
		case "optim":
			optim[name] = e.F32
		}
	}
	for _, name := range append(w.ex.ParamNames(), w.ex.BufferNames()...) {
		if !hasEntry(entries, kinds[name]+":"+name) {
			return fmt.Errorf("checkpoint: lacks %s %q", valueKind(kinds[name]), name)
		}
	}
	w.ex.LoadState(vals)
	if err := w.loadSBHistory(meta); err != nil {
		return err
	}
	step, _ := strconv.Atoi(meta["optimizer_step"])
	return w.ex.LoadOptimizerState(optim, step)
}

// valueKind words a checkpoint entry's kind ("param", "buffer") for a message.
func valueKind(kind string) string {
	if kind == "param" {
		return "parameter"
	}
	return kind
}

func hasEntry(entries []tensor.Named, name string) bool {
	for _, e := range entries {
		if e.Name == name {
			return true
		}
	}
	return false
}

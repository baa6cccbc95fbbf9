package runtime

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// Selective backprop in a pipeline (stage/selective.go has the rule and
// the gradient's meaning), the same computation as one process's:
//
//  1. The loss's stage (one replica: the selector's history must see the
//     whole batch) computes each sample's loss in its Forward and keeps
//     rows by the selector (Options.Train.Selective), a function of the
//     seed, the iteration and the sample alone.
//  2. Every Backward runs on the micro-batch's kept rows alone, compacted
//     (stage.Executor.Compact), and what it sends back is their gradients:
//     each gradient message carries the kept rows' values and the list of
//     the micro-batch's kept rows (keptTensor), which the stage before
//     takes for its own Compact and passes on in its messages. Rows are
//     renumbered to the kept rows' places on both ends (keptRange), so a
//     replica's share is still a contiguous run of rows.
//  3. Every stage scales its gradients by B/K at the end of the step (K
//     the batch's kept samples, the sum of the lists it received), so the
//     gradient is the mean over the kept samples; the loss's stage then
//     adds the batch's losses to the history (Selector.Record), which a
//     checkpoint keeps (shardReport.SBHistory, Manifest.SBHistory) and a
//     resume restores.

// keptTensor names the list of a micro-batch's kept rows in a gradient
// message: '#' is in no model's tensor names.
const keptTensor = "#kept"

// selective is a worker's part of selective backprop: the selector at the
// loss's stage, nil elsewhere.
type selective struct {
	on  bool
	sel *stage.Selector
}

// openSelective sets the worker up for job's selective backprop, if any:
// per-sample losses and the selector at the loss's stage.
func (w *Worker) openSelective(job *Job) error {
	s := job.Options.Train.Selective
	if s == nil || w.Emulate {
		return nil
	}
	if job.Config.Device != nil {
		return fmt.Errorf("selective backprop runs on the cpu backend only")
	}
	w.sb.on = true
	if w.role.loss == "" {
		return nil
	}
	w.ex.SampleLoss = true
	var err error
	w.sb.sel, err = stage.NewSelector(*s, job.Graph.Seed())
	return err
}

// selectRows decides, at the loss's stage after micro-batch mb's Forward,
// which of its rows are kept (rows lo.. of the micro-batch are this
// replica's; the loss's stage has one).
func (w *Worker) selectRows(it *iteration, mb, lo int) {
	if w.sb.sel == nil {
		return
	}
	b := int(w.role.plan.MicroBatch)
	losses := w.ex.SampleLosses(mb)
	kept := w.sb.sel.KeepRows(int(it.n), mb*b+lo, losses)
	for i := range kept {
		kept[i] += lo
	}
	it.keptRows(mb, kept)
	it.sampleLosses[mb] = losses
}

// keptRows records micro-batch mb's kept rows (of the whole micro-batch).
func (it *iteration) keptRows(mb int, rows []int) {
	if it.kept == nil {
		it.kept, it.sampleLosses = map[int][]int{}, map[int][]float64{}
	}
	it.kept[mb] = rows
}

// compact cuts micro-batch mb, rows [lo, hi) of it here, to its kept rows
// before its Backward.
func (w *Worker) compact(it *iteration, mb, lo, hi int) error {
	if !w.sb.on {
		return nil
	}
	kept, ok := it.kept[mb]
	if !ok {
		return fmt.Errorf("selective backprop: micro-batch %d's backward came without its kept rows", mb)
	}
	local := []int{}
	for _, r := range kept {
		if r >= lo && r < hi {
			local = append(local, r-lo)
		}
	}
	return w.ex.Compact(mb, local)
}

// selected tells the executor, before the step ends, how many of the
// batch's samples had a backward pass: every micro-batch's kept rows.
func (w *Worker) selected(it *iteration) {
	if !w.sb.on {
		return
	}
	it.backprop = it.keptCount()
	w.ex.Selected(it.backprop, int(w.role.plan.BatchSize))
}

// keptCount is the batch's kept samples, over its micro-batches.
func (it *iteration) keptCount() int {
	k := 0
	for _, rows := range it.kept {
		k += len(rows)
	}
	return k
}

// recordLosses adds the iteration's losses to the history, micro-batch by
// micro-batch in order, once its step is ended.
func (w *Worker) recordLosses(it *iteration) {
	if w.sb.sel == nil {
		return
	}
	var all []float64
	for mb := range w.role.plan.MicroBatches {
		all = append(all, it.sampleLosses[mb]...)
	}
	w.sb.sel.Record(all)
}

// keptRange is rows [lo, hi) of a micro-batch renumbered to their places
// among its kept rows (kept nil: unchanged): a gradient's rows.
func keptRange(kept []int, lo, hi int) (int, int) {
	if kept == nil {
		return lo, hi
	}
	return countBelow(kept, lo), countBelow(kept, hi)
}

// countBelow is how many of the ascending rows are below x.
func countBelow(rows []int, x int) int {
	n := 0
	for _, r := range rows {
		if r < x {
			n++
		}
	}
	return n
}

// gradRows is how a gradient message of micro-batch mb with peer p counts
// rows under selective backprop: p's and this replica's rows [lo, hi)
// renumbered among the kept rows, and the list itself (nil without, or
// for activations: the rows as they are).
func (w *Worker) gradRows(it *iteration, a microbatch.Action, p peer, lo, hi int) (peer, int, int, []int) {
	if !w.sb.on || a.Dir != microbatch.Grad {
		return p, lo, hi, nil
	}
	kept := it.kept[a.MB]
	q := p
	q.lo, q.hi = keptRange(kept, p.lo, p.hi)
	lo, hi = keptRange(kept, lo, hi)
	return q, lo, hi, kept
}

// keptSpec is the list of kept rows as a message's tensor.
func keptSpec(kept []int) wire.TensorSpec {
	rows := make([]int32, len(kept))
	for i, r := range kept {
		rows[i] = int32(r)
	}
	t := wire.Tensor{Name: keptTensor, Shape: []int{len(rows)}, I32: rows}
	return wire.TensorSpec{Name: keptTensor, Shape: t.Shape, Int: true, Data: t.Data()}
}

// takeKept finds the list of kept rows among a gradient message's
// tensors, records it for the micro-batch (each message of it must carry
// the same), and returns the others.
func (w *Worker) takeKept(it *iteration, a microbatch.Action, ts []wire.Tensor) ([]wire.Tensor, error) {
	if !w.sb.on || a.Dir != microbatch.Grad {
		return ts, nil
	}
	out := ts[:0:0]
	var kept []int
	found := false
	for _, t := range ts {
		if t.Name != keptTensor {
			out = append(out, t)
			continue
		}
		found, kept = true, make([]int, len(t.I32))
		for i, r := range t.I32 {
			kept[i] = int(r)
		}
	}
	if !found {
		return nil, fmt.Errorf("edge %d: a gradient message of micro-batch %d without its kept rows", a.Edge, a.MB)
	}
	if old, ok := it.kept[a.MB]; ok && !sameRows(old, kept) {
		return nil, fmt.Errorf("edge %d: micro-batch %d's messages disagree on its kept rows", a.Edge, a.MB)
	}
	it.keptRows(a.MB, kept)
	return out, nil
}

func sameRows(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// validateSelective refuses selective backprop where it cannot run: bad
// settings, a model without per-sample losses, a plan that splits the
// loss's stage over replicas (each would keep a history of its rows
// alone), or one priced for another backward (Plan.BackpropFraction set
// without it).
func (j *Job) validateSelective() error {
	s := j.Options.Train.Selective
	if s == nil {
		if j.Plan.BackpropFraction > 0 && !j.Options.Emulate {
			return jobErr("Options.Train.Selective", "the plan is priced for selective backprop (backprop fraction %.3g); the run has none", j.Plan.BackpropFraction)
		}
		return nil
	}
	if err := s.Check(); err != nil {
		return jobErr("Options.Train.Selective", "%v", err)
	}
	if err := stage.CheckSelective(j.Graph); err != nil {
		return jobErr("Options.Train.Selective", "%v", err)
	}
	loss := j.Graph.Op(j.Graph.Loss()).Name
	for i, st := range j.Plan.Stages {
		for _, op := range st.Ops {
			if op == loss && len(st.Devices) > 1 {
				return jobErr("Options.Train.Selective", "stage %d of the plan holds the loss on %d data-parallel replicas; selective backprop keeps one history of the batch's losses, so that stage must run on one device (search with --selective-backprop)", i, len(st.Devices))
			}
		}
	}
	return nil
}

// sbMeta names the selector's history in a resume stream's metadata.
const sbMeta = "selective_backprop_history"

// sbHistory is what this worker's checkpoint share says of selective
// backprop: the loss's stage's history; nil elsewhere.
func (w *Worker) sbHistory() []float64 {
	if w.sb.sel == nil {
		return nil
	}
	return w.sb.sel.History()
}

// resumeMeta is a resume stream's metadata for checkpoint c: the
// optimizer's step, and the selective backprop history where it has one.
func resumeMeta(c *Checkpoint) map[string]string {
	meta := map[string]string{"optimizer_step": strconv.Itoa(c.Manifest.OptStep)}
	if len(c.Manifest.SBHistory) > 0 {
		b, _ := json.Marshal(c.Manifest.SBHistory) // float64s round-trip exactly
		meta[sbMeta] = string(b)
	}
	return meta
}

// loadSBHistory restores the loss's stage's selector from a resume
// stream's metadata (none there: an empty history, as a run begins).
func (w *Worker) loadSBHistory(meta map[string]string) error {
	if w.sb.sel == nil || meta[sbMeta] == "" {
		return nil
	}
	var h []float64
	if err := json.Unmarshal([]byte(meta[sbMeta]), &h); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", sbMeta, err)
	}
	return w.sb.sel.SetHistory(h)
}

package stage

import (
	"fmt"
	"time"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// A micro-batch's backward on the rows selective backprop kept
// (selective.go): Compact cuts what its Forward left to those rows, so
// that Backward and Weights run on them alone, and what they return is
// the kept rows' gradients, compacted. Every op but the loss computes a
// sample's output from that sample alone (CheckSelective refused the
// others), so the kept rows of its output are its output on the kept rows:
// an op's output is cut, and its stash where the kernel room can cut it
// (kernel.CompactStash); an op whose stash it cannot cut, and the loss,
// whose output is the mean over the rows, run their forward again on the
// cut inputs (leaving buffers alone, as recomputation does). A shed
// micro-batch (Recompute) keeps only its feeds: they are cut, and the
// recomputation runs on the kept rows alone.

// SampleLosses is micro-batch mb's per-sample losses, computed by its
// training Forward at the stage holding the loss when SampleLoss is set;
// nil otherwise.
func (e *Executor) SampleLosses(mb int) []float64 {
	if m := e.mbs[mb]; m != nil {
		return m.sampleLoss
	}
	return nil
}

// sampleLosses computes m's per-sample losses from the loss op's inputs
// (Forward, before a shed forgets them).
func (e *Executor) sampleLosses(m *microBatch) error {
	if !e.SampleLoss || e.lossOp == "" {
		return nil
	}
	if e.be.Name() != "cpu" {
		return fmt.Errorf("stage: per-sample losses (selective backprop) run on the cpu backend only")
	}
	l := e.g.Loss()
	per := kernel.SampleLosses(e.g.Op(l).Kind)
	if per == nil {
		return &UnselectableError{e.lossOp, fmt.Sprintf("its loss kind %s gives no per-sample losses", e.g.Op(l).Kind)}
	}
	var x []*Value[float32]
	for _, t := range e.g.OpInputs(l) {
		x = append(x, m.vals[t.Name])
	}
	m.sampleLoss = per(x)
	return nil
}

// Compact makes micro-batch mb's backward passes run on its rows kept
// alone (indices into its rows, ascending): its values and stash cut to
// them (see above), Backward's gradients given and returned of those rows,
// the loss's seed (b/B, the micro-batch's share of the batch) made the
// kept rows' share (each kept sample weighing 1/B). Every row kept leaves
// the micro-batch as it is; none kept makes its backward passes do nothing
// (Backward returns no gradients). Call it once, after Forward, before
// Backward.
func (e *Executor) Compact(mb int, kept []int) error {
	m, ok := e.mbs[mb]
	switch {
	case !ok:
		return fmt.Errorf("stage: Compact: micro-batch %d has no forward pass", mb)
	case m.kept != nil:
		return fmt.Errorf("stage: Compact: micro-batch %d is compacted already", mb)
	case len(m.grads) > 0 || m.weight:
		return fmt.Errorf("stage: Compact: micro-batch %d has begun its backward", mb)
	}
	n := m.pos.Rows
	for i, r := range kept {
		if r < 0 || r >= n || i > 0 && r <= kept[i-1] {
			return fmt.Errorf("stage: Compact: rows %v are not ascending rows of a micro-batch of %d", kept, n)
		}
	}
	if len(kept) == n {
		return nil
	}
	if e.be.Name() != "cpu" {
		return fmt.Errorf("stage: Compact: selective backprop runs on the cpu backend only")
	}
	if kept == nil {
		kept = []int{} // nil would say every row
	}
	m.kept, m.rows = kept, n
	if len(kept) == 0 {
		m.vals, m.stash, m.feeds = nil, nil, nil
		return nil
	}
	m.pos.Rows, m.pos.Kept = len(kept), kept
	feeds := make(map[string]*Value[float32], len(m.feeds))
	for name, v := range m.feeds {
		feeds[name] = kernel.GatherRows(v, kept)
	}
	m.feeds = feeds
	if m.shed {
		return nil // the recomputation runs on the cut feeds
	}
	return e.cut(m, n)
}

// cut makes m's op outputs and stash its kept rows' (m.feeds are cut
// already), op by op in the stage's order.
func (e *Executor) cut(m *microBatch, n int) error {
	vals := make(map[string]*Value[float32], len(m.vals))
	for name, v := range m.feeds {
		vals[name] = v
	}
	e.ctx.Pos, e.ctx.Recomputing = m.pos, true
	defer func() { e.ctx.Recomputing = false }()
	for _, i := range e.ops {
		name := e.g.Op(i).Name
		y := m.vals[name]
		if name != e.lossOp && len(y.Shape) > 0 && y.Shape[0] == n {
			if st, ok := kernel.CompactStash(m.stash[i], n, m.kept); ok {
				vals[name], m.stash[i] = kernel.GatherRows(y, m.kept), st
				continue
			}
		}
		if err := e.rerun(m, vals, i); err != nil {
			return err
		}
	}
	m.vals = vals
	return nil
}

// rerun runs op i's forward again on the cut values vals, into them and
// m's stash.
func (e *Executor) rerun(m *microBatch, vals map[string]*Value[float32], i int) error {
	start := time.Now()
	var x []*Value[float32]
	for _, t := range e.g.OpInputs(i) {
		v, ok := vals[t.Name]
		if !ok {
			return fmt.Errorf("stage: op %q: input %q was not fed", e.g.Op(i).Name, t.Name)
		}
		x = append(x, v)
	}
	y, st, err := e.kernels[i].Forward(x, e.params(i))
	e.OpSeconds[e.g.Op(i).Name][0] += time.Since(start).Seconds()
	if err != nil {
		return err
	}
	vals[e.g.Op(i).Name], m.stash[i] = y, st
	return nil
}

// keptSeed is the loss's seed for a compacted micro-batch: the kept rows'
// share of seed (seed·k/n), so that each kept sample weighs what it did
// in the whole micro-batch.
func keptSeed(m *microBatch, seed *Value[float32]) *Value[float32] {
	if m.kept == nil || seed == nil || len(seed.Data) == 0 {
		return seed
	}
	return &Value[float32]{Shape: []int{1}, Data: []float32{seed.Data[0] * float32(len(m.kept)) / float32(m.rows)}}
}

// Selected says how many of the step's batch of batch samples had a
// backward pass (selective backprop): EndStep scales the gradients by
// batch/kept, making them the mean over the kept samples. Call it before
// EndStep, every step; kept = batch (or 0: no sample, no gradient) leaves
// them as they are.
func (e *Executor) Selected(kept, batch int) {
	e.selScale = 1
	if kept > 0 && kept < batch {
		e.selScale = float32(float64(batch) / float64(kept))
	}
}

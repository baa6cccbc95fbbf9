package runtime

import (
	"context"
	"fmt"

	"github.com/graphpipe/graphpipe/dataset"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/stage"
)

// evalMBBase is where an evaluation's micro-batch numbers start in frame
// keys: evaluation batch k's micro-batch m is evalMBBase + k·M + m, M
// being the plan's micro-batches per iteration, so that its frames never
// mix with an iteration's.
const evalMBBase = 1 << 30

// Eval runs the evaluation set through the stage after iteration n:
// every batch's micro-batches forward in the schedule's order of forward
// passes and activation transfers, in evaluation mode, nothing stashed. It
// returns the stage's share of the evaluation (zero unless it holds the
// loss). samples is the evaluation set's size, which every stage knows
// whether it reads the set or not.
func (w *Worker) Eval(ctx context.Context, n int64, samples int) (stage.EvalSums, error) {
	var sums stage.EvalSums
	if w.Emulate {
		return sums, nil
	}
	B, b := int(w.role.plan.BatchSize), int(w.role.plan.MicroBatch)
	mbs := B / b
	defer func() { w.feed.evalRows = -1 }()
	for k := 0; k < dataset.EvalBatches(samples, B); k++ {
		rows := min(B, samples-k*B)
		it := &iteration{n: n, feeds: map[int]map[string]*stage.Value[float32]{}, outs: map[int]map[string]*stage.Value[float32]{}}
		if len(w.feed.reads) > 0 {
			var err error
			if it.batch, err = w.feed.eval.Batch(k, w.feed.reads); err != nil {
				return sums, dataErr(fmt.Errorf("evaluation after step %d: %w", n+1, err))
			}
		}
		for _, a := range w.role.sched {
			if a.Kind != microbatch.Forward && !((a.Kind == microbatch.Send || a.Kind == microbatch.Recv) && a.Dir == microbatch.Act) {
				continue
			}
			m := a.MB
			if w.feed.evalRows = min(max(rows-m*b, 0), b); w.feed.evalRows == 0 {
				continue // past the last partial batch's rows
			}
			a.MB = evalMBBase + k*mbs + m
			var err error
			switch a.Kind {
			case microbatch.Forward:
				err = w.evalForward(it, a, m*b, &sums)
			case microbatch.Send:
				err = w.send(ctx, it, a)
			case microbatch.Recv:
				err = w.recv(ctx, it, a)
			}
			if err != nil {
				return sums, fmt.Errorf("stage %d replica %d, evaluation after step %d, batch %d, action %v: %w", w.Stage, w.Replica, n+1, k, a, err)
			}
		}
		if err := w.links.out.drain(ctx); err != nil {
			return sums, fmt.Errorf("stage %d replica %d, evaluation after step %d, batch %d, sending: %w", w.Stage, w.Replica, n+1, k, err)
		}
		w.links.recycle(it)
	}
	return sums, nil
}

// evalForward runs one evaluation micro-batch (whose first row is at in
// the batch) forward and adds its loss to sums at the loss's stage.
func (w *Worker) evalForward(it *iteration, a microbatch.Action, at int, sums *stage.EvalSums) error {
	lo, hi := w.rows()
	if lo >= hi {
		return nil // this replica's rows lie past the partial batch's end
	}
	feeds := w.feedsOf(it, a.MB)
	for name, v := range it.batch {
		feeds[name] = stage.SliceRows(v, at+lo, at+hi)
	}
	w.watch.busy(fmt.Sprintf("evaluation after step %d", it.n+1))
	defer w.watch.busy("")
	out, err := w.ex.Evaluate(a.MB, stage.Position{Step: int(it.n) + 1, Sample: at + lo}, feeds)
	if err != nil {
		return err
	}
	it.outs[a.MB] = out
	if w.role.loss == "" {
		return nil
	}
	s, err := w.ex.LossSums(hi-lo, func(name string) *stage.Value[float32] {
		if v := out[name]; v != nil {
			return v
		}
		return feeds[name]
	})
	sums.Add(s)
	return err
}

package runtime

import (
	"context"
	"fmt"
	"os"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/dataset"
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/stage"
)

// evalMBBase is where an evaluation's micro-batch numbers start in frame
// keys: evaluation batch k's micro-batch m is evalMBBase + k·M + m, M
// being the plan's micro-batches per iteration, so that its frames never
// mix with an iteration's.
const evalMBBase = 1 << 30

// openData opens what the stage reads: the synthetic data, or the run's
// dataset and evaluation set on this host, checked against the model and
// against the coordinator's fingerprints. A stage that reads no model
// input opens nothing.
func (w *Worker) openData(g *dag.Graph) error {
	spec := w.spec
	if spec == nil || spec.Path == "" {
		ds, err := stage.NewDataset(g)
		w.data = ds
		if err != nil || spec == nil || spec.EvalPath == "" {
			return err
		}
	}
	if len(w.reads) == 0 {
		return nil
	}
	host, _ := os.Hostname()
	open := func(flag, path, want string) (*dataset.Set, error) {
		set, err := OpenData(path, g, spec.AllowNonfinite)
		if err != nil {
			return nil, &DataError{fmt.Sprintf("worker %d on %s: %s %v", w.ID, host, flag, err)}
		}
		w.sets = append(w.sets, set)
		got, err := set.Fingerprint()
		if err != nil {
			return nil, &DataError{fmt.Sprintf("worker %d on %s: %s %v", w.ID, host, flag, err)}
		}
		if want != "" && got != want {
			return nil, &DataError{fmt.Sprintf("worker %d on %s: %s %s holds other data than the coordinator's (fingerprint %.12s, the coordinator's %.12s): every host needs the same files", w.ID, host, flag, path, got, want)}
		}
		return set, nil
	}
	if spec.Path != "" {
		set, err := open("--data", spec.Path, spec.Fingerprint)
		if err != nil {
			return err
		}
		if w.data, err = NewDataSource(set, int(w.plan.BatchSize), g.Seed(), spec.Shuffle); err != nil {
			return dataErr(err)
		}
	}
	if spec.EvalPath != "" {
		set, err := open("--eval-data", spec.EvalPath, spec.EvalFingerprint)
		if err != nil {
			return err
		}
		w.eval = &EvalData{Set: set, Size: int(w.plan.BatchSize)}
	}
	return nil
}

// Close lets go of the worker's data files.
func (w *Worker) Close() {
	if w.out != nil {
		w.out.close()
		w.out = nil
	}
	if p, ok := w.data.(*stage.Prefetcher); ok {
		p.Wait()
	}
	for _, s := range w.sets {
		s.Close()
	}
	w.sets = nil
}

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
	B, b := int(w.plan.BatchSize), int(w.plan.MicroBatch)
	mbs := B / b
	defer func() { w.evalRows = -1 }()
	for k := 0; k < dataset.EvalBatches(samples, B); k++ {
		rows := min(B, samples-k*B)
		it := &iteration{n: n, feeds: map[int]map[string]*stage.Value[float32]{}, outs: map[int]map[string]*stage.Value[float32]{}}
		if len(w.reads) > 0 {
			var err error
			if it.batch, err = w.eval.Batch(k, w.reads); err != nil {
				return sums, dataErr(fmt.Errorf("evaluation after step %d: %w", n+1, err))
			}
		}
		for _, a := range w.sched {
			if a.Kind != microbatch.Forward && !((a.Kind == microbatch.Send || a.Kind == microbatch.Recv) && a.Dir == microbatch.Act) {
				continue
			}
			m := a.MB
			if w.evalRows = min(max(rows-m*b, 0), b); w.evalRows == 0 {
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
		if err := w.out.drain(ctx); err != nil {
			return sums, fmt.Errorf("stage %d replica %d, evaluation after step %d, batch %d, sending: %w", w.Stage, w.Replica, n+1, k, err)
		}
		w.recycle(it)
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
	w.busy(fmt.Sprintf("evaluation after step %d", it.n+1))
	defer w.busy("")
	out, err := w.ex.Evaluate(a.MB, stage.Position{Step: int(it.n) + 1, Sample: at + lo}, feeds)
	if err != nil {
		return err
	}
	it.outs[a.MB] = out
	if w.loss == "" {
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

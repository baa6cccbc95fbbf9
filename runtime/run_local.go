package runtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// RunLocal trains job in this process, one goroutine per worker, over
// transport t, from step 0 (job's Config.Resume and Stop are the
// coordinator's, and are not read): the in-process run the tests set
// against a single process. It refuses a plan made for another model.
func RunLocal(ctx context.Context, job *Job, t wire.Transport) (*Result, error) {
	g, plan, o, steps := job.Graph, job.Plan, job.Options, job.Steps
	if err := plan.CheckModelHash("run local", g); err != nil {
		return nil, err
	}
	workers := make([]*Worker, layout(plan).total)
	for id := range workers {
		ep, err := wire.NewEndpoint(t, job.Run, job.gen(), int32(id))
		if err != nil {
			return nil, err
		}
		defer ep.Close()
		if workers[id], err = NewWorker(job, id, ep); err != nil {
			return nil, err
		}
		defer workers[id].Close()
	}
	res := &Result{Params: map[string]*stage.Value[float32]{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for n := 0; n < steps; n++ {
		start := time.Now()
		losses := make([]float64, len(workers))
		err := eachWorker(workers, cancel, func(s int, w *Worker) (err error) {
			losses[s], err = w.Run(ctx, int64(n))
			return err
		})
		if err != nil {
			return nil, err
		}
		total := 0.0
		for s := range workers {
			total += losses[s]
		}
		res.Losses = append(res.Losses, total)
		res.Iters = append(res.Iters, time.Since(start).Seconds())
		if o.Train.ClipGradNorm > 0 {
			res.GradNorms = append(res.GradNorms, workers[0].GradNorm())
		}
		if o.Train.Selective != nil && !o.Emulate {
			res.Backprop = append(res.Backprop, workers[0].backprop)
		}
		if o.Data.EvalDue(n, steps) && !o.Emulate {
			r, err := evalLocal(ctx, cancel, workers, n, o.Data.EvalSamples)
			if err != nil {
				return nil, err
			}
			res.Evals = append(res.Evals, r)
		}
	}
	for _, w := range workers {
		res.Links = append(res.Links, w.Links())
		res.keepMemory(int(w.ID), len(workers), w.Memory())
		if w.Replica != 0 {
			continue // replicas hold the same parameters; report each stage once
		}
		res.Events = append(res.Events, w.Events())
		res.Ops = append(res.Ops, w.OpSeconds())
		if c := w.DeviceCalls(); c != nil {
			if res.DeviceCalls == nil {
				res.DeviceCalls = make([]*cuda.Counts, len(job.Plan.Stages))
			}
			res.DeviceCalls[w.Stage] = c
		}
		state, err := w.Params()
		if err != nil {
			return nil, err
		}
		for k, v := range state {
			res.Params[k] = v
		}
		res.Stats = append(res.Stats, w.links.ep.Stats())
	}
	return res, nil
}

// eachWorker runs f on every worker at once; the first to fail cancels
// the others, and its error is returned.
func eachWorker(workers []*Worker, cancel func(), f func(s int, w *Worker) error) error {
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for s, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[s] = f(s, w); errs[s] != nil {
				cancel() // one stage failing stops the others
			}
		}()
	}
	wg.Wait()
	return firstCause(errs)
}

// evalLocal runs the evaluation after iteration n on every worker at once.
func evalLocal(ctx context.Context, cancel func(), workers []*Worker, n, samples int) (stage.EvalResult, error) {
	parts := make([]stage.EvalSums, len(workers))
	err := eachWorker(workers, cancel, func(s int, w *Worker) (err error) {
		parts[s], err = w.Eval(ctx, int64(n), samples)
		return err
	})
	if err != nil {
		return stage.EvalResult{}, err
	}
	var sums stage.EvalSums
	for _, p := range parts {
		sums.Add(p)
	}
	return sums.Result(n + 1), nil
}

// firstCause is the first error that is not a consequence of cancelling the
// others after it.
func firstCause(errs []error) error {
	var fallback error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
		fallback = err
	}
	return fallback
}

package runtime

import (
	"github.com/graphpipe/graphpipe/microbatch"
	"github.com/graphpipe/graphpipe/stage"
)

// A plan whose schedule has no flush (2bw: microbatch.Schedule.NoFlush)
// runs each iteration's steady list, in which a stage runs the first
// forwards of the next batch before its update (indices from M on). The
// worker keeps the next batch's iteration (its data, its feeds and
// outputs, its messages) from the first such forward on and takes it up
// when that iteration begins; the frames of those forwards are keyed by the
// next batch's iteration and micro-batch, as its own list would key them,
// so a stage that runs nothing ahead takes them in its next iteration. The
// first iteration a worker runs (a run's start, a resume) runs the
// warm-up its predecessor would have run ahead, the last one nothing of a
// batch that does not come. The executor keeps two versions of its weights
// (stage.Executor.SetTwoVersions): the next batch's forwards read the
// newest, the rest the version before. A stop or a checkpoint between
// iterations leaves the forwards run ahead behind: a checkpoint holds both
// versions, and a run resumed from it runs them again from there, the same
// numbers. The coordinator does not hold the workers between iterations
// (coordinator.go: it tells every go one iteration ahead).

// twoBW is a worker's part of a schedule without a flush: the lists of its
// iterations and the next batch's iteration once it has begun.
type twoBW struct {
	first, steady, last, alone *microbatch.Schedule
	ahead                      *iteration // the next batch's, once a forward ran ahead
}

// newTwoBW is the iterations' schedules of sch (nil for a flushed one).
func newTwoBW(sch *microbatch.Schedule) *twoBW {
	if !sch.NoFlush {
		return nil
	}
	with := func(first, last bool) *microbatch.Schedule {
		return &microbatch.Schedule{Name: sch.Name, Pipe: sch.Pipe, Lists: sch.IterationLists(first, last)}
	}
	return &twoBW{first: with(true, false), steady: sch, last: with(false, true), alone: sch.Flushed()}
}

// schedule is the schedule of iteration n of steps: the first (nothing
// ran ahead for it) or a later one, the last or not.
func (t *twoBW) schedule(n, steps int64) *microbatch.Schedule {
	first := t.ahead == nil || t.ahead.n != n
	last := n == steps-1
	switch {
	case first && last:
		return t.alone
	case first:
		return t.first
	case last:
		return t.last
	}
	return t.steady
}

// iterationSchedule is the schedule iteration n runs at this worker.
func (w *Worker) iterationSchedule(n int64) *microbatch.Schedule {
	if w.twoBW == nil {
		return w.role.sch
	}
	return w.twoBW.schedule(n, w.steps)
}

// takeIteration is iteration n's state: what the iteration before began of
// it, or a fresh one.
func (w *Worker) takeIteration(n int64) *iteration {
	if t := w.twoBW; t != nil && t.ahead != nil {
		it := t.ahead
		t.ahead = nil
		if it.n == n {
			return it
		}
		w.links.recycle(it) // a batch begun and left (the run went elsewhere)
	}
	return newIteration(n)
}

func newIteration(n int64) *iteration {
	return &iteration{n: n, feeds: map[int]map[string]*stage.Value[float32]{}, outs: map[int]map[string]*stage.Value[float32]{},
		grads: map[int]map[string]*stage.Value[float32]{}, ingrads: map[int]map[string]*stage.Value[float32]{}}
}

// own is the iteration and action that action a of iteration it's list is
// for: the next batch's, its index within that batch, where a runs ahead
// (the next batch's iteration begun at its first such action); else it and
// a themselves.
func (w *Worker) own(it *iteration, a microbatch.Action) (*iteration, microbatch.Action, error) {
	m := w.role.sch.Pipe.MicroBatches
	if w.twoBW == nil || a.MB < m {
		return it, a, nil
	}
	t := w.twoBW
	if t.ahead == nil {
		t.ahead = newIteration(it.n + 1)
		if err := w.do.begin(t.ahead); err != nil {
			return nil, a, err
		}
	}
	a.MB -= m
	return t.ahead, a, nil
}

// mbKey is the executor's and the sender's key of micro-batch mb of
// iteration it: mb itself where iterations do not overlap; without a
// flush, one of its own per iteration, below the evaluation's (which are
// positive), since two batches' micro-batches are in flight at once.
func (w *Worker) mbKey(it *iteration, mb int) int {
	if w.twoBW == nil {
		return mb
	}
	return -1 - (int(it.n)*w.role.sch.Pipe.MicroBatches + mb)
}

// validateTwoBW refuses what a schedule without a flush cannot train
// with (stage.Executor.SetTwoVersions): selective backprop, and a model
// with buffers; the CUDA backend each worker refuses as it starts.
func (j *Job) validateTwoBW() error {
	k, _ := microbatch.KindOf(j.Plan.Schedule)
	if !k.NoFlush || j.Options.Emulate {
		return nil
	}
	if j.Options.Train.Selective != nil {
		return jobErr("Options.Train.Selective", "schedule %s runs the next batch's forwards before a batch's losses are accounted: selective backprop keeps samples by them; use a flushed schedule", j.Plan.Schedule)
	}
	for i := 0; i < j.Graph.NumOps(); i++ {
		if b := j.Graph.Buffers(i); len(b) > 0 {
			return jobErr("Plan", "schedule %s: op %q keeps buffers (%s), which the forwards run ahead of an update move before a checkpoint could hold them; use a flushed schedule", j.Plan.Schedule, j.Graph.Op(i).Name, b[0].Key)
		}
	}
	return nil
}

package runtime

import (
	"context"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/stage"
)

// Where a stage's optimizer state lives is its plan's word
// (plan.PlanStage.OptimizerState). A sharded stage's replicas each hold
// and step their shard (stage.Shard: replica r the chunk the ring's
// reduce-scatter leaves summed at it, shardOf) between the ring's two
// halves (stepComm's ReduceScatter and AllGather); each pools the squared
// norms of its shard with every other worker (globalNorm); and for a
// checkpoint each sends its shard of the state to replica 0, which writes
// it whole, keyed by parameter name like any other stage's (gatherState),
// so that any plan loads it. A stage whose state lives in host memory
// steps it there on a device backend (stage.Executor.OffloadOptimizer); on
// the CPU it is there already.

// The wire edges of a sharded stage's traffic beside the ring's: each
// replica's squared norms (the micro-batch field names the sending
// worker) and each replica's shard of the optimizer state on its way to
// replica 0 for a checkpoint (the micro-batch field names the replica).
const (
	shardNormEdge  = ringEdge + 2
	shardStateEdge = ringEdge + 3
)

// sharded says whether stage s's optimizer state is sharded across its
// replicas.
func (r *role) sharded(s int) bool {
	return r.plan.Stages[s].StateName() == plan.StateSharded && r.lay.count[s] > 1
}

// offloaded says whether stage s keeps its optimizer state in host memory.
func (r *role) offloaded(s int) bool { return r.plan.Stages[s].StateName() == plan.StateHost }

// placeState shards or offloads the worker's optimizer state as its plan
// says, before the first step and any state it resumes from.
func (w *Worker) placeState() error {
	switch {
	case w.role.sharded(w.Stage):
		// a plan that gives the all-gather a time of its own runs it
		// late (stage.Executor.GatherLate): while the stages upstream
		// make the next iteration's first inputs
		w.ex.GatherLate(w.role.plan.Stages[w.Stage].GathersLate())
		return w.ex.ShardOptimizer(shardOf(w.Replica, w.role.lay.count[w.Stage]))
	case w.role.offloaded(w.Stage) && w.dev != nil:
		return w.ex.OffloadOptimizer()
	}
	return nil
}

func (c stepComm) ReduceScatter(ctx context.Context, grads []*stage.Value[float32]) error {
	if ok, err := c.w.waitBuckets(c.n); ok {
		return err
	}
	return c.w.reduceScatter(ctx, c.n, grads)
}

func (c stepComm) AllGather(ctx context.Context, params []*stage.Value[float32]) error {
	return c.w.allGather(ctx, c.n, params)
}

// sendShardNorms sends a sharded stage's replica's squared norms (of its
// shard: parts of its parameters') to every other worker.
func (w *Worker) sendShardNorms(ctx context.Context, n int64, own map[string]float64) error {
	msg, err := msgpack.Marshal(own)
	if err != nil {
		return err
	}
	for id := int32(0); id < int32(w.role.lay.total); id++ {
		if id != w.ID {
			if err := w.links.ep.Send(ctx, id, msgKey(n, w.ID, shardNormEdge, 'g'), msg); err != nil {
				return err
			}
		}
	}
	return nil
}

// shardNorms adds sharded stage s's squared norms into all: each
// replica's (this worker's own where it is one) added name by name in
// replica order, so that every worker sums the same numbers in the same
// order.
func (w *Worker) shardNorms(ctx context.Context, n int64, s int, own, all map[string]float64) error {
	for r := 0; r < w.role.lay.count[s]; r++ {
		id := w.role.lay.id(s, r)
		part := own
		if id != w.ID {
			msg, err := w.links.ep.Receive(ctx, msgKey(n, id, shardNormEdge, 'g'))
			if err != nil {
				return err
			}
			part = nil
			if err := msgpack.Unmarshal(msg, &part); err != nil {
				return fmt.Errorf("stage %d replica %d's gradient norms: %w", s, r, err)
			}
		}
		for name, v := range part {
			all[name] += v
		}
	}
	return nil
}

// shardState is a replica's shard of its stage's optimizer state, on its
// way to replica 0 for a checkpoint.
type shardState struct {
	Step  int                  `msgpack:"step"`
	State map[string][]float32 `msgpack:"state"`
}

// sendShardState sends this replica's shard of the optimizer state to its
// stage's replica 0, which writes the checkpoint at step.
func (w *Worker) sendShardState(ctx context.Context, step int) error {
	st, n, err := w.ex.OptimizerState()
	if err != nil {
		return err
	}
	msg, err := msgpack.Marshal(shardState{n, st})
	if err != nil {
		return err
	}
	return w.links.ep.Send(ctx, w.role.lay.id(w.Stage, 0), msgKey(int64(step), int32(w.Replica), shardStateEdge, 'g'), msg)
}

// gatherState is, at replica 0 of a sharded stage, the stage's whole
// optimizer state for the checkpoint at step: its own shard and every
// other replica's, put together by parameter name.
func (w *Worker) gatherState(ctx context.Context, step int) (map[string][]float32, int, error) {
	k := w.role.lay.count[w.Stage]
	parts := make([]map[string][]float32, k)
	own, n, err := w.ex.OptimizerState()
	if err != nil {
		return nil, 0, err
	}
	parts[shardOf(0, k).Index] = own
	for r := 1; r < k; r++ {
		msg, err := w.links.ep.Receive(ctx, msgKey(int64(step), int32(r), shardStateEdge, 'g'))
		if err != nil {
			return nil, 0, err
		}
		var got shardState
		if err := msgpack.Unmarshal(msg, &got); err != nil {
			return nil, 0, fmt.Errorf("replica %d's optimizer state: %w", r, err)
		}
		if got.Step != n {
			return nil, 0, fmt.Errorf("replica %d's optimizer is at step %d, replica 0's at %d", r, got.Step, n)
		}
		parts[shardOf(r, k).Index] = got.State
	}
	st, err := w.ex.GatherOptimizerState(parts)
	return st, n, err
}

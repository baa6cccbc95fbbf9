package runtime

import (
	"context"
	"fmt"
	"maps"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/graphpipe/graphpipe/stage"
)

// normEdge is the edge key of the gradient-norm exchange, beside ringEdge's
// all-reduce; a message's micro-batch field names the sending stage.
const normEdge = ringEdge + 1

// globalNorm is the gradients' norm over the whole model, for clipping
// (stage/clip.go), once the stage's replicas hold the same gradients: each
// stage's replica 0 sends its parameters' squared norms (own, by name) to
// every worker of the other stages (its own stage's replicas hold the same
// norms, and never read it: sent to them, it could arrive after they
// left, unacknowledged, and hold the sender's last drain for ever), and
// every worker pools them with its own and those of every other stage and sums them in the order of the parameters' names
// (stage.GlobalNorm). Each parameter is counted once, however many
// replicas hold it, and every worker, in every plan, gets the number one
// process gets. A sharded stage's replicas each send theirs, parts of
// each norm (their shard's), which every worker adds in replica order
// (shardNorms): the same number everywhere, within rounding of the whole.
func (w *Worker) globalNorm(ctx context.Context, n int64, own map[string]float64) (float64, error) {
	if w.role.sharded(w.Stage) { // every replica holds a part of each norm
		if err := w.sendShardNorms(ctx, n, own); err != nil {
			return 0, err
		}
	} else if w.Replica == 0 {
		msg, err := msgpack.Marshal(own)
		if err != nil {
			return 0, err
		}
		for _, id := range w.role.lay.othersThan(w.Stage) {
			if err := w.links.ep.Send(ctx, id, msgKey(n, int32(w.Stage), normEdge, 'g'), msg); err != nil {
				return 0, err
			}
		}
	}
	all := maps.Clone(own)
	if w.role.sharded(w.Stage) {
		all = map[string]float64{}
	}
	for s := range w.role.lay.count {
		if w.role.sharded(s) {
			if err := w.shardNorms(ctx, n, s, own, all); err != nil {
				return 0, err
			}
			continue
		}
		if s == w.Stage {
			continue
		}
		msg, err := w.links.ep.Receive(ctx, msgKey(n, int32(s), normEdge, 'g'))
		if err != nil {
			return 0, err
		}
		var part map[string]float64
		if err := msgpack.Unmarshal(msg, &part); err != nil {
			return 0, fmt.Errorf("stage %d's gradient norms: %w", s, err)
		}
		for name, v := range part {
			if _, dup := all[name]; dup {
				return 0, fmt.Errorf("stage %d's gradient norms name %q, which another stage holds", s, name)
			}
			all[name] = v
		}
	}
	return stage.GlobalNorm(all), nil
}

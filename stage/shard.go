package stage

import (
	"context"
	"fmt"
	"strings"
)

// Shard is one replica's share of a stage whose optimizer state is sharded
// across its Count replicas (ZeRO stage 1; plan.StateSharded). Of the
// stage's parameters laid end to end in name order (ParamNames: the
// all-reduce's order), the replica owns the elements Span gives: the chunk
// that the ring's reduce-scatter leaves summed at it. It keeps the
// optimizer state of those elements alone, checks, clips and steps them
// alone, and hands them to the other replicas (ShardComm.AllGather); each
// replica holds every parameter and gradient, as before.
type Shard struct {
	Index, Count int
}

// Span is the shard's [lo, hi) of n elements laid end to end: chunk Index
// of Count, as the ring cuts them.
func (s Shard) Span(n int) (lo, hi int) {
	return s.Index * n / s.Count, (s.Index + 1) * n / s.Count
}

// ShardComm is what a StepComm offers a stage whose optimizer state is
// sharded (Executor.ShardOptimizer): the two halves of the ring all-reduce,
// with the update between them.
type ShardComm interface {
	// ReduceScatter sums grads (the stage's gradients in parameter-name
	// order, laid end to end) over the stage's replicas in place, so that
	// this replica's shard of them holds the sum; the rest is left partial.
	ReduceScatter(ctx context.Context, grads []*Value[float32]) error
	// AllGather copies each replica's shard of params (in parameter-name
	// order, laid end to end) to every other replica.
	AllGather(ctx context.Context, params []*Value[float32]) error
}

// ShardError is a sharding the executor cannot take.
type ShardError struct {
	Shard Shard
	Msg   string
}

func (e *ShardError) Error() string {
	return fmt.Sprintf("stage: optimizer shard %d of %d: %s", e.Shard.Index, e.Shard.Count, e.Msg)
}

// ShardOptimizer shards the executor's optimizer state: it is replica
// s.Index of s.Count, owning Span's elements. Call it before the first
// step, when there is no state to split.
func (e *Executor) ShardOptimizer(s Shard) error {
	switch {
	case s.Count < 1 || s.Index < 0 || s.Index >= s.Count:
		return &ShardError{s, "the index must be in [0, count)"}
	case e.stepping || e.optimizerStepped():
		return &ShardError{s, "the optimizer has stepped: shard before the first step"}
	}
	e.shard = newShardView(e, s)
	return nil
}

// optimizerStepped says whether the optimizer holds state (it has stepped
// or loaded some).
func (e *Executor) optimizerStepped() bool {
	if e.train == nil {
		return false
	}
	st, n, err := e.be.optimizerState()
	return err != nil || n > 0 || len(st) > 0
}

// Shard is the executor's share of its stage's optimizer state, and false
// when the state is not sharded.
func (e *Executor) Shard() (Shard, bool) {
	if e.shard == nil {
		return Shard{}, false
	}
	return e.shard.s, true
}

// piece is a shard's part of one parameter: elements [lo, hi) of the k-th
// parameter in name order, at offset at of the shard.
type piece struct {
	k      int
	name   string
	lo, hi int
	at     int
}

// shardPieces cuts shard s of tensors of sizes (in name order, laid end to
// end) into its pieces, one per tensor it touches.
func shardPieces(names []string, sizes []int, s Shard) []piece {
	total := 0
	for _, n := range sizes {
		total += n
	}
	lo, hi := s.Span(total)
	var out []piece
	base, at := 0, 0
	for k, n := range sizes {
		a, b := max(lo, base), min(hi, base+n)
		if a < b {
			out = append(out, piece{k: k, name: names[k], lo: a - base, hi: b - base, at: at})
			at += b - a
		}
		base += n
	}
	return out
}

// shardView is a shard's pieces of the executor's parameters and
// gradients, as values under the parameters' names with their shapes (an
// optimizer's weight decay reads the shape) and the pieces' data: what a
// host step reads and writes of a sharded stage.
type shardView struct {
	s             Shard
	pieces        []piece
	params, grads map[string]*Value[float32]
}

func newShardView(e *Executor, s Shard) *shardView {
	names := e.ParamNames()
	sizes := make([]int, len(names))
	for k, name := range names {
		sizes[k] = len(e.Params[name].Data)
	}
	v := &shardView{s: s, pieces: shardPieces(names, sizes, s), params: map[string]*Value[float32]{}, grads: map[string]*Value[float32]{}}
	for _, p := range v.pieces {
		w, g := e.Params[p.name], e.Grads[p.name]
		v.params[p.name] = &Value[float32]{Shape: w.Shape, Data: w.Data[p.lo:p.hi]}
		v.grads[p.name] = &Value[float32]{Shape: g.Shape, Data: g.Data[p.lo:p.hi]}
	}
	return v
}

// size is the elements the shard holds.
func (v *shardView) size() int {
	if len(v.pieces) == 0 {
		return 0
	}
	last := v.pieces[len(v.pieces)-1]
	return last.at + last.hi - last.lo
}

// slice is full, the optimizer state of a whole stage ("<param>.<slot>"),
// cut to the shard's pieces: what the shard's optimizer loads.
func (v *shardView) slice(full map[string][]float32) map[string][]float32 {
	out := map[string][]float32{}
	for slot, vals := range full {
		name, _ := splitSlot(slot)
		w := v.params[name]
		if w == nil {
			continue
		}
		for _, p := range v.pieces {
			if p.name == name && p.hi <= len(vals) {
				out[slot] = vals[p.lo:p.hi]
			}
		}
	}
	return out
}

// splitSlot cuts "<param>.<slot>" at its last dot.
func splitSlot(s string) (name, slot string) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// GatherOptimizerState assembles a sharded stage's optimizer state from
// its replicas' (parts[j]: what OptimizerState returned on the replica of
// shard j of len(parts)), keyed "<param>.<slot>" over whole parameters, as
// a replicated stage's is: what a checkpoint holds, which any plan loads.
func (e *Executor) GatherOptimizerState(parts []map[string][]float32) (map[string][]float32, error) {
	names := e.ParamNames()
	sizes := make([]int, len(names))
	for k, name := range names {
		sizes[k] = len(e.Params[name].Data)
	}
	out := map[string][]float32{}
	for j, part := range parts {
		pieces := shardPieces(names, sizes, Shard{j, len(parts)})
		for slot, vals := range part {
			name, _ := splitSlot(slot)
			found := false
			for _, p := range pieces {
				if p.name != name {
					continue
				}
				if len(vals) != p.hi-p.lo {
					return nil, fmt.Errorf("shard %d's %s has %d values, its piece of %s %d", j, slot, len(vals), name, p.hi-p.lo)
				}
				full := out[slot]
				if full == nil {
					full = make([]float32, sizes[p.k])
					out[slot] = full
				}
				copy(full[p.lo:p.hi], vals)
				found = true
			}
			if !found {
				return nil, fmt.Errorf("shard %d holds %s, a parameter it has no piece of", j, slot)
			}
		}
	}
	return out, nil
}

// Memory is what the executor holds of its stage's training state: the
// float32 parameters (every one, sharded or not; both versions where it
// keeps two) and the optimizer's
// state (of a sharded stage its shard's; of an offloaded one, in host
// memory), in bytes.
type Memory struct {
	ParameterBytes      int64
	OptimizerStateBytes int64
}

// Memory is what the executor holds now (the optimizer's state once it
// has stepped or loaded some).
func (e *Executor) Memory() Memory {
	var m Memory
	for _, p := range e.Params {
		m.ParameterBytes += 4 * int64(len(p.Data))
	}
	m.ParameterBytes += e.staleBytes() // a second version's (twobw.go)
	m.OptimizerStateBytes = e.be.stateBytes()
	return m
}

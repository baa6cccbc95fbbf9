package runtime

import (
	"context"
	"fmt"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// allReduce sums the gradients of a stage's k replicas with a ring. The
// gradients (grads, in parameter-name order: stage.StepComm), laid end to
// end, are cut in k chunks.
// In k−1 steps each replica passes a chunk to the next, which adds its own
// (reduce-scatter): replica r ends with the whole sum of chunk r+1. In k−1
// more the sums go round and are copied (all-gather). Each replica sends
// 2(k−1)/k of the gradients, what the cost model prices, instead of the
// (k−1) whole copies a gather to one replica and a broadcast back put on
// that replica's link; and every replica steps its optimizer on the same
// numbers, since each chunk is summed once, in one order, and copied.
func (w *Worker) allReduce(ctx context.Context, n int64, grads []*stage.Value[float32]) error {
	return w.ring(ctx, n, grads, 0, 2)
}

// reduceScatter is the ring's first half: replica r ends with the whole
// sum of chunk r+1 (shardOf), the rest of grads partial. A sharded stage
// steps that chunk (stage.ShardComm).
func (w *Worker) reduceScatter(ctx context.Context, n int64, grads []*stage.Value[float32]) error {
	return w.ring(ctx, n, grads, 0, 1)
}

// allGather is the ring's second half, over a sharded stage's updated
// parameters: each replica's chunk goes round and is copied.
func (w *Worker) allGather(ctx context.Context, n int64, params []*stage.Value[float32]) error {
	return w.ring(ctx, n, params, 1, 2)
}

// ring runs halves [from, to) of the ring over vals (0: the
// reduce-scatter, 1: the all-gather) in iteration n, in two levels where
// the stage's replicas lie so (ringlayout.go).
func (w *Worker) ring(ctx context.Context, n int64, vals []*stage.Value[float32], from, to int) error {
	k := w.role.lay.count[w.Stage]
	g := newGradRing(vals, k)
	if k == 1 || g.total == 0 { // a stage without parameters (a replicated loss) has nothing to sum: every replica knows it
		return nil
	}
	rp := w.ringPlanOf()
	h := rp.half()
	return rp.run(ctx, w.links.ep, func(s int) wire.Key { return msgKey(n, int32(s), ringEdge, 'g') }, g, false, from*h, to*h)
}

// shardOf is the shard (stage.Shard's index) replica r of k owns: the chunk
// the reduce-scatter leaves summed at it.
func shardOf(r, k int) stage.Shard { return stage.Shard{Index: (r + 1) % k, Count: k} }

// ringAllReduce is replica r's part of the ring over endpoint ep, next the
// endpoint of replica r+1, in iteration n.
func ringAllReduce(ctx context.Context, ep *wire.Endpoint, next int32, r int, n int64, g gradRing) error {
	return ringSteps(ctx, ep, next, r, n, g, 0, 2*(g.k-1))
}

// ringSteps is steps [from, to) of replica r's part of the ring: the
// reduce-scatter's k−1, then the all-gather's k−1. Each step's messages
// are keyed by its number, so the halves may run apart (a sharded stage
// updates between them).
func ringSteps(ctx context.Context, ep *wire.Endpoint, next int32, r int, n int64, g gradRing, from, to int) error {
	rr := ringRun{ep: ep, next: next, r: r, k: g.k, key: func(s int) wire.Key { return msgKey(n, int32(s), ringEdge, 'g') }}
	return rr.steps(ctx, g, from, to)
}

// ringData is what a ring sums: values cut in k chunks (taken mod k).
type ringData interface {
	size(c int) int
	read(c int) []float32
	// write adds data into chunk c, or copies it there.
	write(c int, data []float32, add bool)
}

// ringRun is replica r of k's part in one ring: its endpoint, the next
// replica's, and the key of each step's message. With sparse, a chunk of no
// elements is neither sent nor awaited (every replica knows the sizes).
type ringRun struct {
	ep     *wire.Endpoint
	next   int32
	r, k   int
	key    func(s int) wire.Key
	sparse bool
}

// steps runs steps [from, to) over g: in step s < k−1 replica r sends
// chunk r−s and adds chunk r−s−1 from replica r−1 into its own
// (reduce-scatter); in the all-gather's steps it sends chunk r+1−s' and
// copies chunk r−s'.
func (rr ringRun) steps(ctx context.Context, g ringData, from, to int) error {
	k, r := rr.k, rr.r
	for s := from; s < to; s++ {
		send, recv, add := r-s, r-s-1, true // reduce-scatter
		if s >= k-1 {
			s2 := s - (k - 1)
			send, recv, add = r+1-s2, r-s2, false // all-gather
		}
		if !rr.sparse || g.size(send) > 0 {
			msg, err := wire.EncodeTensors([]wire.Tensor{{Name: "chunk", Shape: []int{g.size(send)}, F32: g.read(send)}})
			if err != nil {
				return err
			}
			if err := rr.ep.Send(ctx, rr.next, rr.key(s), msg); err != nil {
				return err
			}
		}
		if rr.sparse && g.size(recv) == 0 {
			continue
		}
		got, err := rr.ep.Receive(ctx, rr.key(s))
		if err != nil {
			return err
		}
		ts, err := wire.DecodeTensors(got)
		if err != nil {
			return err
		}
		if len(ts) != 1 || len(ts[0].F32) != g.size(recv) {
			return fmt.Errorf("all-reduce step %d: a chunk of %d tensors, want 1 of %d values", s, len(ts), g.size(recv))
		}
		g.write(recv, ts[0].F32, add)
	}
	return nil
}

// gradRing is gradients laid end to end and cut in k chunks.
type gradRing struct {
	vals     []*stage.Value[float32]
	k, total int
}

func newGradRing(vals []*stage.Value[float32], k int) gradRing {
	g := gradRing{vals: vals, k: k}
	for _, v := range vals {
		g.total += len(v.Data)
	}
	return g
}

// span is chunk c's [lo, hi) in the values laid end to end (c taken mod k).
func (g gradRing) span(c int) (lo, hi int) {
	c = ((c % g.k) + g.k) % g.k
	return c * g.total / g.k, (c + 1) * g.total / g.k
}

func (g gradRing) size(c int) int {
	lo, hi := g.span(c)
	return hi - lo
}

// each calls f on the pieces of chunk c, one per value it touches, with
// the offset of each piece in the chunk.
func (g gradRing) each(c int, f func(piece []float32, at int)) {
	lo, hi := g.span(c)
	base := 0
	for _, v := range g.vals {
		a, b := max(lo, base), min(hi, base+len(v.Data))
		if a < b {
			f(v.Data[a-base:b-base], a-lo)
		}
		base += len(v.Data)
	}
}

func (g gradRing) read(c int) []float32                  { return readChunk(g, c) }
func (g gradRing) write(c int, data []float32, add bool) { writeChunk(g, c, data, add) }

// chunkPieces are values cut in chunks, each chunk's elements lying in
// pieces of the values: each calls f on each piece of chunk c in order,
// with where the piece starts in the chunk.
type chunkPieces interface {
	size(c int) int
	each(c int, f func(piece []float32, at int))
}

// readChunk is chunk c of p, copied out.
func readChunk(p chunkPieces, c int) []float32 {
	out := make([]float32, p.size(c))
	p.each(c, func(piece []float32, at int) { copy(out[at:], piece) })
	return out
}

// writeChunk adds data into chunk c of p, or copies it there.
func writeChunk(p chunkPieces, c int, data []float32, add bool) {
	p.each(c, func(piece []float32, at int) {
		if !add {
			copy(piece, data[at:])
			return
		}
		for i := range piece {
			piece[i] += data[at+i]
		}
	})
}

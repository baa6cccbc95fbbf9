package runtime

import (
	"context"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// A stage whose replicas lie on several nodes, as many on each, node after
// node (plan.RingLayout: N nodes of L), runs each ring in two levels
// instead of one ring of k = N·L: the reduce-scatter first within each
// node (a ring of its L replicas over L super-chunks, super-chunk j being
// the chunks of the flat ring's layout that the replicas at place j of
// every node own, shardOf), then across the nodes (a ring of the N
// replicas at one place, over that place's super-chunk); the all-gather
// the other way round. Each replica ends the reduce-scatter with the sum
// of the chunk the flat ring leaves it (its shard), every chunk summed
// once, in one order, and copied, so every replica steps on the same
// numbers; the bytes each sends cross its node's fast link, and only an
// N-th of them its own link out of the node, which a ring of k sends over
// the slow link whole. The steps keep one numbering (half steps a half:
// L−1 within, then N−1 across), so a ring's messages are keyed as before.

// ringPlan is how a worker's stage runs its rings: one ring of k
// (nodes 1), or nodes of local replicas.
type ringPlan struct {
	k, nodes, local int
	r               int               // this replica
	id              func(r int) int32 // replica r's endpoint
}

// ringPlanOf is worker w's stage's ringPlan.
func (w *Worker) ringPlanOf() ringPlan {
	k := w.role.lay.count[w.Stage]
	n, l := w.role.plan.RingLayout(w.Stage)
	if n*l != k {
		n, l = 1, k
	}
	return ringPlan{k: k, nodes: n, local: l, r: w.Replica, id: func(r int) int32 { return w.role.lay.id(w.Stage, r) }}
}

// half is the steps of one half of the ring: the reduce-scatter's, or the
// all-gather's.
func (rp ringPlan) half() int {
	if rp.nodes < 2 {
		return rp.k - 1
	}
	return rp.local - 1 + rp.nodes - 1
}

// run runs steps [from, to) of the ring over g (whose chunks are the flat
// ring's k), each step's message keyed by key(step).
func (rp ringPlan) run(ctx context.Context, ep *wire.Endpoint, key func(s int) wire.Key, g ringData, sparse bool, from, to int) error {
	if rp.nodes < 2 {
		rr := ringRun{ep: ep, next: rp.id((rp.r + 1) % rp.k), r: rp.r, k: rp.k, key: key, sparse: sparse}
		return rr.steps(ctx, g, from, to)
	}
	L, N := rp.local, rp.nodes
	n, l := rp.r/L, rp.r%L
	h := rp.half()
	intra := ringRun{ep: ep, next: rp.id(n*L + (l+1)%L), r: l, k: L, sparse: sparse}
	inter := ringRun{ep: ep, next: rp.id(((n+1)%N)*L + l), r: n, k: N, sparse: sparse}
	within := chunkMap{g, L, func(c int, f func(int)) { // super-chunk (c−1) mod L
		j := mod(c-1, L)
		for m := 0; m < N; m++ {
			f(mod(m*L+j+1, rp.k))
		}
	}}
	across := chunkMap{g, N, func(c int, f func(int)) { // the chunk replica ((c−1) mod N, l) owns
		f(mod(mod(c-1, N)*L+l+1, rp.k))
	}}
	// the phases in order: (ring, its data, its local steps, the first
	// global step)
	phases := []struct {
		rr       ringRun
		g        ringData
		lo, hi   int
		globalAt int
	}{
		{intra, within, 0, L - 1, 0},
		{inter, across, 0, N - 1, L - 1},
		{inter, across, N - 1, 2 * (N - 1), h},
		{intra, within, L - 1, 2 * (L - 1), h + N - 1},
	}
	for _, p := range phases {
		off := p.globalAt - p.lo // global step = local step + off
		lo, hi := max(p.lo, from-off), min(p.hi, to-off)
		if lo >= hi {
			continue
		}
		rr := p.rr
		rr.key = func(s int) wire.Key { return key(s + off) }
		if err := rr.steps(ctx, p.g, lo, hi); err != nil {
			return err
		}
	}
	return nil
}

func mod(a, m int) int { return ((a % m) + m) % m }

// chunkMap is a ring's chunks over another ring's: chunk c of k is the
// chunks of g that fine names, in order, laid end to end.
type chunkMap struct {
	g    ringData
	k    int
	fine func(c int, f func(fine int))
}

func (m chunkMap) size(c int) int {
	n := 0
	m.fine(mod(c, m.k), func(f int) { n += m.g.size(f) })
	return n
}

func (m chunkMap) read(c int) []float32 {
	var out []float32
	m.fine(mod(c, m.k), func(f int) { out = append(out, m.g.read(f)...) })
	return out
}

func (m chunkMap) write(c int, data []float32, add bool) {
	at := 0
	m.fine(mod(c, m.k), func(f int) {
		n := m.g.size(f)
		m.g.write(f, data[at:at+n], add)
		at += n
	})
}

package search

import (
	"fmt"
	"math"
	"sort"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/partition"
	"github.com/graphpipe/graphpipe/plan"
)

// LimitError is a planner that stopped at a documented size limit.
type LimitError struct{ Msg string }

func (e *LimitError) Error() string { return e.Msg }

// downsets are the ideals of the unit graph: sets of units closed under
// predecessors, as bitsets, ordered by size (∅ first, all units last).
type downsets struct {
	units  [][]int
	sets   [][]uint64
	ops    [][]int // per downset, its ops
	live   []int64 // per downset, bytes per sample of outputs read outside it
	supers [][]int // per downset, the indices of its strict supersets
}

// exactPlans is spp-exact: the best sequential pipeline over every order of
// the units consistent with the graph, by a DP over downsets (see doc.go).
func exactPlans(g *dag.Graph, o *Options, cm *costModel, consider func(*plan.Plan, string)) error {
	units := partition.Decompose(g, 0).Root.Leaves() // single ops: the finest sequential space
	ds, err := enumerate(g, units, o.MaxDownsets, cm.tensorBytes)
	if err != nil {
		return err
	}
	for _, b := range o.microBatches() {
		p, err := exactAt(g, o, cm, ds, b)
		if err != nil {
			return err
		}
		if p != nil {
			consider(p, "spp-exact")
		}
	}
	return nil
}

func enumerate(g *dag.Graph, leaves []*partition.Node, limit int, bytes func(*dag.Tensor) int64) (*downsets, error) {
	n := len(leaves)
	unitOf := make([]int, g.NumOps())
	ds := &downsets{}
	for u, l := range leaves {
		ds.units = append(ds.units, l.Ops)
		for _, op := range l.Ops {
			unitOf[op] = u
		}
	}
	preds := make([][]int, n)
	for u, l := range leaves {
		for _, op := range l.Ops {
			for _, p := range g.Producers(op) {
				if pu := unitOf[p]; pu != u {
					preds[u] = append(preds[u], pu)
				}
			}
		}
	}
	words := (n + 63) / 64
	key := func(s []uint64) string { return fmt.Sprint(s) }
	index := map[string]int{}
	add := func(s []uint64) bool {
		k := key(s)
		if _, ok := index[k]; ok {
			return true
		}
		if len(ds.sets) >= limit {
			return false
		}
		index[k] = len(ds.sets)
		ds.sets = append(ds.sets, s)
		return true
	}
	add(make([]uint64, words))
	for i := 0; i < len(ds.sets); i++ { // breadth first: by size
		cur := ds.sets[i]
		for u := 0; u < n; u++ {
			if cur[u/64]&(1<<(u%64)) != 0 {
				continue
			}
			ready := true
			for _, p := range preds[u] {
				ready = ready && cur[p/64]&(1<<(p%64)) != 0
			}
			if !ready {
				continue
			}
			next := append([]uint64(nil), cur...)
			next[u/64] |= 1 << (u % 64)
			if !add(next) {
				return nil, &LimitError{fmt.Sprintf("spp-exact: %q has more than %d downsets (the limit; their number grows exponentially with the parallel branches): use gpp or spp", g.Name(), limit)}
			}
		}
	}
	ds.index(g, unitOf, bytes)
	return ds, nil
}

// index fills each downset's ops, live bytes (a tensor's: bytes) and
// supersets.
func (ds *downsets) index(g *dag.Graph, unitOf []int, bytes func(*dag.Tensor) int64) {
	in := func(s []uint64, u int) bool { return s[u/64]&(1<<(u%64)) != 0 }
	for _, s := range ds.sets {
		var ops []int
		var live int64
		for u, unit := range ds.units {
			if !in(s, u) {
				continue
			}
			ops = append(ops, unit...)
			for _, op := range unit {
				for _, c := range g.Consumers(op) {
					if !in(s, unitOf[c]) {
						live += bytes(g.Out(op))
						break
					}
				}
			}
		}
		ds.ops = append(ds.ops, ops)
		ds.live = append(ds.live, live)
	}
	ds.supers = make([][]int, len(ds.sets))
	for i, a := range ds.sets {
		for j := i + 1; j < len(ds.sets); j++ {
			if subset(a, ds.sets[j]) {
				ds.supers[i] = append(ds.supers[i], j)
			}
		}
	}
}

func subset(a, b []uint64) bool {
	for w := range a {
		if a[w]&^b[w] != 0 {
			return false
		}
	}
	return true
}

// exactStage is a candidate stage D' \ D with its cost per device count.
type exactStage struct {
	from, to int
	ops      []int
	costs    []stageCost
}

// exactProblem is the candidate stages of one micro-batch size.
type exactProblem struct {
	ds     *downsets
	b      int64
	mbs    int
	kmax   int // in groups of g devices, as the gpp DP counts them past tuning.maxDPDevices
	g      int
	stages []exactStage
	out    [][]int // per downset, its candidate stages
	ts     []float64
}

func newExactProblem(cm *costModel, ds *downsets, o *Options, b int64) *exactProblem {
	g := dpGroup(o.Devices, cm.tu.maxDPDevices)
	ep := &exactProblem{ds: ds, b: b, mbs: int(o.Batch / b), g: g, kmax: int(min(int64(o.Devices/g), b/int64(g))), out: make([][]int, len(ds.sets))}
	for i := range ds.sets {
		for _, j := range ds.supers[i] {
			st := exactStage{from: i, to: j, ops: diff(ds.ops[j], ds.ops[i]), costs: make([]stageCost, ep.kmax+1)}
			blk := ep.block(cm, i, j, st.ops)
			for k := 1; k <= ep.kmax; k++ {
				st.costs[k] = cm.priceOps(st.ops, blk, k*g, b, ep.mbs)
				if c := &st.costs[k]; c.memory(1) <= cm.limit {
					ep.ts = append(ep.ts, math.Max(c.period, c.link))
				}
			}
			ep.out[i] = append(ep.out[i], len(ep.stages))
			ep.stages = append(ep.stages, st)
		}
	}
	sort.Float64s(ep.ts)
	return ep
}

// block is stage D_j \ D_i; its links carry what is live across each cut.
func (ep *exactProblem) block(cm *costModel, i, j int, ops []int) *block {
	return cm.newBlock(ops, func([]int) (int64, int64) { return ep.ds.live[i], ep.ds.live[j] })
}

// solve finds the least candidate T at which k devices fit, and the stages.
func (ep *exactProblem) solve(cm *costModel, k int, gpipe bool) (float64, []int, []int, bool) {
	full := len(ep.ds.sets) - 1
	try := func(T float64) ([]int, []int, bool) {
		return newExactDP(ep, k, gpipe, cm.limit, T).run(full)
	}
	if len(ep.ts) == 0 {
		return 0, nil, nil, false
	}
	if _, _, ok := try(ep.ts[len(ep.ts)-1]); !ok {
		return 0, nil, nil, false
	}
	lo, hi := 0, len(ep.ts)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if _, _, ok := try(ep.ts[mid]); ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	stages, ks, _ := try(ep.ts[hi])
	return ep.ts[hi], stages, ks, true
}

// exactAt is the best exact sequential plan at micro-batch b.
func exactAt(g *dag.Graph, o *Options, cm *costModel, ds *downsets, b int64) (*plan.Plan, error) {
	ep := newExactProblem(cm, ds, o, b)
	for k := o.Devices / ep.g; k >= 1; k-- {
		_, chosen, ks, ok := ep.solve(cm, k, o.sched.AllForwardsFirst)
		if !ok {
			continue
		}
		var in []stageIn
		for i, s := range chosen {
			st := ep.stages[s]
			in = append(in, stageIn{ops: st.ops, k: ks[i] * ep.g, cost: st.costs[ks[i]], blk: ep.block(cm, st.from, st.to, st.ops)})
		}
		p, err := assemble(g, o, cm, b, in, true)
		if err != nil || !p.Predicted.Feasible {
			return nil, err
		}
		return p, nil
	}
	return nil, nil
}

func diff(all, minus []int) []int {
	skip := map[int]bool{}
	for _, x := range minus {
		skip[x] = true
	}
	var out []int
	for _, x := range all {
		if !skip[x] {
			out = append(out, x)
		}
	}
	return out
}

// exactDP: E(D, k) = fewest in flight at the first stage covering everything
// outside downset D on exactly k devices.
type exactDP struct {
	ep      *exactProblem
	devices int
	gpipe   bool
	limit   int64
	T       float64
	memo    []int16
	pick    []int32 // chosen stage
	pickK   []int16
}

func newExactDP(ep *exactProblem, devices int, gpipe bool, limit int64, T float64) *exactDP {
	n := len(ep.ds.sets) * (devices + 1)
	e := &exactDP{ep: ep, devices: devices, gpipe: gpipe, limit: limit, T: T,
		memo: make([]int16, n), pick: make([]int32, n), pickK: make([]int16, n)}
	for i := range e.memo {
		e.memo[i] = -1
	}
	return e
}

func (e *exactDP) value(d, k int) int {
	full := len(e.ep.ds.sets) - 1
	if d == full {
		if k == 0 {
			return 0
		}
		return inf
	}
	if k < 1 {
		return inf
	}
	idx := d*(e.devices+1) + k
	if v := e.memo[idx]; v >= 0 {
		return int(v)
	}
	best := inf
	for _, s := range e.ep.out[d] {
		st := &e.ep.stages[s]
		for k1 := 1; k1 <= min(k, e.ep.kmax); k1++ {
			c := &st.costs[k1]
			if c.period > e.T || c.link > e.T {
				continue
			}
			after := e.value(st.to, k-k1)
			if after >= inf || after+1 >= best {
				continue
			}
			inflight := min(e.ep.mbs, after+1)
			if e.gpipe {
				inflight = e.ep.mbs
			}
			if c.memory(inflight) <= e.limit {
				best = after + 1
				e.pick[idx], e.pickK[idx] = int32(s), int16(k1)
			}
		}
	}
	e.memo[idx] = int16(best)
	return best
}

// run solves from the empty downset and returns the chosen stages in order.
func (e *exactDP) run(full int) ([]int, []int, bool) {
	if e.value(0, e.devices) >= inf {
		return nil, nil, false
	}
	var stages, ks []int
	for d, k := 0, e.devices; d != full; {
		idx := d*(e.devices+1) + k
		s, k1 := int(e.pick[idx]), int(e.pickK[idx])
		stages, ks = append(stages, s), append(ks, k1)
		d, k = e.ep.stages[s].to, k-k1
	}
	return stages, ks, true
}

package plan

import (
	"sort"

	"github.com/graphpipe/graphpipe/dag"
)

// A stage whose plan gives it a bucket size (PlanStage.BucketBytes)
// all-reduces its gradients across its replicas while its last weight pass
// of an iteration runs, bucket by bucket, instead of after it: as the pass
// finishes an op, the op's parameters' gradients are final for the
// iteration, and a bucket whose every element is final starts its ring in
// the background while the pass goes on; the step waits for what is left.
//
// The buckets are cut here, once, for the planner that prices them and the
// runtime that runs them alike: the stage's parameters in the order the pass
// finishes them (GradOrder), laid end to end, cut every BucketBytes/4
// elements (BucketCuts). Each bucket is then spans of the ring's layout, the
// parameters in name order laid end to end (GradBuckets): the ring cuts
// that layout in k chunks as it always has and runs each bucket's part of
// every chunk, so that every element is summed over the replicas in the
// same order as by one ring after the pass.

// MaxBuckets is the most buckets a stage's all-reduce or late all-gather
// is cut into: smaller buckets would gain a ring's latency each and lose
// the planner's time, and a hand-edited plan of byte-sized buckets would
// start a ring per element.
const MaxBuckets = 4096

// checkBuckets refuses a stage whose bucket sizes cut its params
// parameters (what the plan says, or what its ops hold in the model) into
// more than MaxBuckets.
func checkBuckets(i int, s PlanStage, params int64) error {
	for _, f := range []struct {
		name  string
		bytes int64
	}{{"allreduce_bucket_bytes", s.BucketBytes}, {"gather_bucket_bytes", s.GatherBucketBytes}} {
		if f.bytes > 0 && params > 0 && (4*params+f.bytes-1)/f.bytes > MaxBuckets {
			return planErr(i, f.name, "is %d: it cuts the stage's %d parameters into more than %d buckets", f.bytes, params, MaxBuckets)
		}
	}
	return nil
}

// BucketCut is where a bucket ends in the gradients laid end to end in the
// order the pass finishes them: End elements from the start, ready once
// the first Ready ops of that order are done.
type BucketCut struct {
	End   int64
	Ready int
}

// BucketCuts cuts elements laid end to end, opElems[j] of them for the
// j-th op of the order, into buckets of capElems (the last one what is
// left). A bucket is ready with the op that holds its last element; ops
// without parameters hold none. capElems < 1 makes one bucket.
func BucketCuts(opElems []int64, capElems int64) []BucketCut {
	var total int64
	for _, n := range opElems {
		total += n
	}
	if total == 0 {
		return nil
	}
	if capElems < 1 {
		capElems = total
	}
	var cuts []BucketCut
	var base int64 // elements of the ops before op j
	for j, n := range opElems {
		for end := (base/capElems + 1) * capElems; end < base+n; end += capElems {
			cuts = append(cuts, BucketCut{End: end, Ready: j + 1})
		}
		base += n
		if base%capElems == 0 && n > 0 || base == total {
			cuts = append(cuts, BucketCut{End: base, Ready: j + 1})
			if base == total {
				break
			}
		}
	}
	return cuts
}

// GradOrder is the order in which a stage's last weight pass of an
// iteration finishes its ops' parameter gradients: its ops in the graph's
// topological order (the executor's), reversed where the backward pass
// adds them, as they are where a deferred weight pass does (a schedule
// that splits weight gradients off: zb).
func GradOrder(g *dag.Graph, ops []int, deferred bool) []int {
	pos := make(map[int]int, len(ops))
	for k, i := range g.Order() {
		pos[i] = k
	}
	out := append([]int(nil), ops...)
	sort.Slice(out, func(a, b int) bool { return pos[out[a]] < pos[out[b]] })
	if !deferred {
		for a, b := 0, len(out)-1; a < b; a, b = a+1, b-1 {
			out[a], out[b] = out[b], out[a]
		}
	}
	return out
}

// OpElems is each op's parameter elements, in order.
func OpElems(g *dag.Graph, order []int) []int64 {
	out := make([]int64, len(order))
	for j, i := range order {
		for _, p := range g.Params(i) {
			out[j] += p.Shape.Elems()
		}
	}
	return out
}

// GradBucket is one bucket of a stage's gradients: the ops whose passes
// must be done for it to start (Ops, graph indices) and its elements in the
// ring's layout (Spans of [lo, hi), in layout order).
type GradBucket struct {
	Ops   []int
	Spans [][2]int64
	Elems int64
}

// GradBuckets cuts the gradients of a stage's ops, finished in order
// (GradOrder), into buckets of bucketBytes (BucketCuts), as spans of the
// ring's layout: the parameters by Key, sorted, laid end to end.
func GradBuckets(g *dag.Graph, order []int, bucketBytes int64) []GradBucket {
	type param struct {
		op          int
		size, start int64 // start: its offset in the layout
	}
	var keys []string
	at := map[string]*param{}
	var seq []*param // in the pass's order
	for _, i := range order {
		for _, p := range g.Params(i) {
			q := &param{op: i, size: p.Shape.Elems()}
			at[p.Key], keys, seq = q, append(keys, p.Key), append(seq, q)
		}
	}
	sort.Strings(keys)
	var off int64
	for _, k := range keys {
		at[k].start, off = off, off+at[k].size
	}
	cuts := BucketCuts(OpElems(g, order), bucketBytes/4)
	out := make([]GradBucket, len(cuts))
	var pos, lo int64 // pos: seq[0..q)'s elements; lo: the bucket's start
	q := 0
	for b, c := range cuts {
		bk := &out[b]
		bk.Elems = c.End - lo
		for ; q < len(seq) && lo < c.End; q++ {
			p := seq[q]
			a, z := max(lo, pos)-pos, min(c.End, pos+p.size)-pos // the bucket's part of p
			if a < z {
				bk.Spans = appendSpan(bk.Spans, p.start+a, p.start+z)
				bk.Ops = appendOp(bk.Ops, p.op)
			}
			if pos+p.size > c.End { // p goes on into the next bucket
				break
			}
			pos += p.size
		}
		lo = c.End
		sort.Slice(bk.Spans, func(x, y int) bool { return bk.Spans[x][0] < bk.Spans[y][0] })
		bk.Spans = mergeSpans(bk.Spans)
	}
	return out
}

func appendSpan(s [][2]int64, lo, hi int64) [][2]int64 { return append(s, [2]int64{lo, hi}) }

func appendOp(ops []int, op int) []int {
	if n := len(ops); n > 0 && ops[n-1] == op {
		return ops
	}
	return append(ops, op)
}

// mergeSpans joins sorted spans that touch.
func mergeSpans(s [][2]int64) [][2]int64 {
	out := s[:0]
	for _, x := range s {
		if n := len(out); n > 0 && out[n-1][1] == x[0] {
			out[n-1][1] = x[1]
			continue
		}
		out = append(out, x)
	}
	return out
}

// GatherOrder is the order in which a stage's forward pass reads its ops'
// parameters: its ops in the graph's topological order (the executor's).
func GatherOrder(g *dag.Graph, ops []int) []int { return GradOrder(g, ops, true) }

// GatherBuckets cuts the parameters of a stage's ops into the buckets of
// its late all-gather (PlanStage.GatherBucketBytes): in the order its
// forward reads them (GatherOrder), as spans of the ring's layout, as
// GradBuckets cuts gradients. A bucket's Ops are those holding some of
// its elements: an op's forward waits for every bucket that names it.
func GatherBuckets(g *dag.Graph, ops []int, bucketBytes int64) []GradBucket {
	return GradBuckets(g, GatherOrder(g, ops), bucketBytes)
}

// RingLayout is how stage s's replicas run their rings (the all-reduce,
// its halves and their buckets): in two levels where the stage's devices
// lie on two nodes or more, the same number of them (local, two or more)
// on each, node after node in the stage's device order — first a ring
// within each node, then a ring across the nodes for each place within a
// node, each device over its own link — and otherwise one ring of all of
// them (nodes 1, local the replicas). The runtime runs the rings so, the
// planner prices them so.
func (p *Plan) RingLayout(s int) (nodes, local int) {
	devs := p.Stages[s].Devices
	k := len(devs)
	var runs []int // the devices of each run on one node, in order
	seen := map[int]bool{}
	for i, d := range devs {
		n := p.NodeOf(d)
		if i > 0 && n == p.NodeOf(devs[i-1]) {
			runs[len(runs)-1]++
			continue
		}
		if seen[n] { // a node twice
			return 1, k
		}
		seen[n] = true
		runs = append(runs, 1)
	}
	if len(runs) < 2 || runs[0] < 2 {
		return 1, k
	}
	for _, r := range runs {
		if r != runs[0] {
			return 1, k
		}
	}
	return len(runs), runs[0]
}

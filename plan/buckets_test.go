package plan

import (
	"reflect"
	"sort"
	"testing"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/models"
)

func TestBucketCuts(t *testing.T) {
	for _, c := range []struct {
		name  string
		elems []int64
		cap   int64
		want  []BucketCut
	}{
		{"nothing", []int64{0, 0}, 4, nil},
		{"one bucket when the cap is 0", []int64{3, 0, 5}, 0, []BucketCut{{8, 3}}},
		{"a cap larger than all", []int64{3, 5}, 100, []BucketCut{{8, 2}}},
		{"cuts inside an op are ready with it", []int64{10}, 4, []BucketCut{{4, 1}, {8, 1}, {10, 1}}},
		{"a cut on an op's end", []int64{4, 4, 1}, 4, []BucketCut{{4, 1}, {8, 2}, {9, 3}}},
		{"small ops gather", []int64{1, 1, 0, 1, 1, 1}, 3, []BucketCut{{3, 4}, {5, 6}}},
		{"ops without parameters at the end", []int64{2, 2, 0, 0}, 3, []BucketCut{{3, 2}, {4, 2}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := BucketCuts(c.elems, c.cap); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// The buckets of a stage cover its layout once, each span inside the
// parameters of the ops it names, and start in the pass's order.
func TestGradBucketsCoverTheLayout(t *testing.T) {
	e, _ := models.Lookup("mmt")
	g, err := e.Build(e.Small)
	if err != nil {
		t.Fatal(err)
	}
	ops := make([]int, 0, g.NumOps())
	for i := 0; i < g.NumOps(); i++ {
		ops = append(ops, i)
	}
	var keys []string
	size := map[string]int64{}
	owner := map[string]int{}
	for _, i := range ops {
		for _, p := range g.Params(i) {
			keys, size[p.Key], owner[p.Key] = append(keys, p.Key), p.Shape.Elems(), i
		}
	}
	sort.Strings(keys)
	var total int64
	starts := map[int64]string{}
	for _, k := range keys {
		starts[total], total = k, total+size[k]
	}
	for _, deferred := range []bool{false, true} {
		order := GradOrder(g, ops, deferred)
		pos := map[int]int{}
		for j, i := range order {
			pos[i] = j
		}
		for _, bytes := range []int64{0, 4, 4 * 100, 4 * 5000, 4 * total} {
			bs := GradBuckets(g, order, bytes)
			seen := make([]int, total)
			var sum int64
			lastReady := -1
			for b, bk := range bs {
				ready := -1
				for _, op := range bk.Ops {
					ready = max(ready, pos[op])
				}
				if ready < lastReady {
					t.Errorf("deferred %v, %d bytes: bucket %d is ready at op %d, before bucket %d's %d", deferred, bytes, b, ready, b-1, lastReady)
				}
				lastReady = ready
				var n int64
				for _, s := range bk.Spans {
					n += s[1] - s[0]
					for x := s[0]; x < s[1]; x++ {
						seen[x]++
					}
				}
				if n != bk.Elems {
					t.Errorf("deferred %v, %d bytes: bucket %d's spans hold %d elements, it says %d", deferred, bytes, b, n, bk.Elems)
				}
				if bytes >= 4 && bk.Elems > bytes/4 {
					t.Errorf("deferred %v, %d bytes: bucket %d holds %d elements", deferred, bytes, b, bk.Elems)
				}
				sum += n
			}
			if sum != total {
				t.Fatalf("deferred %v, %d bytes: the buckets hold %d elements, the stage %d", deferred, bytes, sum, total)
			}
			for x, n := range seen {
				if n != 1 {
					t.Fatalf("deferred %v, %d bytes: element %d is in %d buckets", deferred, bytes, x, n)
				}
			}
		}
	}
	// the first bucket of a backward pass holds the last op's parameters
	order := GradOrder(g, ops, false)
	bs := GradBuckets(g, order, 4)
	first := bs[0]
	var last int
	for _, i := range order {
		if len(g.Params(i)) > 0 {
			last = i
			break
		}
	}
	if len(first.Ops) != 1 || first.Ops[0] != last {
		t.Errorf("the first bucket of the backward names ops %v, want [%d]", first.Ops, last)
	}
	if k := starts[first.Spans[0][0]]; k != "" && owner[k] != last {
		t.Errorf("the first bucket starts in %q, of op %d, want op %d's", k, owner[k], last)
	}
}

// bruteCuts is BucketCuts element by element: element e of the ops laid
// end to end is in bucket e/capElems, and a bucket ends after its last
// element, ready with the op that holds it.
func bruteCuts(opElems []int64, capElems int64) []BucketCut {
	var owner []int // per element, its op
	for j, n := range opElems {
		for ; n > 0; n-- {
			owner = append(owner, j)
		}
	}
	if capElems < 1 {
		capElems = int64(len(owner))
	}
	var out []BucketCut
	for e := range owner {
		if int64(e+1)%capElems == 0 || e == len(owner)-1 {
			out = append(out, BucketCut{End: int64(e + 1), Ready: owner[e] + 1})
		}
	}
	return out
}

// TestBucketCutsAgainstBruteForce: every op list of up to 5 ops of up to 3
// elements, every cap up to the total and past it.
func TestBucketCutsAgainstBruteForce(t *testing.T) {
	var lists [][]int64
	var grow func(l []int64)
	grow = func(l []int64) {
		lists = append(lists, append([]int64(nil), l...))
		if len(l) == 5 {
			return
		}
		for n := int64(0); n <= 3; n++ {
			grow(append(l, n))
		}
	}
	grow(nil)
	for _, l := range lists {
		for capElems := int64(0); capElems <= 17; capElems++ {
			if got, want := BucketCuts(l, capElems), bruteCuts(l, capElems); !reflect.DeepEqual(got, want) {
				t.Fatalf("ops %v, cap %d: got %v, want %v", l, capElems, got, want)
			}
		}
	}
}

// bruteBuckets is GradBuckets element by element: the parameters in the
// pass's order laid end to end, element e in bucket e/(bytes/4); each
// element's place in the layout (the parameters by key, sorted, end to
// end); a bucket's spans its places, sorted and joined; its ops those of
// its elements, in the pass's order.
func bruteBuckets(g *dag.Graph, order []int, bytes int64) []GradBucket {
	type elem struct {
		op    int
		place int64
	}
	var keys []string
	size := map[string]int64{}
	for _, i := range order {
		for _, p := range g.Params(i) {
			keys, size[p.Key] = append(keys, p.Key), p.Shape.Elems()
		}
	}
	sort.Strings(keys)
	start := map[string]int64{}
	var total int64
	for _, k := range keys {
		start[k], total = total, total+size[k]
	}
	var elems []elem
	for _, i := range order {
		for _, p := range g.Params(i) {
			for x := int64(0); x < size[p.Key]; x++ {
				elems = append(elems, elem{i, start[p.Key] + x})
			}
		}
	}
	capElems := bytes / 4
	if capElems < 1 {
		capElems = total
	}
	var out []GradBucket
	for lo := int64(0); lo < int64(len(elems)); lo += capElems {
		hi := min(lo+capElems, int64(len(elems)))
		var bk GradBucket
		var places []int64
		for _, e := range elems[lo:hi] {
			if n := len(bk.Ops); n == 0 || bk.Ops[n-1] != e.op {
				bk.Ops = append(bk.Ops, e.op)
			}
			places = append(places, e.place)
		}
		sort.Slice(places, func(a, b int) bool { return places[a] < places[b] })
		for _, x := range places {
			if n := len(bk.Spans); n > 0 && bk.Spans[n-1][1] == x {
				bk.Spans[n-1][1]++
				continue
			}
			bk.Spans = append(bk.Spans, [2]int64{x, x + 1})
		}
		bk.Elems = hi - lo
		out = append(out, bk)
	}
	return out
}

// TestGradBucketsAgainstBruteForce: the small zoo models, every op and
// subsets of them, in the backward's order and a deferred weight pass's,
// in buckets from one element to more than the stage, against the
// element-by-element cut; and the buckets' ready ops never go back in
// the pass's order.
func TestGradBucketsAgainstBruteForce(t *testing.T) {
	for _, model := range []string{"mlp", "transformer", "case-study", "dlrm"} {
		e, err := models.Lookup(model)
		if err != nil {
			t.Fatal(err)
		}
		g, err := e.Build(e.Small)
		if err != nil {
			t.Fatal(err)
		}
		subsets := [][]int{nil, nil, nil}
		for i := 0; i < g.NumOps(); i++ {
			subsets[0] = append(subsets[0], i)
			if i%2 == 1 {
				subsets[1] = append(subsets[1], i)
			}
			if i%3 == 0 {
				subsets[2] = append([]int{i}, subsets[2]...) // out of order: GradOrder sorts
			}
		}
		for si, ops := range subsets {
			for _, deferred := range []bool{false, true} {
				order := GradOrder(g, ops, deferred)
				var total int64
				for _, n := range OpElems(g, order) {
					total += n
				}
				pos := map[int]int{}
				for j, i := range order {
					pos[i] = j
				}
				for _, bytes := range []int64{0, 3, 4, 12, 4 * 37, 4 * 1000, 4 * (total - 1), 4 * total, 8 * total} {
					got, want := GradBuckets(g, order, bytes), bruteBuckets(g, order, bytes)
					if (len(got) > 0 || len(want) > 0) && !reflect.DeepEqual(got, want) {
						t.Fatalf("%s subset %d deferred %v, %d bytes: %d buckets, want %d (first got %+v, want %+v)",
							model, si, deferred, bytes, len(got), len(want), head(got), head(want))
					}
					last := -1
					for b, bk := range got {
						ready := pos[bk.Ops[len(bk.Ops)-1]]
						if ready < last {
							t.Fatalf("%s subset %d, %d bytes: bucket %d ready at op %d of the pass, before the previous one's %d", model, si, bytes, b, ready, last)
						}
						last = ready
					}
				}
			}
		}
	}
}

func head(bs []GradBucket) any {
	if len(bs) == 0 {
		return nil
	}
	return bs[0]
}

// TestRingLayout: two levels only where a stage's devices lie on two nodes
// or more, as many on each (two or more), node after node.
func TestRingLayout(t *testing.T) {
	for _, c := range []struct {
		devs         []int
		nodes, local int
	}{
		{[]int{0, 1, 2, 3, 4, 5, 6, 7}, 2, 4},
		{[]int{4, 5, 0, 1}, 2, 2},
		{[]int{0, 1, 2, 3}, 1, 4},          // one node
		{[]int{0, 4, 8, 12}, 1, 4},         // one a node
		{[]int{0, 1, 2, 4, 5}, 1, 5},       // 3 and 2
		{[]int{0, 1, 4, 5, 2, 3}, 1, 6},    // node 0 twice
		{[]int{0, 1, 2, 3, 4, 5, 6}, 1, 7}, // 4 and 3
		{[]int{0}, 1, 1},
	} {
		p := &Plan{DevicesPerNode: 4, Stages: []PlanStage{{Devices: c.devs}}}
		if n, l := p.RingLayout(0); n != c.nodes || l != c.local {
			t.Errorf("devices %v: %d nodes of %d, want %d of %d", c.devs, n, l, c.nodes, c.local)
		}
	}
}

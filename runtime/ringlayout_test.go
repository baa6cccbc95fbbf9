package runtime

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// TestTwoLevelRing: replicas on N nodes of L run the ring in two levels
// (ringPlan) over a transport that drops, duplicates and reorders: the
// reduce-scatter leaves each replica the sum of its own shard (shardOf),
// the all-gather then copies every replica's updated shard to all of them,
// and the whole all-reduce ends with every replica holding the same
// numbers, the sum within 1e-5; whole and in sparse buckets (spanRing).
func TestTwoLevelRing(t *testing.T) {
	sizes := []int{300, 1, 1700, 0, 800, 5}
	for _, shape := range [][2]int{{2, 2}, {2, 3}, {3, 2}, {2, 4}, {4, 2}} {
		for _, bucket := range []bool{false, true} {
			N, L := shape[0], shape[1]
			k := N * L
			t.Run(fmt.Sprintf("%dx%d/bucket=%v", N, L, bucket), func(t *testing.T) {
				m := wire.NewMemory(int64(k), wire.Faults{Drop: 0.05, Duplicate: 0.05, Reorder: 0.05}, 1<<20)
				rng := rand.New(rand.NewPCG(uint64(k), 7))
				eps, vals, want := ringReplicas(t, m, "ring2", k, sizes, func(int, int) float32 { return float32(rng.NormFloat64()) })
				total := len(want)
				spans := [][2]int64{{0, int64(total)}}
				if bucket { // a bucket of two pieces, the rest left alone
					spans = [][2]int64{{10, 900}, {1500, 2700}}
				}
				in := func(i int) bool {
					for _, s := range spans {
						if int64(i) >= s[0] && int64(i) < s[1] {
							return true
						}
					}
					return false
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				errs := make(chan error, k)
				for r := range eps {
					go func() {
						rp := ringPlan{k: k, nodes: N, local: L, r: r, id: func(r int) int32 { return int32(r) }}
						key := func(s int) wire.Key { return msgKey(3, int32(s), ringEdge, 'g') }
						g := ringData(newGradRing(vals[r], k))
						if bucket {
							g = newSpanRing(vals[r], k, spans)
						}
						h := rp.half()
						if err := rp.run(ctx, eps[r], key, g, bucket, 0, h); err != nil {
							errs <- err
							return
						}
						own := shardOf(r, k)
						whole := newGradRing(vals[r], k)
						lo, _ := whole.span(own.Index)
						for i, x := range whole.read(own.Index) {
							if !in(lo + i) {
								continue
							}
							if d := float64(x) - want[lo+i]; d > 1e-5 || d < -1e-5 {
								errs <- fmt.Errorf("replica %d, shard %d value %d: %v after the reduce-scatter, want %v", r, own.Index, lo+i, x, want[lo+i])
								return
							}
						}
						errs <- rp.run(ctx, eps[r], key, g, bucket, h, 2*h)
					}()
				}
				for range eps {
					if err := <-errs; err != nil {
						t.Fatal(err)
					}
				}
				for r := range eps {
					a, b := newGradRing(vals[r], k), newGradRing(vals[0], k)
					for c := 0; c < k; c++ {
						lo, _ := a.span(c)
						ys := b.read(c)
						for i, x := range a.read(c) {
							if !in(lo + i) {
								continue
							}
							if x != ys[i] {
								t.Fatalf("replica %d value %d: %v, replica 0 has %v", r, lo+i, x, ys[i])
							}
							if d := float64(x) - want[lo+i]; d > 1e-5 || d < -1e-5 {
								t.Fatalf("replica %d value %d: %v, want the sum %v", r, lo+i, x, want[lo+i])
							}
						}
					}
				}
			})
		}
	}
}

// TestTwoLevelRingRuns: a run whose data-parallel stage lies on two nodes
// or more (plan.RingLayout) all-reduces in two levels and ends within
// 1e-5 of the run whose stage lies on one node (one ring); with its state
// sharded, its all-reduce in buckets and its all-gather late in buckets,
// bit for bit the two-level run without them.
func TestTwoLevelRingRuns(t *testing.T) {
	g, p := replicatedPlan(t, "mlp", "1f1b", 6, 16)
	s := -1
	for i, st := range p.Stages {
		if len(st.Devices)%2 == 0 && len(st.Devices) >= 4 && st.Params > 0 {
			s = i
		}
	}
	if s < 0 {
		t.Fatalf("mlp's plan on 6 has no stage of 4 or 6 replicas: %v", replicaCounts(p))
	}
	layout := func(q *plan.Plan, perNode int) *plan.Plan {
		c := *q
		c.DevicesPerNode, c.Stages = perNode, append([]plan.PlanStage(nil), q.Stages...)
		if n, l := c.RingLayout(s); perNode < len(c.Stages[s].Devices) && (n < 2 || l < 2) {
			t.Fatalf("the stage on devices %v over nodes of %d: %d nodes of %d", c.Stages[s].Devices, perNode, n, l)
		}
		return &c
	}
	one := layout(p, 64)
	two := layout(p, 2)
	sharded := withLateGather(withBuckets(two, 256, plan.StateSharded), 512)
	o := stage.TrainOptions{Optimizer: "adam", LR: 1e-3, Steps: 3}
	runs := map[string]*Result{}
	for name, q := range map[string]*plan.Plan{"one": one, "two": two, "sharded": sharded, "sharded-plain": withBuckets(two, 0, plan.StateSharded)} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		res, err := RunLocal(ctx, &Job{Run: "ring2-" + name, Graph: g, Plan: q, Steps: 3, Options: Options{Train: o}}, wire.NewMemory(5, wire.Faults{Drop: 0.03, Duplicate: 0.03, Reorder: 0.03}, 1<<20))
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		runs[name] = res
	}
	equalParams(t, runs["two"].Params, runs["one"].Params, 1e-5)
	equalParams(t, runs["sharded"].Params, runs["sharded-plain"].Params, 0)
}

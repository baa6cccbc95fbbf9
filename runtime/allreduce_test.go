package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// TestRingAllReduce: k replicas, each with gradients of uneven sizes (some
// smaller than a chunk, some spanning several), end with the same numbers,
// the sum of everyone's, over a transport that drops, duplicates and
// reorders; and each sends 2(k-1)/k of the gradients, not more.
func TestRingAllReduce(t *testing.T) {
	sizes := []int{300, 1, 1700, 0, 800}
	total := 2801
	for k := 2; k <= 5; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			m := wire.NewMemory(int64(k), wire.Faults{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1}, 1<<20)
			eps, grads, want := ringReplicas(t, m, "ring", k, sizes, func(r, at int) float32 { return float32((r+1)*(at+1)) / 7 })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs := make(chan error, k)
			for r := range eps {
				go func() {
					errs <- ringAllReduce(ctx, eps[r], int32((r+1)%k), r, 3, newGradRing(grads[r], k))
				}()
			}
			for range eps {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			for r := range eps {
				at := 0
				for j, v := range grads[r] {
					for i, x := range v.Data {
						if x != grads[0][j].Data[i] {
							t.Fatalf("replica %d value %d: %v, replica 0 has %v", r, at, x, grads[0][j].Data[i])
						}
						if d := float64(x) - want[at]; d > 1e-6*want[at] || d < -1e-6*want[at] {
							t.Fatalf("replica %d value %d: %v, want %v", r, at, x, want[at])
						}
						at++
					}
				}
				// a gather to replica 0 and a broadcast back would put
				// (k-1) whole copies on its link: from 4 replicas on, more
				// than this allows for resends and framing
				ring := 2 * (k - 1) * (total/k + 1) * 4
				if sent := eps[r].Stats().Bytes; sent > int64(ring*3/2+2*(k-1)*300) {
					t.Errorf("replica %d sent %d bytes; the ring's share is %d", r, sent, ring)
				}
			}
		})
	}
}

// TestAllReduceNothing: a replicated stage without parameters (a loss
// the planner spread over two workers) sums nothing and sends nothing: the
// worker has no endpoint here, so a ring step would fail. One with
// parameters does try.
func TestAllReduceNothing(t *testing.T) {
	w := &Worker{role: role{lay: replicas{offset: []int{0}, count: []int{2}, total: 2}}}
	if err := w.allReduce(context.Background(), 0, nil); err != nil {
		t.Errorf("no gradients: %v", err)
	}
	empty := []*stage.Value[float32]{{Shape: []int{0}}}
	if err := w.allReduce(context.Background(), 0, empty); err != nil {
		t.Errorf("empty gradients: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a stage with gradients did not go round the ring")
		}
	}()
	_ = w.allReduce(context.Background(), 0, []*stage.Value[float32]{{Shape: []int{2}, Data: []float32{1, 2}}})
}

// TestRingHalves: the ring's halves apart, as a sharded stage runs them
// with its update between: the reduce-scatter leaves replica r the whole
// sum of its shard (shardOf: chunk r+1) and the rest partial; the
// all-gather then copies each replica's shard, whatever it holds (here the
// sum negated, as an update would change it), to every replica; over a
// transport that drops, duplicates and reorders.
func TestRingHalves(t *testing.T) {
	sizes := []int{300, 1, 1700, 0, 800}
	total := 2801
	for k := 2; k <= 4; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			m := wire.NewMemory(int64(k), wire.Faults{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1}, 1<<20)
			eps := make([]*wire.Endpoint, k)
			vals := make([][]*stage.Value[float32], k)
			want := make([]float32, total)
			for r := range eps {
				var err error
				if eps[r], err = wire.NewEndpoint(m, "ring", 1, int32(r)); err != nil {
					t.Fatal(err)
				}
				defer eps[r].Close()
				for _, n := range sizes {
					vals[r] = append(vals[r], stage.NewValue[float32](n))
				}
				g := newGradRing(vals[r], k)
				for c := 0; c < k; c++ {
					g.each(c, func(piece []float32, at int) {
						lo, _ := g.span(c)
						for i := range piece {
							piece[i] = float32(r + 1)
							want[lo+at+i] += float32(r + 1)
						}
					})
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs := make(chan error, k)
			for r := range eps {
				go func() {
					g := newGradRing(vals[r], k)
					if err := ringSteps(ctx, eps[r], int32((r+1)%k), r, 3, g, 0, k-1); err != nil {
						errs <- err
						return
					}
					own := shardOf(r, k)
					lo, _ := own.Span(g.total)
					sum := g.read(own.Index)
					for i, x := range sum {
						if x != want[lo+i] {
							errs <- fmt.Errorf("replica %d, shard %d value %d: %v after the reduce-scatter, want the sum %v", r, own.Index, lo+i, x, want[lo+i])
							return
						}
						sum[i] = -x // the update
					}
					g.write(own.Index, sum, false)
					errs <- ringSteps(ctx, eps[r], int32((r+1)%k), r, 3, g, k-1, 2*(k-1))
				}()
			}
			for range eps {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			for r := range eps {
				all := newGradRing(vals[r], k)
				for c := 0; c < k; c++ {
					lo, _ := all.span(c)
					for i, x := range all.read(c) {
						if x != -want[lo+i] {
							t.Fatalf("replica %d value %d: %v after the all-gather, want %v", r, lo+i, x, -want[lo+i])
						}
					}
				}
			}
		})
	}
}

// ringReplicas opens k endpoints of run over t (closed when the test
// ends) and gives replica r values of sizes, element at of them
// fill(r, at); want is their sum element by element.
func ringReplicas(t *testing.T, tr wire.Transport, run string, k int, sizes []int, fill func(r, at int) float32) ([]*wire.Endpoint, [][]*stage.Value[float32], []float64) {
	t.Helper()
	total := 0
	for _, n := range sizes {
		total += n
	}
	eps, vals, want := make([]*wire.Endpoint, k), make([][]*stage.Value[float32], k), make([]float64, total)
	for r := range eps {
		ep, err := wire.NewEndpoint(tr, run, 1, int32(r))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps[r] = ep
		at := 0
		for _, n := range sizes {
			v := stage.NewValue[float32](n)
			for i := range v.Data {
				v.Data[i] = fill(r, at)
				want[at] += float64(v.Data[i])
				at++
			}
			vals[r] = append(vals[r], v)
		}
	}
	return eps, vals, want
}

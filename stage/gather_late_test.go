package stage

import (
	"context"
	"errors"
	"testing"
	"time"
)

// gate is one replica of two's ShardComm whose all-gather waits for the
// test: started says it began, release lets it end with err (its
// reduce-scatter and norms are the replica's own: the other's gradients
// do not matter here).
type gate struct {
	started chan struct{}
	release chan error
}

func (gate) Replicas() int { return 2 }

func (gate) AllReduce(context.Context, []*Value[float32]) error {
	return errors.New("a sharded stage reduce-scatters")
}

func (gate) ReduceScatter(context.Context, []*Value[float32]) error { return nil }

func (g gate) AllGather(context.Context, []*Value[float32]) error {
	close(g.started)
	return <-g.release
}

func (gate) PoolNorms(_ context.Context, squares map[string]float64) (float64, error) {
	return GlobalNorm(squares), nil
}

// TestGatherLate: a sharded executor that gathers late returns from
// ApplyStep with its all-gather still running; its next forward pass
// waits for the all-gather's end, and an all-gather's error comes back
// from the next call that reads the parameters. Without GatherLate,
// ApplyStep waits for it.
func TestGatherLate(t *testing.T) {
	for _, c := range backendCases()[:2] {
		t.Run(c.name, func(t *testing.T) {
			for _, late := range []bool{false, true} {
				tr := stepTrainer(t, c, TrainOptions{Optimizer: "adam", LR: 0.01, MicroBatch: 2})
				if err := tr.Ex.ShardOptimizer(Shard{0, 2}); err != nil {
					t.Fatal(err)
				}
				tr.Ex.GatherLate(late)
				g := gate{make(chan struct{}), make(chan error, 1)}
				runPasses(t, tr, 0)
				if _, err := tr.Ex.EndStep(context.Background(), 0, g); err != nil {
					t.Fatal(err)
				}
				applied := make(chan error, 1)
				go func() { applied <- tr.Ex.ApplyStep(false) }()
				<-g.started
				select {
				case err := <-applied:
					if !late {
						t.Fatalf("ApplyStep returned (%v) before its all-gather ended", err)
					}
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(100 * time.Millisecond):
					if late {
						t.Fatal("ApplyStep waits for the all-gather it should leave running")
					}
					g.release <- nil
					if err := <-applied; err != nil {
						t.Fatal(err)
					}
					continue
				}
				forwarded := make(chan struct{})
				go func() {
					defer close(forwarded)
					runPasses(t, tr, 1)
				}()
				select {
				case <-forwarded:
					t.Fatal("the next forward pass ran before the all-gather ended")
				case <-time.After(100 * time.Millisecond):
				}
				g.release <- nil
				<-forwarded

				// an all-gather that fails says so at the next read
				g = gate{make(chan struct{}), make(chan error, 1)}
				if _, err := tr.Ex.EndStep(context.Background(), 1, g); err != nil {
					t.Fatal(err)
				}
				g.release <- errors.New("link cut")
				if err := tr.Ex.ApplyStep(false); err != nil {
					t.Fatal(err)
				}
				var se *StepError
				if _, err := tr.Ex.HostState(); !errors.As(err, &se) || se.Step != 1 {
					t.Fatalf("HostState after a failed late all-gather: %v, want a StepError of step 1", err)
				}
				if _, err := tr.Ex.HostState(); err != nil {
					t.Fatalf("the error said twice: %v", err)
				}
			}
		})
	}
}

// bucketGate is gate with its late all-gather cut into buckets
// (GatherBucketComm): bucket b's ring waits for release[b].
type bucketGate struct {
	gate
	release []chan error
}

func (g bucketGate) GatherBucket(_ context.Context, b int, _ []*Value[float32]) error {
	return <-g.release[b]
}

// TestGatherBuckets: a sharded executor whose late all-gather is cut into
// buckets (one per op with parameters, in forward order) returns from
// ApplyStep with every bucket's ring running; its next forward pass waits
// runs its ops while the last op's bucket is out, waits for that bucket
// before the last op and ends once it is in; a bucket's
// error comes back from that forward pass as the step's.
func TestGatherBuckets(t *testing.T) {
	for _, c := range backendCases()[:2] {
		t.Run(c.name, func(t *testing.T) { gatherBuckets(t, c) })
	}
}

func gatherBuckets(t *testing.T, c backendCase) {
	tr := stepTrainer(t, c, TrainOptions{Optimizer: "adam", LR: 0.01, MicroBatch: 2})
	if err := tr.Ex.ShardOptimizer(Shard{0, 2}); err != nil {
		t.Fatal(err)
	}
	tr.Ex.GatherLate(true)
	var bs []Bucket
	for _, i := range tr.Ex.ops {
		if len(tr.G.Params(i)) > 0 {
			bs = append(bs, Bucket{Ops: []int{i}})
		}
	}
	if len(bs) < 2 {
		t.Fatalf("the mlp has %d ops with parameters", len(bs))
	}
	tr.Ex.GatherBuckets(bs)
	for step, fail := range []bool{false, true} {
		g := bucketGate{gate{make(chan struct{}), make(chan error, 1)}, make([]chan error, len(bs))}
		for b := range g.release {
			g.release[b] = make(chan error, 1)
		}
		runPasses(t, tr, step)
		if _, err := tr.Ex.EndStep(context.Background(), step, g); err != nil {
			t.Fatal(err)
		}
		if err := tr.Ex.ApplyStep(false); err != nil {
			t.Fatalf("ApplyStep with its buckets out: %v", err)
		}
		for b := range bs[:len(bs)-1] {
			g.release[b] <- nil
		}
		started := make(chan int, len(tr.Ex.ops))
		tr.Ex.opStarts = func(i int) {
			select {
			case started <- i:
			default:
			}
		}
		forwarded := make(chan error, 1)
		go func() {
			_, err := tr.Ex.Forward(0, Position{Step: step + 1}, feedsOf(t, tr, step+1))
			forwarded <- err
		}()
		select {
		case err := <-forwarded:
			t.Fatalf("the forward pass ended (%v) with its last op's bucket out", err)
		case <-time.After(100 * time.Millisecond):
		}
		lastOp := bs[len(bs)-1].Ops[0]
		if len(started) == 0 {
			t.Fatal("the forward pass ran no op while its last op's bucket was out")
		}
		for len(started) > 0 {
			if i := <-started; i == lastOp {
				t.Fatalf("op %d ran with its bucket out", i)
			}
		}
		var last error
		if fail {
			last = errors.New("link cut")
		}
		g.release[len(bs)-1] <- last
		err := <-forwarded
		tr.Ex.opStarts = nil
		var se *StepError
		switch {
		case fail && (!errors.As(err, &se) || se.Step != step):
			t.Fatalf("forward after a failed bucket: %v, want a StepError of step %d", err, step)
		case !fail && err != nil:
			t.Fatal(err)
		case !fail: // the micro-batch's backward frees it for the next step's passes
			loss := tr.G.Op(tr.G.Loss()).Name
			seed := &Value[float32]{Shape: []int{1}, Data: []float32{1}}
			if _, err := tr.Ex.Backward(0, map[string]*Value[float32]{loss: seed}, true); err != nil {
				t.Fatal(err)
			}
			if err := tr.Ex.ZeroGrads(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// feedsOf is micro-batch 0's feeds of step (runPasses's).
func feedsOf(t *testing.T, tr *Trainer, step int) map[string]*Value[float32] {
	t.Helper()
	batch, err := tr.Source.Inputs(step, tr.batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := tr.batch / tr.mbs
	feeds := map[string]*Value[float32]{}
	for name, v := range batch {
		feeds[name] = SliceRows(v, 0, b)
	}
	return feeds
}

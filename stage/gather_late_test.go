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

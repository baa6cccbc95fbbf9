package profile

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
)

// The work of the measurements of what a run pays (runcosts.go), each done
// by a measuring child (child.go) or, where the program cannot start one,
// by a goroutine.

// busyMicroBatch is the micro-batch a busy worker trains at.
const busyMicroBatch = 8

// busy is one busy worker of a core-sharing measurement: the zoo's small
// MMT (a mix of the ops the zoo's models have: linear layers, attention,
// layer norms, GELUs) trained forward and backward at micro-batch
// busyMicroBatch through the stage executor, as a worker computes.
type busy struct {
	ex    *stage.Executor
	batch map[string]*stage.Value[float32]
	seed  map[string]*stage.Value[float32]
	mb    int
}

// newBusy builds the worker's model and runs it twice to warm up.
func newBusy() (*busy, error) {
	e, err := models.Lookup("mmt")
	if err != nil {
		return nil, err
	}
	g, err := e.Build(e.Small)
	if err != nil {
		return nil, err
	}
	var ops []int
	for i := 0; i < g.NumOps(); i++ {
		ops = append(ops, i)
	}
	b := &busy{seed: map[string]*stage.Value[float32]{g.Op(g.Loss()).Name: {Shape: []int{1}, Data: []float32{1}}}}
	if b.ex, err = stage.NewExecutor(g, ops, g.Seed()); err != nil {
		return nil, err
	}
	data, err := stage.NewDataset(g)
	if err != nil {
		return nil, err
	}
	if b.batch, err = data.Batch(0, busyMicroBatch); err != nil {
		return nil, err
	}
	for i := 0; i < 2; i++ {
		if err := b.pass(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// pass trains one micro-batch forward and backward.
func (b *busy) pass() error {
	b.mb++
	if _, err := b.ex.Forward(b.mb, stage.Position{Step: b.mb}, b.batch); err != nil {
		return err
	}
	if _, err := b.ex.Backward(b.mb, b.seed, true); err != nil {
		return err
	}
	return b.ex.ZeroGrads()
}

// run passes for seconds (at least 3 passes) and returns the mean seconds
// per pass: the time it took over the passes, so that a pass that lost its
// core to another worker for a slice counts as often as it happens (the
// median of passes shorter than a slice missed it).
func (b *busy) run(seconds float64) (float64, error) {
	passes := 0
	start := time.Now()
	for ; time.Since(start).Seconds() < seconds || passes < 3; passes++ {
		if err := b.pass(); err != nil {
			return 0, err
		}
	}
	return time.Since(start).Seconds() / float64(passes), nil
}

// median is the middle of xs (which it sorts).
func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

// The keys of the probes' messages: round i's message to an echo is
// (i, 0, 0, 'a') and the answer of echo id (i, id, 0, 'g'); a ring's step
// s of round i for size j is (i, s, j, 'g').
func echoKey(i int64) wire.Key            { return wire.Key{Iter: i, Edge: 0, Dir: 'a'} }
func replyKey(i int64, id int32) wire.Key { return wire.Key{Iter: i, MB: id, Edge: 0, Dir: 'g'} }

// parentID is the measuring process's endpoint; children are 1, 2, ...
const parentID = 0

// echo answers every message to ep (endpoint id), in rounds from 0, to
// endpoint to: the message itself, decoded and encoded again as a worker
// does (reply 0), or reply bytes (a report), its first 8 the host's wall
// clock in nanoseconds, little-endian, when the message came, or with
// stamp when it had taken and decoded it, or with report a worker's report
// (probeReport) saying when the message came; until ctx ends.
func echo(ctx context.Context, ep *wire.Endpoint, spec childSpec) error {
	id, to, reply, stamp := spec.ID, spec.To, spec.Reply, spec.Stamp
	answer := make([]byte, reply)
	for i := int64(0); ; i++ {
		msg, err := ep.Receive(ctx, echoKey(i))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		out := answer
		if !spec.Report && (reply == 0 || stamp) {
			ts, err := wire.DecodeTensors(msg)
			if err != nil {
				return err
			}
			if reply == 0 {
				if out, err = wire.EncodeTensors(ts); err != nil {
					return err
				}
			}
		}
		switch {
		case spec.Report:
			if out, err = newProbeReport(id, i, time.Now()); err != nil {
				return err
			}
		case reply >= 8:
			binary.LittleEndian.PutUint64(out, uint64(time.Now().UnixNano()))
		}
		if err := ep.Send(ctx, to, replyKey(i, id), out); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// ring is replica r (endpoint r+1) of a ring all-reduce among k replicas
// (endpoints 1..k), as a data-parallel stage's replicas run it: for each
// size, reps rounds of 2(k−1) steps, each step a chunk of size/k bytes
// encoded, sent to the next, the previous one's received, decoded and
// added. It returns, per size, the mean seconds of a round.
func ring(ctx context.Context, ep *wire.Endpoint, r, k int, sizes []int, reps int) ([]float64, error) {
	if k < 2 || r < 0 || r >= k {
		return nil, fmt.Errorf("ring: replica %d of %d", r, k)
	}
	next := int32((r+1)%k + 1)
	out := make([]float64, len(sizes))
	for j, size := range sizes {
		n := max(1, size/4/k) // floats per chunk
		mine := make([]float32, n)
		var times []float64
		for i := 0; i < reps; i++ {
			start := time.Now()
			for s := 0; s < 2*(k-1); s++ {
				key := wire.Key{Iter: int64(i), MB: int32(s), Edge: int32(j), Dir: 'g'}
				msg, err := wire.EncodeTensors([]wire.Tensor{{Name: "chunk", Shape: []int{n}, F32: mine}})
				if err != nil {
					return nil, err
				}
				if err := ep.Send(ctx, next, key, msg); err != nil {
					return nil, err
				}
				got, err := ep.Receive(ctx, key)
				if err != nil {
					return nil, err
				}
				ts, err := wire.DecodeTensors(got)
				if err != nil {
					return nil, err
				}
				if s < k-1 { // reduce-scatter adds; all-gather copies
					for x, v := range ts[0].F32 {
						mine[x] += v
					}
				} else {
					copy(mine, ts[0].F32)
				}
			}
			times = append(times, time.Since(start).Seconds())
		}
		out[j] = mean(times)
	}
	return out, nil
}

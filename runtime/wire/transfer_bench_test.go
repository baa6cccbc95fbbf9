package wire_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// BenchmarkActivationTransfer moves one MMT activation at micro-batch 16
// (16 × 256 × 1024 float32s, 16.8 MB) from one worker's stage to the next
// over an embedded NATS server on loopback, each end on a connection of its
// own, one message at a time: "link" is the runtime's path from a stage's
// output to the next stage's feed (transfer_shim_test.go: encode, frame,
// chunk, acknowledge, reassemble, decode); "raw" is NATS publish to
// subscribe of the same bytes, cut at the payload limit, nothing else. The
// two take turns message by message; it reports each one's median
// milliseconds and their ratio.
// bench/link_ab.sh runs this file against an older tree's path as well
// (its shim written for that tree), interleaved, and prints the ratios.
// Not part of make test.
func BenchmarkActivationTransfer(b *testing.B) {
	shape := []int{16, 256, 1024}
	x := make([]float32, shape[0]*shape[1]*shape[2])
	for i := range x {
		x[i] = float32(i%1000) / 7
	}
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	link := linkMover(b, srv, shape, x)
	raw := rawMover(b, srv, 4*len(x))
	link(-1)
	raw()
	// the two paths take turns, message by message, so that a machine
	// whose load changes slows both alike; a move is timed until the
	// receiver has the activation (the sender's end of it, its last
	// acknowledgements, runs on while the stages compute)
	var ls, rs []float64
	b.SetBytes(int64(4 * len(x)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ls, rs = append(ls, link(i)), append(rs, raw())
	}
	b.StopTimer()
	l, r := median(ls), median(rs)
	b.ReportMetric(1e3*l, "link-ms")
	b.ReportMetric(1e3*r, "raw-ms")
	b.ReportMetric(l/r, "link/raw")
}

// median is the middle value of v (v is reordered).
func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

func dial(b *testing.B, srv *wire.Embedded) *wire.NATS {
	t, err := wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { t.Close() })
	return t
}

// linkMover returns a function that moves x, as an activation of
// iteration i, from stage 0 to stage 1, and says in how many seconds the
// receiver had it.
func linkMover(b *testing.B, srv *wire.Embedded, shape []int, x []float32) func(i int) float64 {
	var eps [2]*wire.Endpoint
	for i := range eps {
		ep, err := wire.NewEndpoint(dial(b, srv), "bench", 1, int32(i))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(ep.Close)
		eps[i] = ep
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	ts := []wire.Tensor{{Name: "branch0.attn.out", Shape: shape, F32: x}}
	return func(i int) float64 {
		k := wire.Key{Iter: int64(i + 1), MB: 0, Edge: 0, Dir: 'a'}
		errs := make(chan error, 1)
		start := time.Now()
		go func() { errs <- sendActivation(ctx, eps[0], 1, k, ts) }()
		feed, done, err := receiveActivation(ctx, eps[1], k)
		secs := time.Since(start).Seconds()
		if err == nil {
			err = <-errs
		}
		if err != nil {
			b.Fatal(err)
		}
		if len(feed) != len(x) || feed[len(x)-1] != x[len(x)-1] {
			b.Fatalf("received %d floats, want %d", len(feed), len(x))
		}
		done()
		return secs
	}
}

// rawMover returns a function that publishes size bytes, cut at the
// payload limit, waits until a subscriber on a connection of its own has
// them all, and says how many seconds that took.
func rawMover(b *testing.B, srv *wire.Embedded, size int) func() float64 {
	pub, sub := dial(b, srv), dial(b, srv)
	chunk := pub.MaxPayload() - 256
	msg := make([]byte, size)
	done := make(chan struct{}, 1)
	got := 0
	unsub, err := sub.Subscribe("raw", func(m []byte) {
		if got += len(m); got == size {
			got = 0
			done <- struct{}{}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(unsub)
	time.Sleep(50 * time.Millisecond) // the subscription reaches the server
	return func() float64 {
		start := time.Now()
		for c := 0; c < size; c += chunk {
			if err := pub.Publish("raw", msg[c:min(size, c+chunk)]); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			b.Fatal("raw NATS lost a message")
		}
		return time.Since(start).Seconds()
	}
}

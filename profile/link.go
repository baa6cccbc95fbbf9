package profile

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// HostLinkSizes are the message sizes, and HostLinkReps the rounds per size,
// of a probe of the links between workers on this host: a quick one probes
// fewer and fewer times.
func HostLinkSizes(quick bool) (sizes []int, reps int) {
	if quick {
		return []int{1 << 10, 1 << 20}, 5
	}
	return []int{1 << 10, 64 << 10, 1 << 20, 8 << 20}, 20
}

// ProbeLinks measures the links workers on this host use: two endpoints on
// their own connections to an embedded NATS server on loopback bounce a
// message of each size back and forth reps times (after one warm-up round),
// and the median round trip halved is the size's one-way time in seconds.
func ProbeLinks(sizes []int, reps int) ([]float64, error) {
	if reps < 1 {
		return nil, fmt.Errorf("profile: probing links needs at least one round, got %d", reps)
	}
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	eps, closeEps, err := endpoints(srv)
	if err != nil {
		return nil, err
	}
	defer closeEps()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := make([]float64, len(sizes))
	for j, size := range sizes {
		if size < 1 {
			return nil, fmt.Errorf("profile: a probe message must have a size, got %d", size)
		}
		trips, err := bounce(ctx, eps, make([]byte, size), int64(2*j), reps+1)
		if err != nil {
			return nil, fmt.Errorf("profile: probing links with %d-byte messages: %w", size, err)
		}
		trips = trips[1:]
		sort.Float64s(trips)
		out[j] = trips[len(trips)/2] / 2
	}
	return out, nil
}

// endpoints opens the two ends of the probed link: endpoints 0 and 1 of one
// run, each on its own connection to srv. closeAll closes what was opened.
func endpoints(srv *wire.Embedded) (eps [2]*wire.Endpoint, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for i := range eps {
		t, err := dial(srv)
		if err != nil {
			closeAll()
			return eps, nil, err
		}
		closers = append(closers, func() { t.Close() })
		if eps[i], err = wire.NewEndpoint(t, "probe", 1, int32(i)); err != nil {
			closeAll()
			return eps, nil, err
		}
		closers = append(closers, eps[i].Close)
	}
	return eps, closeAll, nil
}

// dial opens a connection of its own to srv.
func dial(srv *wire.Embedded) (*wire.NATS, error) {
	return wire.DialNATS(wire.NATSOptions{URL: srv.URL(), Token: srv.Token})
}

// bounce sends msg from eps[0] to eps[1] and back n times, on iterations
// iter (there) and iter+1 (back), and returns each round trip's seconds.
func bounce(ctx context.Context, eps [2]*wire.Endpoint, msg []byte, iter int64, n int) ([]float64, error) {
	echo := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			got, err := eps[1].ReceiveActivation(ctx, iter, int32(i))
			if err == nil {
				err = eps[1].SendActivation(ctx, 0, iter+1, int32(i), got)
			}
			if err != nil {
				echo <- err
				return
			}
		}
		echo <- nil
	}()
	trips := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := eps[0].SendActivation(ctx, 1, iter, int32(i), msg); err != nil {
			return nil, err
		}
		if _, err := eps[0].ReceiveActivation(ctx, iter+1, int32(i)); err != nil {
			return nil, err
		}
		trips = append(trips, time.Since(start).Seconds())
	}
	return trips, <-echo
}

// Transport measures the throughput of the links for one message size, in
// bytes per second, on one embedded NATS server: links through the probe's
// two endpoints (framed, acknowledged, chunked as workers send), raw as
// NATS publish→subscribe of the same bytes cut at the payload limit. Each
// streams 256 MiB one way (at least 8 messages).
func Transport(size int) (links, raw float64, err error) {
	return transport(size, max(8, (256<<20)/size))
}

// transport is Transport with n messages each way.
func transport(size, n int) (links, raw float64, err error) {
	if size < 1 || n < 1 {
		return 0, 0, fmt.Errorf("profile: a transport measurement needs messages with bytes, got %d of %d bytes", n, size)
	}
	srv, err := wire.StartEmbedded(0)
	if err != nil {
		return 0, 0, err
	}
	defer srv.Shutdown()
	msg := make([]byte, size)
	if raw, err = rawRate(srv, msg, n); err != nil {
		return 0, 0, err
	}
	links, err = linkRate(srv, msg, n)
	return links, raw, err
}

// rawRate publishes msg n times, in pieces the payload limit allows, to a
// subscriber on a connection of its own, and returns bytes per second.
func rawRate(srv *wire.Embedded, msg []byte, n int) (float64, error) {
	pub, err := dial(srv)
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	sub, err := dial(srv)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	chunk := pub.MaxPayload() - 256
	pieces := (len(msg) + chunk - 1) / chunk
	got := make(chan struct{}, n*pieces)
	unsub, err := sub.Subscribe("raw", func([]byte) { got <- struct{}{} })
	if err != nil {
		return 0, err
	}
	defer unsub()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	for i := 0; i < n; i++ {
		for c := 0; c < pieces; c++ {
			pub.Publish("raw", msg[c*chunk:min(len(msg), (c+1)*chunk)])
		}
	}
	timeout := time.After(time.Minute)
	for i := 0; i < n*pieces; i++ {
		select {
		case <-got:
		case <-timeout:
			return 0, fmt.Errorf("profile: raw NATS lost %d of %d messages", n*pieces-i, n*pieces)
		}
	}
	return float64(n*len(msg)) / time.Since(start).Seconds(), nil
}

// linkRate sends msg n times from the probe's endpoint 0 to endpoint 1 as
// activations of one iteration and returns bytes per second.
func linkRate(srv *wire.Embedded, msg []byte, n int) (float64, error) {
	eps, closeEps, err := endpoints(srv)
	if err != nil {
		return 0, err
	}
	defer closeEps()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	errs := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := eps[0].SendActivation(ctx, 1, 0, int32(i), msg); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for i := 0; i < n; i++ {
		if _, err := eps[1].ReceiveActivation(ctx, 0, int32(i)); err != nil {
			return 0, err
		}
	}
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n*len(msg)) / time.Since(start).Seconds(), nil
}

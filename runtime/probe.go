package runtime

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// ProbeLinks measures the links workers on this host use: two endpoints on
// their own connections to an embedded NATS server on loopback bounce a
// message of each size back and forth reps times (after one warm-up round),
// and the median round trip halved is the size's one-way time in seconds.
func ProbeLinks(sizes []int, reps int) ([]float64, error) {
	if reps < 1 {
		return nil, fmt.Errorf("runtime: probing links needs at least one round, got %d", reps)
	}
	srv, err := StartEmbedded(0)
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	var eps [2]*Endpoint
	for i := range eps {
		t, err := DialNATS(NATSOptions{URL: srv.URL(), Token: srv.Token})
		if err != nil {
			return nil, err
		}
		defer t.Close()
		if eps[i], err = NewEndpoint(t, "probe", 1, int32(i)); err != nil {
			return nil, err
		}
		defer eps[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := make([]float64, len(sizes))
	for j, size := range sizes {
		if size < 1 {
			return nil, fmt.Errorf("runtime: a probe message must have a size, got %d", size)
		}
		trips, err := bounce(ctx, eps, make([]byte, size), int64(2*j), reps+1)
		if err != nil {
			return nil, fmt.Errorf("runtime: probing links with %d-byte messages: %w", size, err)
		}
		trips = trips[1:]
		sort.Float64s(trips)
		out[j] = trips[len(trips)/2] / 2
	}
	return out, nil
}

// bounce sends msg from eps[0] to eps[1] and back n times, on iterations
// iter (there) and iter+1 (back), and returns each round trip's seconds.
func bounce(ctx context.Context, eps [2]*Endpoint, msg []byte, iter int64, n int) ([]float64, error) {
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

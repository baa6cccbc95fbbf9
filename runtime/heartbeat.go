package runtime

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// CoordinatorBeats is the subject of run's coordinator heartbeats: a
// worker, or an agent its coordinator holds, leaves when they stop.
func CoordinatorBeats(run string) string { return "graphpipe." + run + ".hb.coordinator" }

func workerBeats(run string, gen uint32) string {
	return fmt.Sprintf("graphpipe.%s.g%d.hb.workers", run, gen)
}

// Beat publishes what payload returns on subject, every heartbeat, until
// ctx ends.
func (tm Timings) Beat(ctx context.Context, t wire.Transport, subject string, payload func() []byte) {
	tick := time.NewTicker(tm.WithDefaults().HeartbeatEvery)
	defer tick.Stop()
	for {
		t.Publish(subject, payload())
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// WatchCoordinator cancels ctx with a cause when the coordinator's
// heartbeats stop: a worker must not outlive its run.
func (tm Timings) WatchCoordinator(ctx context.Context, t wire.Transport, run string, cancel context.CancelCauseFunc) error {
	tm = tm.WithDefaults()
	var mu sync.Mutex // guards last
	last := time.Now()
	unsub, err := t.Subscribe(CoordinatorBeats(run), func([]byte) {
		mu.Lock()
		last = time.Now()
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	go tm.watch(ctx, unsub, cancel, func(now, awake time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		if quiet := quietFor(last, awake, now); quiet > tm.HeartbeatTimeout {
			return fmt.Errorf("the coordinator of run %s has been silent for %v: leaving", run, quiet.Round(time.Millisecond))
		}
		return nil
	})
	return nil
}

// watchWorkers cancels ctx, naming the worker, when one of n workers has
// been silent for the heartbeat timeout, unless left says it has left:
// handed over all it owed (its state at a stop, its parameters at the end)
// and gone, while the coordinator still reads the others'. names describes
// worker ids for messages.
func (tm Timings) watchWorkers(ctx context.Context, t wire.Transport, run string, gen uint32, n int, names func(int) string, left func(int) bool, cancel context.CancelCauseFunc) error {
	tm = tm.WithDefaults()
	var mu sync.Mutex // guards last
	last := make([]time.Time, n)
	for i := range last {
		last[i] = time.Now()
	}
	unsub, err := t.Subscribe(workerBeats(run, gen), func(b []byte) {
		if len(b) < 4 {
			return
		}
		id := int(binary.LittleEndian.Uint32(b))
		if id < 0 || id >= n {
			return
		}
		if len(b) > 4 { // the worker says it hangs, and where
			cancel(fmt.Errorf("%s hangs: %s", names(id), b[4:]))
			return
		}
		mu.Lock()
		last[id] = time.Now()
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	go tm.watch(ctx, unsub, cancel, func(now, awake time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		for id, at := range last {
			if quiet := quietFor(at, awake, now); quiet > tm.HeartbeatTimeout && !left(id) {
				return &SilentError{Who: names(id), Silent: quiet}
			}
		}
		return nil
	})
	return nil
}

// SilentError is a worker (or an agent) lost to silence: nothing heard of
// it for Silent, more than the heartbeat timeout.
type SilentError struct {
	Who    string // "worker 2 (stage 1, replica 0)"
	Silent time.Duration
}

func (e *SilentError) Error() string {
	return fmt.Sprintf("%s has been silent for %v: it died or its host is cut off", e.Who, e.Silent.Round(time.Millisecond))
}

func workerBeat(id int) []byte {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, uint32(id))
	return b
}

// watch runs check twice a heartbeat until ctx ends or check reports a
// failure, which cancels ctx with it; unsub is called on the way out.
func (tm Timings) watch(ctx context.Context, unsub func(), cancel context.CancelCauseFunc, check func(now, awake time.Time) error) {
	defer unsub()
	tick := time.NewTicker(tm.HeartbeatEvery / 2)
	defer tick.Stop()
	tm.watchTicks(ctx, tick.C, time.Now(), cancel, check)
}

// watchTicks is watch's loop over ticks (their times). A tick that comes a
// whole heartbeat late means this process itself stalled (descheduled,
// swapping, a long pause): heartbeats sent meanwhile may still wait unread,
// so silence counts again from then (awake), not from the last one heard.
func (tm Timings) watchTicks(ctx context.Context, ticks <-chan time.Time, start time.Time, cancel context.CancelCauseFunc, check func(now, awake time.Time) error) {
	prev, awake := start, start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticks:
			if now.Sub(prev) > tm.HeartbeatEvery {
				awake = now
			}
			prev = now
			if err := check(now, awake); err != nil {
				cancel(err)
				return
			}
		}
	}
}

// quietFor is how long a peer last heard at last has been silent at now,
// counting only time this process was awake to hear it.
func quietFor(last, awake, now time.Time) time.Duration {
	if awake.After(last) {
		last = awake
	}
	return now.Sub(last)
}

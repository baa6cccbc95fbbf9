package runtime

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
)

// Heartbeats are plain publishes (a lost one is made up by the next), every
// HeartbeatEvery; silence for HeartbeatTimeout means the other side is gone.
var (
	HeartbeatEvery   = 500 * time.Millisecond
	HeartbeatTimeout = 4 * time.Second // detection within 5 s: this, a beat and a check
	// HangTimeout: a worker computing one action for longer than this (or
	// than ten times its stage's planned compute, if more) says it hangs.
	HangTimeout = 4 * time.Second
	// WarmupHangTimeout replaces HangTimeout in a worker's first iteration,
	// which also pays for what runs once: a GPU's kernels compiled, its
	// libraries' code loaded, pools filled.
	WarmupHangTimeout = 60 * time.Second
)

// timingMu guards the four timings above against the tests that shorten
// them while goroutines of an earlier run may still read them: the package
// reads them through these, and tests write them through setTimings.
var timingMu sync.RWMutex

func heartbeatEvery() time.Duration {
	timingMu.RLock()
	defer timingMu.RUnlock()
	return HeartbeatEvery
}
func heartbeatTimeout() time.Duration {
	timingMu.RLock()
	defer timingMu.RUnlock()
	return HeartbeatTimeout
}
func hangTimeouts() (steady, warmup time.Duration) {
	timingMu.RLock()
	defer timingMu.RUnlock()
	return HangTimeout, WarmupHangTimeout
}

func coordBeats(run string) string { return "graphpipe." + run + ".hb.coordinator" }
func workerBeats(run string, gen uint32) string {
	return fmt.Sprintf("graphpipe.%s.g%d.hb.workers", run, gen)
}

// beat publishes payload on subject until ctx ends.
func beat(ctx context.Context, t wire.Transport, subject string, payload []byte) {
	beatWith(ctx, t, subject, func() []byte { return payload })
}

// beatWith publishes what payload returns, every beat, until ctx ends.
func beatWith(ctx context.Context, t wire.Transport, subject string, payload func() []byte) {
	tick := time.NewTicker(heartbeatEvery())
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

// watchCoordinator cancels ctx with a cause when the coordinator's
// heartbeats stop: a worker must not outlive its run.
func watchCoordinator(ctx context.Context, t wire.Transport, run string, cancel context.CancelCauseFunc) error {
	var mu sync.Mutex // guards last
	last := time.Now()
	unsub, err := t.Subscribe(coordBeats(run), func([]byte) {
		mu.Lock()
		last = time.Now()
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	go watch(ctx, unsub, cancel, func(now, awake time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		if quiet := quietFor(last, awake, now); quiet > heartbeatTimeout() {
			return fmt.Errorf("the coordinator of run %s has been silent for %v: leaving", run, quiet.Round(time.Millisecond))
		}
		return nil
	})
	return nil
}

// watchWorkers cancels ctx, naming the worker, when one of n workers has
// been silent for HeartbeatTimeout. names describes worker ids for messages.
func watchWorkers(ctx context.Context, t wire.Transport, run string, gen uint32, n int, names func(int) string, cancel context.CancelCauseFunc) error {
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
	go watch(ctx, unsub, cancel, func(now, awake time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		for id, at := range last {
			if quiet := quietFor(at, awake, now); quiet > heartbeatTimeout() {
				return &SilentError{Who: names(id), Silent: quiet}
			}
		}
		return nil
	})
	return nil
}

// SilentError is a worker lost to silence: nothing heard of it for Silent,
// more than the heartbeat timeout.
type SilentError struct {
	Who    string // "worker 2 (stage 1, replica 0)"
	Silent time.Duration
}

func (e *SilentError) Error() string {
	return fmt.Sprintf("%s has been silent for %v: it died or its host is cut off", e.Who, e.Silent.Round(time.Millisecond))
}

// SetHeartbeatTimeout sets how long a silent peer is waited for before it
// counts as lost (run --heartbeat-timeout): at least two heartbeats.
func SetHeartbeatTimeout(d time.Duration) {
	timingMu.Lock()
	defer timingMu.Unlock()
	HeartbeatTimeout = d
}

func workerBeat(id int) []byte {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, uint32(id))
	return b
}

// watch runs check twice a heartbeat until ctx ends or check reports a
// failure, which cancels ctx with it; unsub is called on the way out.
func watch(ctx context.Context, unsub func(), cancel context.CancelCauseFunc, check func(now, awake time.Time) error) {
	defer unsub()
	tick := time.NewTicker(heartbeatEvery() / 2)
	defer tick.Stop()
	watchTicks(ctx, tick.C, time.Now(), cancel, check)
}

// watchTicks is watch's loop over ticks (their times). A tick that comes a
// whole heartbeat late means this process itself stalled (descheduled,
// swapping, a long pause): heartbeats sent meanwhile may still wait unread,
// so silence counts again from then (awake), not from the last one heard.
func watchTicks(ctx context.Context, ticks <-chan time.Time, start time.Time, cancel context.CancelCauseFunc, check func(now, awake time.Time) error) {
	prev, awake := start, start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticks:
			if now.Sub(prev) > heartbeatEvery() {
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

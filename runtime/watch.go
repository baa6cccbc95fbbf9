package runtime

import (
	"fmt"
	"sync"
	"time"

	"github.com/graphpipe/graphpipe/plan"
)

// watch is what a worker's heartbeat says of its own computing: the
// computation under way and since when, against the limit past which it
// hangs. The worker's goroutine marks its computations (busy) and its
// iterations' ends (warmed); the heartbeat's goroutine reads them (hang).
type watch struct {
	mu    sync.Mutex // guards since, what, warm
	since time.Time  // when the computation under way began; zero while waiting on others
	what  string
	warm  bool // an iteration has finished (see Timings.WarmupHangTimeout)

	timings Timings // the run's: its hang timeouts
	// planned is ten times the stage's planned compute: a computation
	// may run that long whatever the hang timeout
	planned time.Duration
}

// newWatch watches a worker of stage st under the run's timings tm.
func newWatch(tm Timings, st plan.PlanStage) *watch {
	return &watch{timings: tm, planned: time.Duration(10 * (st.ForwardS + st.BackwardS + st.WeightS + st.FlushS) * float64(time.Second))}
}

// busy marks the start (what != "") or end of a computation of the worker's own.
func (wt *watch) busy(what string) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.what = what
	if what == "" {
		wt.since = time.Time{}
	} else {
		wt.since = time.Now()
	}
}

// warmed marks an iteration finished: the warm-up's hang timeout is over.
func (wt *watch) warmed() {
	wt.mu.Lock()
	wt.warm = true
	wt.mu.Unlock()
}

// hang says, for the heartbeat, whether one computation has run past the
// worker's hang threshold, and which.
func (wt *watch) hang() string {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	floor, warmup := wt.timings.HangTimeout, wt.timings.WarmupHangTimeout
	if !wt.warm {
		floor = max(floor, warmup)
	}
	limit := max(floor, wt.planned)
	if !wt.since.IsZero() && time.Since(wt.since) > limit {
		return fmt.Sprintf("computing %s for %v (its limit %v)", wt.what, time.Since(wt.since).Round(time.Millisecond), limit)
	}
	return ""
}

package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/graphpipe/graphpipe/microbatch"
)

// sleeper is the executor of an emulated run: it computes nothing and
// sleeps until the times the worker's cursor plans with the plan's
// durations; a send carries when its data lands by the plan (the cursor's
// link), as a wall-clock time, and a receive waits until then, or takes
// when the message really came if that is later. Deadlines are absolute, so
// timer overshoot does not accumulate, while a message that really arrives
// late still delays the stage.
type sleeper struct{ w *Worker }

func (sleeper) begin(*iteration) error { return nil }

func (s sleeper) compute(ctx context.Context, _ *iteration, _ microbatch.Action, end float64) error {
	s.w.timeline.sleepUntil(ctx, end)
	return nil
}

func (s sleeper) send(ctx context.Context, it *iteration, a microbatch.Action, land float64) error {
	stamp := []byte(s.w.timeline.wallClock(land).Format(time.RFC3339Nano))
	for _, p := range s.w.peers(a) {
		if err := s.w.links.ep.Send(ctx, p.id, msgKey(it.n, int32(a.MB), edgeKey(a.Edge, s.w.Replica), byte(a.Dir)), stamp); err != nil {
			return err
		}
	}
	return nil
}

func (s sleeper) recv(ctx context.Context, it *iteration, a microbatch.Action) (float64, error) {
	land := 0.0
	for _, p := range s.w.peers(a) {
		msg, err := s.w.links.ep.Receive(ctx, msgKey(it.n, int32(a.MB), edgeKey(a.Edge, p.replica), byte(a.Dir)))
		if err != nil {
			return 0, err
		}
		at, err := time.Parse(time.RFC3339Nano, string(msg))
		if err != nil {
			return 0, fmt.Errorf("emulated transfer: %w", err)
		}
		land = max(land, s.w.timeline.at(at))
	}
	land = max(land, s.w.timeline.now()) // a message that came later than planned
	s.w.timeline.sleepUntil(ctx, land)
	return land, nil
}

func (s sleeper) flush(ctx context.Context, _ *iteration, end float64) error {
	s.w.timeline.sleepUntil(ctx, end)
	return nil
}

package plan

import (
	"errors"

	"github.com/graphpipe/graphpipe/microbatch"
)

// checkStaleness refuses a plan whose schedule has no flush (2bw) and
// whose pipeline is deeper than its micro-batches per batch + 1: its
// first stage would run more than a batch of forwards ahead of its update,
// reading weights two updates stale (microbatch.StalenessError).
func (p *Plan) checkStaleness() error {
	k, _ := microbatch.KindOf(p.Schedule)
	if !k.NoFlush {
		return nil
	}
	_, err := microbatch.TwoBW(p.Pipeline())
	var se *microbatch.StalenessError
	if errors.As(err, &se) {
		return planErr(se.Stage, "micro_batches", "%v", se)
	}
	return nil // another fault is the schedule's check to name
}

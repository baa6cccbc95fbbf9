package runtime

import (
	"context"

	"github.com/graphpipe/graphpipe/microbatch"
)

// goes is which iterations' go the coordinator has told its workers.
// Every stage of a flushed schedule starts an iteration together, once
// the iteration before is reported, as the simulator assumes. A schedule
// without a flush (2bw) would pay a flush there: its stages end an
// iteration at different times, the last backward reaching the first
// stage last, and the others run the next batch's first forwards and
// backwards meanwhile. So the coordinator tells each go one iteration
// ahead (before the iteration before is reported), and a worker goes on
// as soon as it has updated: the reports, the verdicts, the checkpoints
// and the evaluations still follow each iteration, and a stop asked
// during iteration n takes effect before n+2 (the go of n+1 told).
type goes struct {
	told  int  // the last iteration whose go is told
	ahead bool // tell one ahead: the schedule has no flush
}

func newGoes(job *Job) goes {
	k, _ := microbatch.KindOf(job.Plan.Schedule)
	return goes{told: job.From() - 1, ahead: k.NoFlush}
}

// untold is the first iteration from n on whose go is not told: where an
// order to stop must go.
func (g goes) untold(n int) int64 { return int64(max(n, g.told+1)) }

// sayGo tells iteration n's go, unless told, and with a schedule without
// a flush the next one's too, unless a stop is asked or the run ends.
func (c *collector) sayGo(ctx context.Context, n int) error {
	if c.goes.told < n {
		if err := c.tell(ctx, int64(n), mbGo, goOn); err != nil {
			return err
		}
		c.goes.told = n
	}
	if !c.goes.ahead || n+1 >= c.job.Steps || c.goes.told > n {
		return nil
	}
	select {
	case <-c.job.Config.Stop:
		return nil // the loop stops before n+1
	default:
	}
	if err := c.tell(ctx, int64(n+1), mbGo, goOn); err != nil {
		return err
	}
	c.goes.told = n + 1
	return nil
}

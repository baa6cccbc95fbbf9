package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/graphpipe/graphpipe/models"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/search"
)

// TestEmulationTakesThePlansTime: an emulated run's workers drive the
// ordinary loop with the sleeper, so no iteration ends before the
// simulator's prediction for the plan (every stage sleeps until its
// cursor's times, a receive until the data lands by the plan), and none
// hangs, on 1F1B, zero bubble and GPipe plans whose actions last
// milliseconds. A late wake-up delays what follows it, so iterations end
// later than planned, never earlier.
func TestEmulationTakesThePlansTime(t *testing.T) {
	g, err := models.Branchy(2, 3, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, sched := range []string{"1f1b", "zb", "gpipe"} {
		t.Run(sched, func(t *testing.T) {
			pl, err := search.Search(g, search.Options{Device: plan.Profiles["cpu"], Devices: 4, Strategy: "gpp", Schedule: sched, MicroBatch: 4})
			if err != nil {
				t.Fatal(err)
			}
			pl = pl.Scaled(0.1 / pl.Predicted.IterationS) // 100 ms an iteration
			sim, err := pl.Simulate()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := RunLocal(ctx, &Job{Run: "emu", Graph: g, Plan: pl, Steps: 3, Options: Options{Emulate: true}}, wire.NewMemory(1, wire.Faults{}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d stages, iterations %.4f s, simulated %.4f s", len(pl.Stages), res.Iters, sim.Iteration)
			for i, it := range res.Iters {
				if it < sim.Iteration-1e-6 || it > 5*sim.Iteration+1 {
					t.Errorf("iteration %d took %.4f s, the simulator says %.4f s", i, it, sim.Iteration)
				}
			}
		})
	}
}

package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/plan"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/search"
)

// elasticFlags are run's flags for runs that outlive their workers:
// restarts, re-planning, the heartbeat timeout.
type elasticFlags struct {
	restarts    int
	elastic     bool
	replaceWait time.Duration
	heartbeat   time.Duration
}

func (f *elasticFlags) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.restarts, "restarts", 0, "when a worker dies, hangs or falls silent, restart the workers up to this many times, resuming from the last checkpoint (local workers: new processes; pool:NAME: the survivors and a spare agent)")
	cmd.Flags().BoolVar(&f.elastic, "elastic", false, "with --workers pool:NAME and --restarts: when no spare agent comes within --replace-wait, re-plan for the agents left (same model, batch, data order; micro-batch when forced or given by a plan file) and resume under it; grow back at the next checkpoint when agents return")
	cmd.Flags().DurationVar(&f.replaceWait, "replace-wait", 30*time.Second, "with --elastic: how long a lost agent's replacement is waited for before re-planning")
	cmd.Flags().DurationVar(&f.heartbeat, "heartbeat-timeout", runtime.DefaultHeartbeatTimeout, "a worker or agent silent this long is lost (at least 1s)")
}

// check refuses what restarts cannot do: restart workers started elsewhere,
// re-plan without a pool to count the agents of. How many restarts and the
// heartbeat timeout are the job's settings, Job.Validate's to check; but a
// --heartbeat-timeout of 0, which the runtime would read as its default
// (runtime.Timings), is refused here.
func (f *elasticFlags) check(cmd *cobra.Command, workers workersFlag) error {
	_, pool := workers.pool()
	switch {
	case f.restarts > 0 && workers.external():
		return usagef("--restarts: workers started elsewhere (--workers external) cannot be restarted: use local workers or --workers pool:NAME")
	case f.elastic && !pool:
		return usagef("--elastic: re-planning counts the agents of a pool: it needs --workers pool:NAME")
	case f.elastic && f.restarts < 1:
		return usagef("--elastic: a re-plan is a restart: give --restarts")
	case f.replaceWait < 0:
		return usagef("--replace-wait: must be at least 0, got %v", f.replaceWait)
	case cmd.Flags().Changed("replace-wait") && !f.elastic:
		return usagef("--replace-wait: only --elastic waits for a replacement before re-planning")
	case f.heartbeat <= 0:
		return usagef("--heartbeat-timeout: must be at least %v, got %v", 2*runtime.DefaultHeartbeatEvery, f.heartbeat)
	}
	return nil
}

// replanner is --elastic's planner: plans for fewer (or more) devices of
// p's profile, with p's batch, schedule, memory and node size, and the
// micro-batch p has when the user forced it (--micro-batch, or a plan file,
// whose choice is kept). sf holds the search flags of a run given a model.
func (f *elasticFlags) replanner(g *dag.Graph, p *plan.Plan, sf *searchFlags, fromModel bool) (*supervise.Elastic, error) {
	if !f.elastic {
		return nil, nil
	}
	o := search.Options{Strategy: "gpp", Schedule: p.Schedule}
	if fromModel {
		var err error
		if o, err = sf.options(); err != nil {
			return nil, err
		}
	}
	o.Device, o.DevicesPerNode, o.MemoryLimit, o.Batch = p.Device, p.DevicesPerNode, p.MemoryLimit, p.BatchSize
	o.NoStreaming = true // the runtime does not stream weights
	if !fromModel || sf.microBatch > 0 {
		o.MicroBatch = p.MicroBatch
	}
	replan := func(devices int) (*plan.Plan, error) {
		o := o
		o.Devices = devices
		np, err := search.Search(g, o)
		if err != nil {
			return nil, err
		}
		if np.BatchSize != p.BatchSize {
			return nil, fmt.Errorf("the plan for %d devices takes batches of %d, not %d", devices, np.BatchSize, p.BatchSize)
		}
		return np, nil
	}
	return &supervise.Elastic{Replan: replan, ReplaceWait: f.replaceWait}, nil
}

// recoveriesJSON are run --json's recoveries and replans (those that
// changed plans), never null.
func recoveriesJSON(rs []supervise.Recovery) (all, replans []supervise.Recovery) {
	all, replans = []supervise.Recovery{}, []supervise.Recovery{}
	for _, r := range rs {
		all = append(all, r)
		if r.Replanned() {
			replans = append(replans, r)
		}
	}
	return all, replans
}

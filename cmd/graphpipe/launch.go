package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/supervise"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// connect dials the run's NATS server: --nats's, or an embedded one
// started here (stop shuts it down). It dials twice: the run's connection
// (heartbeats, orders, the pool), and bulk, the one the state streams
// (checkpoint shards, the final parameters) take, so that the first never
// queues behind them.
func connect(nf *natsFlags, runID string, log io.Writer) (t, bulk *wire.NATS, ns *runNATS, stop func(), err error) {
	ns, err = startNATS(nf, runID, log)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	t, err = wire.DialNATS(ns.opts)
	if err != nil {
		ns.close()
		return nil, nil, nil, nil, dialError(err)
	}
	if bulk, err = wire.DialNATS(bulkOptions(ns.opts)); err != nil {
		t.Close()
		ns.close()
		return nil, nil, nil, nil, dialError(err)
	}
	return t, bulk, ns, func() { bulk.Close(); t.Close(); ns.close() }, nil
}

// dialError words a failed dial the same for the coordinator and the
// workers: credentials the server refuses are bad input (exit 2); a server
// that does not answer is the environment's (exit 1).
func dialError(err error) error {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) {
		return inputf("--nats: %v (--nats-token, $%s or --nats-creds)", err, tokenEnv)
	}
	return fmt.Errorf("--nats: %w", err)
}

// bulkOptions are a process's options for its second connection, the one
// its state streams take (runtime.Config.Bulk): the first's, under another
// name, the first alone reporting a lost server.
func bulkOptions(o wire.NATSOptions) wire.NATSOptions {
	o.Name += " (state streams)"
	o.OnDisconnect, o.OnReconnect = nil, nil
	return o
}

// launcher is --workers's launcher: local worker processes (with wargs(i)
// their extra arguments), workers started elsewhere, or a pool's agents
// (waited for up to the job's join timeout, live by its timings).
func launcher(workers workersFlag, t wire.Transport, ns *runNATS, c runtime.Config, wargs func(int) []string, log io.Writer) (supervise.Launcher, error) {
	if pool, ok := workers.pool(); ok {
		return supervise.NewPoolLauncher(t, supervise.PoolConfig{Pool: pool, JoinTimeout: c.JoinTimeout, Log: log, Timings: c.Timings})
	}
	opts := ns.opts
	if workers.external() {
		return &supervise.ExternalLauncher{Announce: func(g *supervise.Generation) { ns.announce(log, workers, len(g.Slots), g.Run) }}, nil
	}
	return &supervise.LocalLauncher{URL: opts.URL, Env: func(n int) []string { return workerEnv(n, opts.Token) }, Args: wargs, Log: log}, nil
}

// jobFlag names the flag behind a field of a supervise.Job (a
// *runtime.JobError's Field) or of its Outputs (an *OutputError's).
func jobFlag(field string) string {
	switch field {
	case "Run":
		return "--run"
	case "Steps":
		return "--steps"
	case "Plan", "Graph":
		return "MODEL|PLAN"
	case "Options.CheckpointEvery":
		return "--checkpoint-every"
	case "Options.OnNonFinite":
		return "--on-nonfinite"
	case "Options.Init":
		return "--init"
	case "Options.Train.Selective":
		return "--selective-backprop"
	case "Config.MaxSkips":
		return "--max-skips"
	case "Config.JoinTimeout":
		return "--join-timeout"
	case "Config.Resume":
		return "--resume"
	case "Config.Timings.HeartbeatTimeout":
		return "--heartbeat-timeout"
	case "Local.Restarts":
		return "--restarts"
	case "Local.Outputs.Dump", "Dump":
		return "--dump"
	case "Local.Outputs.Profile", "Profile":
		return "--profile"
	case "Trace":
		return "--trace"
	case "Timeline":
		return "--timeline"
	}
	return field // a setting no flag sets
}

// jobError says a supervise.Job's or a run's output's refusal in terms of
// the flags: exit 2, naming the flag. A message that starts with the value
// (quoted) follows the flag as a value does: --run "a..b": ...
func jobError(err error) error {
	var je *runtime.JobError
	var oe *supervise.OutputError
	var pe *supervise.PlacementError
	var de *supervise.DeviceError
	var ee *supervise.EnvError
	switch {
	case errors.As(err, &ee):
		return inputf("%v", ee)
	case errors.As(err, &je) && strings.HasPrefix(je.Msg, `"`):
		return usagef("%s %s", jobFlag(je.Field), je.Msg)
	case errors.As(err, &je):
		return usagef("%s: %s", jobFlag(je.Field), je.Msg)
	case errors.As(err, &oe) && oe.Op == "write":
		return inputf("%s %s: cannot write: %v", jobFlag(oe.Field), oe.Path, cause(oe.Err))
	case errors.As(err, &oe) && oe.Op == "mkdir":
		return inputf("%s %s: %v", jobFlag(oe.Field), oe.Path, oe.Err)
	case errors.As(err, &oe):
		return fmt.Errorf("%s %s: %w", jobFlag(oe.Field), oe.Path, oe.Err)
	case errors.As(err, &pe):
		return inputf("--workers pool:%s: %s", pe.Pool, pe.Reason())
	case errors.As(err, &de):
		return inputf("--workers pool:%s: %s", de.Pool, de.Reason())
	case runtime.IsDataError(err):
		return inputf("%v", err)
	}
	return nil
}

// workerEnv is the environment of n local worker processes: this one's,
// the server's token, and, unless the user set GOMAXPROCS, an even share of
// this host's cores each: with all of them each, a pipeline's stages, busy
// at once, preempt one another and the server relaying their messages.
// Likewise, unless the user set GOMEMLIMIT, an even share of
// profile.HostShare of the host's memory each, as a soft limit: a Go heap
// grows to twice its live size between collections, and workers without it
// were killed for memory (both measured in BENCHMARKS.md's history).
func workerEnv(n int, token string) []string {
	env := append(os.Environ(), tokenEnv+"="+token)
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", max(1, goruntime.NumCPU()/n)))
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		if host := hostMemory(); host > 0 {
			env = append(env, fmt.Sprintf("GOMEMLIMIT=%d", int64(profile.HostShare*float64(host))/int64(n)))
		}
	}
	return env
}

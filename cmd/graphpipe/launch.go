package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/graphpipe/graphpipe/profile"
	"github.com/graphpipe/graphpipe/runtime"
	"github.com/graphpipe/graphpipe/runtime/wire"
)

// connect dials the run's NATS server: --nats's, or an embedded one
// started here (stop shuts it down).
func connect(nf *natsFlags, runID string, log io.Writer) (*wire.NATS, *runNATS, func(), error) {
	ns, err := startNATS(nf, runID, log)
	if err != nil {
		return nil, nil, nil, err
	}
	t, err := wire.DialNATS(ns.opts)
	if err != nil {
		ns.close()
		return nil, nil, nil, inputf("--nats: %v", err)
	}
	return t, ns, func() { t.Close(); ns.close() }, nil
}

// checkWorkers checks --workers: local, external or pool:NAME (which needs
// --nats, the server the pool's agents are on).
func checkWorkers(workers, natsURL string) error {
	pool, isPool := strings.CutPrefix(workers, "pool:")
	switch {
	case workers == "local" || workers == "external":
		return nil
	case !isPool:
		return usagef(`--workers: must be "local", "external" or "pool:NAME", got %q`, workers)
	case natsURL == "":
		return usagef("--workers %s: needs --nats, the server the pool's agents are on", workers)
	}
	if err := runtime.CheckPoolName(pool); err != nil {
		return usagef("--workers %s: %v", workers, err)
	}
	return nil
}

// launcher is --workers's launcher: local worker processes (with wargs(i)
// their extra arguments), workers started elsewhere, or a pool's agents.
func launcher(workers string, t wire.Transport, ns *runNATS, joinTimeout time.Duration, wargs func(int) []string, log io.Writer) (runtime.Launcher, error) {
	if pool, ok := strings.CutPrefix(workers, "pool:"); ok {
		return runtime.NewPoolLauncher(t, pool, joinTimeout, log)
	}
	opts := ns.opts
	if workers == "external" {
		return &runtime.ExternalLauncher{Announce: func(n int, run string) { ns.announce(log, workers, n, run) }}, nil
	}
	return &runtime.LocalLauncher{URL: opts.URL, Env: func(n int) []string { return workerEnv(n, opts.Token) }, Args: wargs, Log: log}, nil
}

// jobFlags names the flag behind each field of a runtime.Job.
var jobFlags = map[string]string{
	"Run": "--run", "Steps": "--steps", "Plan": "MODEL|PLAN", "Graph": "MODEL|PLAN",
	"Options.CheckpointEvery": "--checkpoint-every", "Options.OnNonFinite": "--on-nonfinite", "Options.MaxSkips": "--max-skips",
	"Options.JoinTimeout": "--join-timeout", "Options.Init": "--init", "Options.Resume": "--resume",
	"Local.Restarts": "--restarts", "Local.Outputs.Dump": "--dump", "Local.Outputs.Profile": "--profile",
	"Dump": "--dump", "Trace": "--trace", "Timeline": "--timeline", "Profile": "--profile",
}

// jobError says a runtime.Job's or a run's output's refusal in terms of the
// flags: exit 2, naming the flag.
func jobError(err error) error {
	var je *runtime.JobError
	var oe *runtime.OutputError
	var pe *runtime.PlacementError
	switch {
	case errors.As(err, &je):
		return usagef("%s: %s", jobFlags[je.Field], je.Msg)
	case errors.As(err, &oe) && oe.Op == "write":
		return inputf("%s %s: cannot write: %v", jobFlags[oe.Field], oe.Path, cause(oe.Err))
	case errors.As(err, &oe) && oe.Op == "mkdir":
		return inputf("%s %s: %v", jobFlags[oe.Field], oe.Path, oe.Err)
	case errors.As(err, &oe):
		return fmt.Errorf("%s %s: %w", jobFlags[oe.Field], oe.Path, oe.Err)
	case errors.As(err, &pe):
		return inputf("--workers pool:%s: %s", pe.Pool, pe.Reason())
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

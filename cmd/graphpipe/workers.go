package main

import (
	"strings"

	"github.com/graphpipe/graphpipe/runtime/supervise"
)

// launcherKind is who starts a run's workers, as --workers says.
type launcherKind int

const (
	localWorkers    launcherKind = iota // local: one process per device, started here
	externalWorkers                     // external: started elsewhere, waited for
	poolWorkers                         // pool:NAME: a pool's agents
	taskWorkers                         // tasks: the tasks an environment started
)

// workersFlag is --workers parsed once (parseWorkers): the launcher's kind
// and, for a pool, its name. Everything after the flags are read asks it,
// never the string, so that a new kind is one case here.
type workersFlag struct {
	kind launcherKind
	name string // a pool's NAME
}

// parseWorkers reads --workers: local, external, tasks or pool:NAME (a
// name the pool's agents can take). A bad value is a usage error (exit 2)
// naming the flag.
func parseWorkers(s string) (workersFlag, error) {
	switch s {
	case "local":
		return workersFlag{kind: localWorkers}, nil
	case "external":
		return workersFlag{kind: externalWorkers}, nil
	case "tasks":
		return workersFlag{kind: taskWorkers}, nil
	}
	pool, ok := strings.CutPrefix(s, "pool:")
	if !ok {
		return workersFlag{}, usagef(`--workers: must be "local", "external", "pool:NAME" or "tasks", got %q`, s)
	}
	if err := supervise.CheckPoolName(pool); err != nil {
		return workersFlag{}, usagef("--workers %s: %v", s, err)
	}
	return workersFlag{kind: poolWorkers, name: pool}, nil
}

// String is the value as the user writes it (run --json's "workers").
func (w workersFlag) String() string {
	switch w.kind {
	case externalWorkers:
		return "external"
	case poolWorkers:
		return "pool:" + w.name
	case taskWorkers:
		return "tasks"
	}
	return "local"
}

func (w workersFlag) local() bool    { return w.kind == localWorkers }
func (w workersFlag) external() bool { return w.kind == externalWorkers }
func (w workersFlag) tasks() bool    { return w.kind == taskWorkers }

// pool says whether the workers are a pool's agents, and which pool.
func (w workersFlag) pool() (string, bool) { return w.name, w.kind == poolWorkers }

// checkNATS refuses a pool without --nats, the server its agents are on.
func (w workersFlag) checkNATS(natsURL string) error {
	if _, ok := w.pool(); ok && natsURL == "" {
		return usagef("--workers %s: needs --nats, the server the pool's agents are on", w)
	}
	return nil
}

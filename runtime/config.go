package runtime

import (
	"time"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Config is what of a run stays in one process: the coordinator's settings
// and hooks, and a worker process's device. Nothing of it is sent, but the
// coordinator's Timings, which its workers are given with their stages.
// The runtime keeps no configuration in package variables: tests set
// timings and hooks here.
type Config struct {
	// Stop, once closed, ends the run after the iteration in flight, with
	// a checkpoint there when CheckpointDir is set: a *StoppedError.
	Stop <-chan struct{}
	// Skipped, if set, is told of each step whose update was skipped.
	Skipped func(iter int64, why string)
	// OnEval hears each evaluation as it ends.
	OnEval func(stage.EvalResult)
	// OnBackprop, with selective backprop, hears each iteration's samples
	// that had a backward pass, before its progress.
	OnBackprop func(iter int64, samples int)
	// CheckpointDir is where the coordinator writes the checkpoints
	// (Options.CheckpointEvery).
	CheckpointDir string
	// Resume starts from a checkpoint: its step, parameters and optimizer
	// state (or, with Options.Init, initial values at step 0).
	Resume *Checkpoint
	// MaxSkips bounds the steps skipped in a row (Options.OnNonFinite
	// skip); 0: 10.
	MaxSkips int
	Gen      uint32 // the generation: 1 (0 too), then one more per restart
	// JoinTimeout > 0 bounds the coordinator's wait for its workers to
	// join; on a worker, how long it waits for its stage while it hears
	// no coordinator of its run (a *JoinError).
	JoinTimeout time.Duration
	// Agents, where a launcher placed the workers on a pool's agents, is
	// the agent on each worker id: a hello for a worker id from another
	// agent (one whose confirmation came after its offer was taken back)
	// is not taken, and the coordinator waits for the placed one. nil:
	// any.
	Agents []string
	// Timings are the heartbeat, hang and confirmation timings (zero
	// fields: the defaults). The coordinator sends its own to its workers.
	Timings Timings

	// Device runs a worker's ops on a GPU (package cuda); nil: the CPU.
	Device *cuda.Device
	// Precision is what a worker's matrix products compute in on Device:
	// "" or "fp32", or "bf16" (stage.Executor.SetPrecision).
	Precision string
	// Attention is how attention runs on Device: "" or "unfused", or
	// "fused" (stage.Executor.SetAttention).
	Attention string
	// NoIPC keeps a worker process off same-host device links: its peers
	// send it bytes over NATS, and it sends them bytes (ipc.go).
	NoIPC bool
	// KillPoints is a test hook of a worker process (KillEnv's format):
	// the points at which it exits or hangs.
	KillPoints string

	// Bulk, when set, is the connection the process's state streams go
	// over (checkpoint shards, the final parameters, a share to resume
	// from): one of their own, so that heartbeats and control messages
	// never queue behind them. nil: the run's transport (in a generation
	// of their own all the same).
	Bulk wire.Transport
	// StreamCheckpoints has a worker stream its checkpoint shards to the
	// coordinator even where it sees the checkpoint directory (StreamEnv).
	StreamCheckpoints bool
}

// StreamEnv, set to 1 in a worker's environment, sets its
// Config.StreamCheckpoints: the coordinator writes its shards, whether or
// not the worker sees the checkpoint directory.
const StreamEnv = "GRAPHPIPE_STREAM_CHECKPOINTS"

package runtime

import (
	"context"
	"encoding/json"

	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// The control protocol: the keys and messages the coordinator
// (coordinator.go) and its workers (serve.go) exchange on the control
// endpoint.
//
// Control traffic runs on edge -1 in the stage traffic's generation, at an
// even generation number below it: the coordinator is stage -1, a worker is
// known by a random id until it is given a stage. A restart starts a new
// generation, whose frames never mix with an older one's.
const (
	ctlGenOffset = 1 << 16
	ctlEdge      = -1
	coordinator  = -1
	mbHello      = 0
	mbAssign     = 1
	mbReport     = 2
	mbParams     = 3
	mbError      = 4
	mbGo         = 5
	mbCkpt       = 6
	mbResume     = 7 // unused: a share to resume from streams (stream.go); the number is not reused
	mbEval       = 8
	mbVerdict    = 9       // step or skip the update of an iteration (OnNonFinite skip)
	mbStopState  = 10      // a stage's state, handed over as the run stops
	mbPeers      = 11      // every worker's linkID, once all have joined (ipc.go)
	reportStride = 1 << 20 // report keys: iter·reportStride + stage
)

// Every control message's key names its sender (the iteration field holds a
// worker id or a stage), since an endpoint keys messages, not senders.

type hello struct {
	Worker int32  `json:"worker"`
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	Device string `json:"device,omitempty"` // where it computes: "cpu", or the GPU's name
	BLAS   string `json:"blas,omitempty"`   // on the cpu, what computes its matrix products (tensor.BLAS)
	// Slot, for an agent a launcher placed, is the worker id it was
	// offered; nil: the coordinator's next free one (join order).
	Slot  *int   `json:"slot,omitempty"`
	Agent string `json:"agent,omitempty"` // the agent's id in its pool
	// PlanDevice, for a task an environment started (Slurm, torchrun, a
	// Kubernetes Indexed Job), is the plan's device it stands for; the
	// coordinator gives it that device's worker id.
	PlanDevice *int `json:"plan_device,omitempty"`
	// Kind is the device profile the worker computes as (graphpipe worker
	// --device-profile, an agent's advertised profile), "" if not said: on
	// a plan of several device kinds it takes a stage of its kind only.
	Kind string `json:"kind,omitempty"`
	// Link is who it is for same-host links: its host and device (ipc.go).
	Link *linkID `json:"link,omitempty"`
}

type assignment struct {
	Gen     uint32          `json:"gen"`
	Stage   int             `json:"worker"` // the worker id: a (stage, replica)
	Model   json.RawMessage `json:"model"`
	Plan    json.RawMessage `json:"plan"`
	Options Options         `json:"options"`
	Timings Timings         `json:"timings"` // the coordinator's Config.Timings
	Steps   int             `json:"steps"`
	Workers int             `json:"workers"`
	// Checkpoint is where the checkpoints go, for the workers that see it
	// to write their shards there (shard.go); nil without checkpoints.
	Checkpoint *checkpointTarget `json:"checkpoint,omitempty"`
}

// Report is one stage's account of one iteration.
type Report struct {
	Stage int   `json:"stage"`
	Iter  int64 `json:"iter"`
	Loss  Float `json:"loss"` // NaN and ±Inf as strings
	// NonFinite says where the stage found a value that is not finite this
	// iteration (its loss, a gradient, a parameter), "" if none.
	NonFinite string  `json:"nonfinite,omitempty"`
	Secs      float64 `json:"seconds"`
	Events    []Event `json:"events"`
	// GradNorm is the global gradient norm before clipping (with
	// clipping, and while it is finite: JSON has no NaN).
	GradNorm float64 `json:"grad_norm,omitempty"`
	// OpSeconds, with the last iteration's report: each op's accumulated
	// forward and backward seconds over the run.
	OpSeconds map[string][2]float64 `json:"op_seconds,omitempty"`
	// DeviceCalls, with the last iteration's report of a worker on a GPU
	// (or the emulator): what it asked of the device in its last iteration
	// whose update was done (Worker.DeviceCalls).
	DeviceCalls *cuda.Counts `json:"device_calls,omitempty"`
	// Links is what the worker's ends of its edges took in the iteration
	// (Worker.Links).
	Links []LinkTime `json:"links,omitempty"`
	// Memory, with the last iteration's report: what the worker holds of
	// its stage's state (Worker.Memory).
	Memory *WorkerMemory `json:"memory,omitempty"`
	// Backprop, with selective backprop, is how many of the batch's samples
	// had a backward pass (every stage knows it).
	Backprop int `json:"backprop,omitempty"`
}

func sendJSON(ctx context.Context, ep *wire.Endpoint, peer int32, iter int64, mb int32, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return ep.Send(ctx, peer, msgKey(iter, mb, ctlEdge, 'a'), b)
}

// What the coordinator says before each iteration (mbGo) and, when a step
// whose values are not finite is to be skipped, after each (mbVerdict).
const (
	goOn          = ""           // run the iteration
	goStop        = "stop"       // stop here: the run was asked to stop
	goStopAndSave = "stop+state" // stop here, handing over the state first
	goAbort       = "abort"      // leave now: the run has failed
	verdictStep   = "step"       // step the optimizer
	verdictSkip   = "skip"       // skip the update, on every stage
)

package runtime

import (
	"github.com/graphpipe/graphpipe/runtime/wire"
	"github.com/graphpipe/graphpipe/stage"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Result is a finished run.
type Result struct {
	Losses []float64                        // per iteration
	Params map[string]*stage.Value[float32] // every stage's, by name
	Stats  []wire.Stats                     // per stage endpoint
	Iters  []float64                        // measured seconds per iteration
	Events [][]Event                        // per stage, the last iteration's timeline
	Ops    []map[string][2]float64          // per stage: each op's forward and backward seconds
	// DeviceCalls is, per stage, what its replica 0 asked of its device in
	// its last iteration (nil for a stage on the CPU; nil when none is on a
	// device): Worker.DeviceCalls.
	DeviceCalls []*cuda.Counts
	// Devices says where each worker (by id) computed: "cpu" or a GPU's
	// name (Coordinate only).
	Devices []string
	// Joined says, by worker id, who each worker was: its host, pid,
	// device and agent (Coordinate only).
	Joined []Joined
	// Skipped lists the iterations whose update was skipped, their values
	// not being finite (Options.OnNonFinite skip; Coordinate only).
	Skipped []int
	// Evals is every evaluation of the run (Options.Data's evaluation set).
	Evals []stage.EvalResult
	// GradNorms, with clipping, is each iteration's global gradient norm
	// before clipping (what clip_grad_norm_ returns; 0 where not finite).
	GradNorms []float64
	// Links is, by worker id, what its ends of the edges took in the last
	// iteration (EdgeTimes sums them by edge).
	Links [][]LinkTime
	// Memory is, by worker id, what each holds of its stage's state at the
	// end (nil for an emulated run).
	Memory []WorkerMemory
	// Backprop is, with selective backprop (Options.Train.Selective), each
	// iteration's samples that had a backward pass; nil without.
	Backprop []int
}

// Joined is a worker that joined a run.
type Joined struct {
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	Device string `json:"device"`
	BLAS   string `json:"blas,omitempty"`  // on the cpu, what computed its matrix products
	Agent  string `json:"agent,omitempty"` // its id in the pool it came from
	link   linkID // who it is for same-host links (ipc.go)
}

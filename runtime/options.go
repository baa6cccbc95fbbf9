package runtime

import "github.com/graphpipe/graphpipe/stage"

// Options are how a run trains: what every worker is sent with its stage,
// whole (every field travels as JSON). What stays in one process is its
// Config.
type Options struct {
	Train   stage.TrainOptions
	Emulate bool // wait the plan's times instead of computing
	// OnNonFinite is what a step whose loss or gradients are not finite
	// does: NonFiniteStop ("" too) or NonFiniteSkip, up to Config.MaxSkips
	// steps in a row.
	OnNonFinite string `json:"on_nonfinite,omitempty"`
	// CheckpointEvery > 0 checkpoints after every that many iterations into
	// Config.CheckpointDir (the coordinator writes it).
	CheckpointEvery int `json:"checkpoint_every,omitempty"`
	Start           int `json:"start,omitempty"` // the first iteration, set from Config.Resume
	// Init says Config.Resume holds initial values (--init) at step 0:
	// workers wait for their share before the first iteration as they do
	// to resume.
	Init bool `json:"init,omitempty"`
	// Data is the run's own data and evaluation set; nil: synthetic data.
	Data *DataSpec `json:"data,omitempty"`
	// NoIPC sends every edge's tensors over NATS as bytes, even between
	// workers whose devices share a host (ipc.go).
	NoIPC bool `json:"no_ipc,omitempty"`
}

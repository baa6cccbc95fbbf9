package stage

import (
	"context"
	"fmt"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// Backend is where an executor computes and where its training state lives:
// the parameters, their gradients, the buffers, the optimizer's state and
// the values of the micro-batches in flight. It runs the pieces of a step on
// that state (step.go): the gradients all-reduced, the finite check, the
// squared norms, the clip, the optimizer's update, the clear, the buffers'
// snapshot and restore, the step's loss, and the state brought to the host
// for a checkpoint or an export.
//
// CPU and CUDA make the two backends. An executor is given one when it is
// made (NewExecutor) and keeps it; a backend serves one executor. The
// executor's Params, Grads and Buffers name the state on every backend: on
// the CPU they are the state; on CUDA they are the host's copies, current
// after HostState (fetch) and written back by LoadState (changed): the
// state itself stays on the device (backend_cuda.go).
type Backend interface {
	// Name is "cpu" or "cuda".
	Name() string
	// bind ties the backend to e and makes the kernels of e's ops.
	bind(e *Executor) (map[int]kernel.Kernel[float32], error)
	passes
	steps
}

// passes is how a backend holds the values of the micro-batches in flight
// (executor.go calls it).
type passes interface {
	// begin starts micro-batch mb's Forward; resume goes back to it for a
	// Backward or Weights.
	begin(mb int) error
	resume(mb int)
	// outputs gives the host the Forward outputs it reads: those read
	// outside the stage and the loss (with eval, what an evaluation's
	// accuracy reads too).
	outputs(out map[string]*Value[float32], eval bool) error
	// inputGrads gives the host a Backward's gradients of what was fed.
	inputGrads(out map[string]*Value[float32]) error
	// detach makes an evaluation's outputs outlive its micro-batch.
	detach(out map[string]*Value[float32])
	// newGrad is a gradient buffer of a value in flight.
	newGrad(shape []int) *Value[float32]
	// shed frees what micro-batch mb holds but its feeds (Recompute);
	// release frees all it holds.
	shed(mb int, feeds map[string]*Value[float32]) error
	release(mb int) error
	// waitOp waits for the op just launched to end (Executor.SyncOps).
	waitOp() error
	// precision sets what the matrix products compute in; attention
	// whether attention runs fused (SetAttention).
	precision(p kernel.Precision) error
	attention(fused bool) error
	// close gives back what the backend holds; it must not run again.
	close() error
}

// steps is how a backend runs the pieces of a step (step.go calls it, in
// the order EndStep and ApplyStep give).
type steps interface {
	// setOptimizer makes o's optimizer (the catalogue's, o checked).
	setOptimizer(o TrainOptions) error
	// keepLoss keeps a training Forward's loss v as the step's slot-th;
	// stepLosses gives the step's first n, by slot (on a device they stay
	// there until the step reads them).
	keepLoss(slot int, v *Value[float32]) error
	stepLosses(n int) ([]float32, error)
	// allReduce sums the gradients over the stage's replicas through c
	// (of a sharded stage, its shard's: ShardComm.ReduceScatter).
	allReduce(ctx context.Context, c StepComm) error
	// overlapGrads starts a pass that hands n buckets of the gradients to
	// a BucketComm (overlap.go): the host gradients the comm reads and
	// writes, in parameter-name order; bucketReady brings spans of them
	// there, and says how to wait for that (nil: they are there);
	// bucketsQueued ends the pass's buckets.
	overlapGrads(n int) ([]*Value[float32], error)
	bucketReady(spans [][2]int64) (func() error, error)
	bucketsQueued()
	// gather hands a sharded stage's updated shard of the parameters to
	// its other replicas and takes theirs (ShardComm.AllGather), after
	// update.
	gather(ctx context.Context, c StepComm) error
	// gatherLate starts gather and returns how to wait for its end
	// (nil: nothing to wait for; gather_late.go)
	gatherLate(ctx context.Context, c StepComm) (func() error, error)
	// gatherBuckets starts it in buckets, each op's forward waiting for
	// its own (gather_late.go); nil: gathered whole
	gatherBuckets(ctx context.Context, gc GatherBucketComm, bs []Bucket, step int) (*lateGather, error)
	// gradsFinite says whether every gradient is finite (one read of
	// them); firstNonFinite is its slow path (Executor.FirstNonFinite).
	gradsFinite() (bool, error)
	firstNonFinite() (op, what string, err error)
	// squaredNorms is each gradient's ‖g‖² by parameter name (clip.go).
	squaredNorms() (map[string]float64, error)
	// scaleGrads multiplies every gradient by c.
	scaleGrads(c float32) error
	// update steps the optimizer at rate.
	update(rate float64) error
	// clearGrads zeroes the gradients for the next step.
	clearGrads() error
	// fetchGrads brings the gradients to the host's Grads (the slow path
	// of the finite check; tests).
	fetchGrads() error
	// keepBuffers copies the buffers as a step begins; restoreBuffers puts
	// them back (a skipped step).
	keepBuffers() error
	restoreBuffers() error
	// changed says the host wrote these parameters and buffers (nil: all
	// of them): they are the state now.
	changed(names []string)
	// fetch brings the parameters and buffers to the host.
	fetch() error
	// optimizerState is the optimizer's state and step (Stateful);
	// loadOptimizerState restores it.
	optimizerState() (map[string][]float32, int, error)
	loadOptimizerState(st map[string][]float32, step int) error
	// stateBytes is what the optimizer's state holds, wherever it is.
	stateBytes() int64
}

// CPU is the backend that computes on the host's cores: the state is the
// executor's Params, Grads and Buffers.
func CPU() Backend { return &cpuBackend{} }

// CUDA is the backend that computes on GPU d (see backend_cuda.go for
// where each piece of the state lives).
func CUDA(d *cuda.Device) Backend { return &cudaBackend{d: d} }

// DeviceBackend is CUDA(d), or CPU() when d is nil: where a worker given
// an optional device computes.
func DeviceBackend(d *cuda.Device) Backend {
	if d == nil {
		return CPU()
	}
	return CUDA(d)
}

// oneBackend is the backend of NewExecutor's optional argument: CPU when
// none (or nil) is given.
func oneBackend(on []Backend) (Backend, error) {
	switch {
	case len(on) > 1:
		return nil, fmt.Errorf("stage: an executor runs on one backend, got %d", len(on))
	case len(on) == 0 || on[0] == nil:
		return CPU(), nil
	}
	return on[0], nil
}

package stage

import (
	"context"
	"fmt"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// cudaBackend computes on a GPU, where the training state lives from the
// first step to the last (devState, residency.go; devTrain, device_state.go):
//
//   - the parameters are uploaded once, from the host's Params and Buffers
//     (the seed's values, --init, a checkpoint: LoadState), before the
//     first pass that reads them, and again only for what the host writes
//     later (LoadState);
//   - the gradients accumulate on the device over an iteration's
//     micro-batches, in one flat buffer in parameter-name order; they come
//     to the host only to be all-reduced over a stage's replicas (one copy
//     down and one up, through pinned staging) and on the finite check's
//     slow path;
//   - the finite check and the squared norms of clipping are reduced on the
//     device and come down with the step's losses in one copy, once a
//     step; the clip, the optimizer's update (in the host optimizer's
//     arithmetic), the clear and the buffers' snapshot and restore run
//     there;
//   - the host's Params and Buffers are brought up to date by fetch
//     (HostState: a checkpoint, a stop, a dump, an export, the end of a
//     run), the optimizer's state by OptimizerState.
//
// A steady-state step of a stage that sends nothing (one stage, one
// replica) waits for the device once: for the readback.
type cudaBackend struct {
	d   *cuda.Device
	e   *Executor
	dev *devState
	// host, where the optimizer is offloaded (OffloadOptimizer), steps on
	// the host: the pieces of a step after the passes are its (offload.go)
	host *offload
	// waits, during a pass that hands buckets to a BucketComm, is its
	// event waiter's queue (overlap_device.go)
	waits chan eventWait
}

func (b *cudaBackend) Name() string { return "cuda" }

func (b *cudaBackend) bind(e *Executor) (map[int]kernel.Kernel[float32], error) {
	if b.e != nil {
		return nil, fmt.Errorf("stage: a backend serves one executor")
	}
	dev := newDevState(b.d, e)
	kernels := make(map[int]kernel.Kernel[float32], len(e.ops))
	for _, i := range e.ops {
		k, err := kernel.NewGPU(e.g, i, b.d, dev, &e.devErr, &e.ctx)
		if err != nil {
			return nil, err
		}
		kernels[i] = k
	}
	b.e, b.dev = e, dev
	return kernels, nil
}

// run runs f on the device with the stage's state ready (allocated, and
// what the host wrote uploaded).
func (b *cudaBackend) run(f func(s *kernel.Scope, t *devTrain)) error {
	return kernel.OnDevice(b.d, b.dev, func(s *kernel.Scope) {
		b.dev.train.ready(s)
		if s.Err() == nil {
			f(s, b.dev.train)
		}
	})
}

// begin makes the state ready and starts mb's residency.
func (b *cudaBackend) begin(mb int) error {
	if err := b.run(func(*kernel.Scope, *devTrain) {}); err != nil {
		return err
	}
	b.dev.begin(mb)
	b.dev.train.read = nil // a pass changes the gradients or the losses: a readback made before is stale
	return nil
}

func (b *cudaBackend) resume(mb int) {
	b.dev.use(mb)
	b.dev.train.read = nil
}

// outputs downloads, into pinned staging memory, what leaves the stage:
// the outputs read outside it; with eval, the loss and its inputs (in
// training the loss stays on the device: keepLoss).
// In training, the outputs the worker keeps on the device (KeepOnDevice)
// are lent to it instead (device_links.go).
func (b *cudaBackend) outputs(out map[string]*Value[float32], eval bool) error {
	return b.dev.fetch(out, func(name string) bool {
		if !eval && b.dev.keepOut[name] && b.dev.lend(out[name]) {
			return false
		}
		return b.dev.external[name] && (eval || name != b.dev.loss) || eval && b.e.lossReads(name)
	}, true)
}

// inputGrads downloads the gradients of what was fed, but those the worker
// keeps on the device, which are lent to it.
func (b *cudaBackend) inputGrads(out map[string]*Value[float32]) error {
	return b.dev.fetch(out, func(name string) bool {
		return !(b.dev.keepGrad[name] && b.dev.lend(out[name]))
	}, false)
}

// detach copies an evaluation's outputs out of their staging memory, which
// goes back with the micro-batch.
func (b *cudaBackend) detach(out map[string]*Value[float32]) {
	for name, v := range out {
		out[name] = v.Clone()
	}
}

// newGrad is shape only: the gradient lives on the device.
func (b *cudaBackend) newGrad(shape []int) *Value[float32] {
	return &Value[float32]{Shape: append([]int(nil), shape...)}
}

func (b *cudaBackend) shed(mb int, feeds map[string]*Value[float32]) error {
	keep := make(map[*Value[float32]]bool, len(feeds))
	for _, v := range feeds {
		keep[v] = true
	}
	return b.dev.shed(mb, keep)
}

func (b *cudaBackend) release(mb int) error { return b.dev.release(mb) }

func (b *cudaBackend) waitOp() error { return b.d.Sync() }

func (b *cudaBackend) attention(fused bool) error {
	b.dev.how.Fused = fused
	return nil
}

func (b *cudaBackend) precision(p kernel.Precision) error {
	b.dev.how.Precision = p
	return nil
}

// close brings the state to the host (the end of a run: State is then
// current) and frees it and the tables; the executor has released its
// micro-batches.
func (b *cudaBackend) close() error {
	var err error
	if b.dev.train.allocated {
		err = b.fetch()
	}
	if ferr := b.dev.free(); err == nil {
		err = ferr
	}
	return err
}

func (b *cudaBackend) setOptimizer(o TrainOptions) error {
	if b.host != nil {
		return b.host.setOptimizer(o)
	}
	opt, err := NewOptimizer(o)
	if err != nil {
		return err
	}
	switch opt.(type) {
	case *SGD, *Adam:
	default:
		return fmt.Errorf("stage: the CUDA backend has no device step for optimizer %q", o.Optimizer)
	}
	b.dev.train.opt = devOptim{spec: opt}
	return nil
}

func (b *cudaBackend) keepLoss(slot int, v *Value[float32]) error {
	return b.run(func(s *kernel.Scope, t *devTrain) { t.keepLoss(s, b.dev.cur, slot, v) })
}

// stepLosses are the losses the step's readback brought (readStep).
func (b *cudaBackend) stepLosses(n int) ([]float32, error) {
	var r *readback
	err := b.run(func(s *kernel.Scope, t *devTrain) { r = t.readStep(s) })
	if err != nil {
		return nil, err
	}
	if len(r.losses) < n {
		return nil, fmt.Errorf("stage: %d losses kept on the device, the step has %d", len(r.losses), n)
	}
	return r.losses[:n], nil
}

// allReduce hands the gradients to c through pinned staging, unless c says
// the stage has no replicas (Replicas): then they stay where they are. The
// ring runs with the device free (workers of one process may share it, and
// a replica's ring waits for the others' passes); where the buckets came
// down during the pass (Overlapped), c waits for their rings instead.
func (b *cudaBackend) allReduce(ctx context.Context, c StepComm) error {
	if b.host != nil {
		return b.hostAllReduce(ctx, c)
	}
	if r, ok := c.(Replicated); ok && r.Replicas() < 2 {
		return nil
	}
	overlapped := b.e.Overlapped()
	var grads []*Value[float32]
	err := b.run(func(s *kernel.Scope, t *devTrain) {
		if overlapped {
			grads = t.overlapViews()
			return
		}
		grads = t.downForRing(s)
	})
	if err != nil || grads == nil {
		return err
	}
	if v := b.e.shard; v != nil {
		err = reduceScatter(ctx, c, grads, v.s)
	} else {
		err = c.AllReduce(ctx, grads)
	}
	if err != nil {
		return err
	}
	return b.run(func(s *kernel.Scope, t *devTrain) { t.upSums(s, !overlapped) })
}

// gather is a sharded stage's all-gather of its updated parameters,
// through the pinned staging, the device free during the ring.
func (b *cudaBackend) gather(ctx context.Context, c StepComm) error {
	if b.e.shard == nil || b.e.shard.s.Count < 2 {
		return nil
	}
	var params []*Value[float32]
	if err := b.run(func(s *kernel.Scope, t *devTrain) { params = t.downShard(s) }); err != nil || params == nil {
		return err
	}
	if err := allGather(ctx, c, params, b.e.shard.s); err != nil {
		return err
	}
	return b.run(func(s *kernel.Scope, t *devTrain) { t.upGathered(s) })
}

// gradsFinite reads the squared norms: their float64 sum is finite exactly
// when every value is.
func (b *cudaBackend) gradsFinite() (bool, error) {
	if b.host != nil {
		return b.host.gradsFinite()
	}
	sq, err := b.squaredNorms()
	if err != nil {
		return false, err
	}
	for _, v := range sq {
		if !isFinite(v) {
			return false, nil
		}
	}
	return true, nil
}

// firstNonFinite brings the state and the gradients to the host and scans
// them there: the slow path, taken only when a value is not finite.
func (b *cudaBackend) firstNonFinite() (op, what string, err error) {
	if b.host != nil {
		return b.hostFirstNonFinite()
	}
	if err := b.run(func(s *kernel.Scope, t *devTrain) { t.fetch(s); t.fetchGrads(s) }); err != nil {
		return "", "", err
	}
	op, what = b.e.scanNonFinite()
	return op, what, nil
}

func (b *cudaBackend) squaredNorms() (map[string]float64, error) {
	if b.host != nil {
		return b.host.squaredNorms()
	}
	var r *readback
	if err := b.run(func(s *kernel.Scope, t *devTrain) { r = t.readStep(s) }); err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(r.squares))
	for k, name := range b.dev.train.pl.names {
		out[name] = r.squares[k]
	}
	return out, nil
}

func (b *cudaBackend) scaleGrads(c float32) error {
	if b.host != nil { // applied in the host's fused update
		b.host.scale, b.host.scaled = c, c != 1
		return nil
	}
	if c == 1 {
		return nil
	}
	return b.run(func(s *kernel.Scope, t *devTrain) { t.scale(s, c) })
}

func (b *cudaBackend) update(rate float64) error {
	if b.host != nil {
		return b.hostUpdate(rate)
	}
	return b.run(func(s *kernel.Scope, t *devTrain) { t.update(s, rate) })
}

func (b *cudaBackend) clearGrads() error {
	if b.host != nil {
		return b.hostClearGrads()
	}
	return b.run(func(s *kernel.Scope, t *devTrain) { t.clear(s) })
}

func (b *cudaBackend) fetchGrads() error {
	return b.run(func(s *kernel.Scope, t *devTrain) { t.fetchGrads(s) })
}

func (b *cudaBackend) keepBuffers() error {
	return b.run(func(s *kernel.Scope, t *devTrain) { t.keepBuffers(s) })
}

func (b *cudaBackend) restoreBuffers() error {
	return b.run(func(s *kernel.Scope, t *devTrain) { t.restoreBuffers(s) })
}

// changed notes what the host wrote; it is uploaded before the device next
// reads the state.
func (b *cudaBackend) changed(names []string) { b.dev.train.changed(names) }

// fetch brings the parameters and buffers to the host when the device's
// are newer.
func (b *cudaBackend) fetch() error {
	return b.run(func(s *kernel.Scope, t *devTrain) { t.fetch(s) })
}

func (b *cudaBackend) optimizerState() (map[string][]float32, int, error) {
	if b.host != nil {
		return b.host.optimizerState()
	}
	var st map[string][]float32
	var n int
	err := b.run(func(s *kernel.Scope, t *devTrain) { st, n = t.optimizerState(s) })
	return st, n, err
}

func (b *cudaBackend) loadOptimizerState(st map[string][]float32, step int) error {
	if b.host != nil {
		return b.host.loadOptimizerState(st, step)
	}
	var lerr error
	err := b.run(func(s *kernel.Scope, t *devTrain) { lerr = t.loadOptimizerState(s, st, step) })
	if lerr != nil {
		return lerr
	}
	return err
}

// stateBytes is what the optimizer's state holds: on the device, or on the
// host where it is offloaded.
func (b *cudaBackend) stateBytes() int64 {
	if b.host != nil {
		return heldBytes(b.host.opt)
	}
	return b.dev.train.opt.stateBytes()
}

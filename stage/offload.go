package stage

import (
	"context"
	"fmt"

	"github.com/graphpipe/graphpipe/stage/internal/kernel"
	"github.com/graphpipe/graphpipe/tensor/cuda"
)

// A stage whose optimizer state lives in host memory (plan.StateHost,
// ZeRO-Offload) computes its passes on its device as any CUDA stage does,
// with its parameters and gradients there, but steps on the host: the
// executor's Params are the float32 master weights, and the optimizer
// (the CPU backend's, in the CPU's kernels: hostStep and its fused pass)
// and its state live beside them. A step brings the gradients down (one
// pinned copy per parameter, 4 bytes each: the plan's price), all-reduces
// them on the host over the stage's replicas, checks, clips and updates
// there, and sends the weights back up (4 bytes each again), where the
// precision's copy (bf16) is made from them before the next pass reads
// it. The copies are not overlapped with compute (the plan's flush holds
// them). On the CPU backend the state is in host memory already:
// OffloadOptimizer leaves it be.

// OffloadOptimizer keeps the executor's optimizer state in host memory and
// steps it on the host's cores (see above). Call it before the first step.
func (e *Executor) OffloadOptimizer() error {
	b, ok := e.be.(*cudaBackend)
	switch {
	case !ok:
		return nil // the CPU's state is the host's
	case e.shard != nil:
		return fmt.Errorf("stage: an optimizer offloaded to the host is not sharded as well")
	case e.stepping || e.optimizerStepped():
		return fmt.Errorf("stage: the optimizer has stepped: offload it before the first step")
	}
	b.host = &offload{hostStep: hostStep{e: e}}
	if e.train != nil {
		return b.host.setOptimizer(*e.train)
	}
	return nil
}

// Offloaded says whether the executor steps its optimizer on the host while
// it computes on a device.
func (e *Executor) Offloaded() bool {
	b, ok := e.be.(*cudaBackend)
	return ok && b.host != nil
}

// offload is a CUDA backend's step on the host: hostStep on the executor's
// Params and Grads, its passes after the check fused as the CPU backend's
// (fused).
type offload struct {
	hostStep
	fused
}

// down brings the gradients to the host's Grads: one pinned copy of each,
// one wait. allReduce and the step read them there.
func (t *devTrain) downGrads(s *kernel.Scope) {
	t.ready(s)
	if t.pl.total == 0 || !t.staging(s) {
		return
	}
	for _, u := range t.units() {
		t.downPiece(s, t.g, u)
	}
	s.Wait()
	if s.Err() != nil {
		return
	}
	all := t.arStage.Float32s()
	for k, name := range t.pl.names {
		copy(t.e.Grads[name].Data, all[t.pl.off[k]:t.pl.off[k]+t.pl.n[k]])
	}
}

// upParams sends the host's Params (the master weights, just stepped) up:
// one pinned copy of each, queued; the precision's copies go stale.
func (t *devTrain) upParams(s *kernel.Scope) {
	t.ready(s)
	if t.pl.total == 0 || !t.staging(s) {
		return
	}
	all := t.arStage.Float32s()
	for k, name := range t.pl.names {
		copy(all[t.pl.off[k]:t.pl.off[k]+t.pl.n[k]], t.e.Params[name].Data)
	}
	for _, u := range t.units() {
		t.upPiece(s, t.p, u)
	}
	t.stale()
}

// The CUDA backend's step pieces where the optimizer is offloaded: the
// gradients down (allReduce), the host's step, the weights up (update).

func (b *cudaBackend) hostAllReduce(ctx context.Context, c StepComm) error {
	if err := b.run(func(s *kernel.Scope, t *devTrain) { t.downGrads(s) }); err != nil {
		return err
	}
	if r, ok := c.(Replicated); ok && r.Replicas() < 2 {
		return nil
	}
	return b.host.allReduce(ctx, c)
}

func (b *cudaBackend) hostUpdate(rate float64) error {
	h := b.host
	if f, ok := h.opt.(fusedOptimizer); ok {
		scale := float32(1)
		if h.scaled {
			scale = h.scale
		}
		f.step(b.e.Params, b.e.Grads, rate, scale, true)
		h.scaled, h.cleared = false, true
	} else {
		if h.scaled {
			h.scaled = false
			if err := h.hostStep.scaleGrads(h.scale); err != nil {
				return err
			}
		}
		if err := h.hostStep.update(rate); err != nil {
			return err
		}
	}
	return b.run(func(s *kernel.Scope, t *devTrain) { t.upParams(s) })
}

func (b *cudaBackend) hostClearGrads() error {
	h := b.host
	if !h.cleared {
		if err := h.hostStep.clearGrads(); err != nil {
			return err
		}
	}
	h.fused = fused{}
	return b.run(func(s *kernel.Scope, t *devTrain) { t.clear(s) })
}

// hostFirstNonFinite scans the host's values: the master weights and the
// gradients brought down are there; the buffers come down first.
func (b *cudaBackend) hostFirstNonFinite() (op, what string, err error) {
	if err := b.run(func(s *kernel.Scope, t *devTrain) { t.fetchBuffers(s) }); err != nil {
		return "", "", err
	}
	op, what = b.e.scanNonFinite()
	return op, what, nil
}

// fetchBuffers brings the buffers to the host (an offloaded stage's
// parameters are the host's already).
func (t *devTrain) fetchBuffers(s *kernel.Scope) {
	t.ready(s)
	for k, name := range t.bl.names {
		s.Down(t.e.Buffers[name].Data, t.bl.view(t.b, k))
	}
}

// heldBytes is what an optimizer's state holds, in bytes.
func heldBytes(o Optimizer) int64 {
	if h, ok := o.(interface{ stateBytes() int64 }); ok {
		return h.stateBytes()
	}
	return 0
}

// deviceStateBytes is what the device optimizer's state buffers hold.
func (o *devOptim) stateBytes() int64 {
	var n int64
	for _, b := range []cuda.Buffer{o.m, o.v} {
		n += 4 * int64(b.N)
	}
	return n
}

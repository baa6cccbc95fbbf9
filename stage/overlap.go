package stage

import (
	"context"
	"fmt"
)

// A stage's all-reduce overlapped with its last weight pass of a step. The
// driver (the runtime's worker, which knows from its action list which pass
// is the last to add weight gradients) arms that pass (OverlapNext) with
// the stage's buckets (plan.GradBuckets: which ops must be done for each,
// and its spans of the all-reduce's layout, the gradients in
// parameter-name order laid end to end) and a BucketComm. As the pass
// finishes an op, the op's gradients are final for the step; each bucket
// whose ops are all done is brought to the host (on a device: its pieces
// downloaded into the all-reduce's pinned staging, an event recorded) and
// handed to the BucketComm, which starts its all-reduce (a sharded stage's
// reduce-scatter) in the background while the pass goes on; the pass's end
// hands it every bucket left. EndStep then calls the StepComm's AllReduce
// (ReduceScatter) with the same host gradients, as without overlap: the
// BucketComm's answers by waiting for the buckets' rings, not by running
// one. Each element is summed as the one ring after the pass sums it, so
// the step's numbers are the same bit for bit.

// Bucket is one bucket of a stage's gradients: the ops (graph indices)
// whose gradients must be final before it starts, and its spans [lo, hi) of
// the all-reduce's layout.
type Bucket struct {
	Ops   []int
	Spans [][2]int64
}

// BucketComm is what a StepComm offers a stage whose all-reduce overlaps
// its last weight pass (OverlapNext).
type BucketComm interface {
	// StartBucket starts the all-reduce of bucket b of grads (the stage's
	// gradients in parameter-name order, on the host: the same values
	// EndStep hands AllReduce or ReduceScatter), once ready returns nil;
	// it returns at once. Its AllReduce (ReduceScatter) after the pass
	// then waits for every bucket started.
	StartBucket(ctx context.Context, b int, grads []*Value[float32], ready func() error)
}

// OverlapError is an overlapped all-reduce the executor cannot arm.
type OverlapError struct{ Msg string }

func (e *OverlapError) Error() string {
	return "stage: all-reduce overlapped with the backward: " + e.Msg
}

// overlap is a step's armed overlap (OverlapNext), until its pass ends.
type overlap struct {
	ctx     context.Context
	comm    BucketComm
	buckets []Bucket
	left    []int         // per bucket, its ops not yet done
	byOp    map[int][]int // op -> the buckets waiting for it
	started []bool
	grads   []*Value[float32] // the host gradients handed to the comm
	active  bool              // the armed pass is running
	done    bool              // it ran: every bucket went to the comm
}

// OverlapNext arms the next pass that adds weight gradients (Backward with
// weights, or Weights) as the step's last: as it finishes the ops of each
// of buckets, that bucket goes to c (see above). Call it before that pass,
// with the step's gradients of every earlier pass added. A stage whose
// optimizer steps on the host from a device (OffloadOptimizer) does not
// overlap.
func (e *Executor) OverlapNext(ctx context.Context, c BucketComm, buckets []Bucket) error {
	if e.Offloaded() {
		return &OverlapError{"the optimizer steps on the host (offloaded): its gradients come down after the pass"}
	}
	if err := e.checkBuckets(buckets); err != nil {
		return err
	}
	o := &overlap{ctx: ctx, comm: c, buckets: buckets, left: make([]int, len(buckets)), byOp: map[int][]int{}, started: make([]bool, len(buckets))}
	for b, bk := range buckets {
		for _, op := range bk.Ops {
			o.byOp[op] = append(o.byOp[op], b)
		}
		o.left[b] = len(bk.Ops)
	}
	e.ovl = o
	return nil
}

// checkBuckets checks that buckets' spans lie in the layout, in order.
func (e *Executor) checkBuckets(buckets []Bucket) error {
	var total int64
	for _, name := range e.ParamNames() {
		total += int64(len(e.Params[name].Data))
	}
	for b, bk := range buckets {
		for _, s := range bk.Spans {
			if s[0] < 0 || s[0] >= s[1] || s[1] > total {
				return &OverlapError{fmt.Sprintf("bucket %d's span [%d, %d) is not in the stage's %d gradient elements", b, s[0], s[1], total)}
			}
		}
	}
	return nil
}

// Overlapped says whether the step's gradients went to a BucketComm during
// its last weight pass: EndStep's all-reduce then waits for its buckets.
func (e *Executor) Overlapped() bool { return e.ovl != nil && e.ovl.done }

// weightPass starts a pass that adds weight gradients: the armed one, if
// the step armed one.
func (e *Executor) weightPass() error {
	o := e.ovl
	if o == nil || o.active || o.done {
		return nil
	}
	grads, err := e.be.overlapGrads(len(o.buckets))
	if err != nil {
		return err
	}
	o.grads, o.active = grads, true
	return nil
}

// opFinal notes that the armed pass finished op i: the buckets it
// completes start.
func (e *Executor) opFinal(i int) {
	o := e.ovl
	if o == nil || !o.active {
		return
	}
	for _, b := range o.byOp[i] {
		if o.left[b]--; o.left[b] == 0 {
			e.startBucket(b)
		}
	}
}

// endWeightPass ends the armed pass: every bucket not started yet (its ops
// ran no backward: nothing downstream needed it, or selective backprop
// kept no row) starts now, their gradients final too.
func (e *Executor) endWeightPass() {
	o := e.ovl
	if o == nil || !o.active {
		return
	}
	for b := range o.buckets {
		if !o.started[b] {
			e.startBucket(b)
		}
	}
	o.active, o.done = false, true
	e.be.bucketsQueued()
}

// startBucket brings bucket b to the host and hands it to the comm.
func (e *Executor) startBucket(b int) {
	o := e.ovl
	o.started[b] = true
	ready, err := e.be.bucketReady(o.buckets[b].Spans)
	if err != nil {
		ready = func() error { return err }
	}
	o.comm.StartBucket(o.ctx, b, o.grads, ready)
}

// spanPieces cuts [lo, hi) of tensors of sizes laid end to end into its
// pieces, one per tensor it touches (at: the piece's offset from lo).
func spanPieces(sizes []int, lo, hi int) []piece {
	var out []piece
	base, at := 0, 0
	for k, n := range sizes {
		a, b := max(lo, base), min(hi, base+n)
		if a < b {
			out = append(out, piece{k: k, lo: a - base, hi: b - base, at: at})
			at += b - a
		}
		base += n
	}
	return out
}

// The CPU backend's gradients are the host's: a bucket is there at once.

func (h *hostStep) overlapGrads(int) ([]*Value[float32], error) {
	return inOrder(h.e.ParamNames(), h.e.Grads), nil
}

func (h *hostStep) bucketReady([][2]int64) (func() error, error) { return nil, nil }

func (h *hostStep) bucketsQueued() {}

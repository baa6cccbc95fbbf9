package kernel

import (
	"fmt"
)

// Position places a micro-batch in training: the step, and the index in the
// step's batch of the micro-batch's first row (a data-parallel replica's
// rows start further in). Ops that draw random numbers (dropout) draw them
// from (seed, step, op, sample), so that every plan, micro-batch size,
// replica split and restart draws the same.
type Position struct {
	Step   int
	Sample int
	// Rows is the micro-batch's size (this replica's rows of it): what ops
	// without inputs (parameter, constant) make. 0: the rows of what Forward
	// is fed.
	Rows int
	// Eval runs the forward pass as evaluation does (PyTorch's eval mode):
	// batch_norm normalises by its running statistics and leaves them
	// alone, dropout passes its input through.
	Eval bool
	// Kept, for a pass on the rows selective backprop kept of a micro-batch
	// (compacted: CompactRows), is which of its rows each row is: row r is
	// the micro-batch's row Kept[r], sample Sample+Kept[r]. nil: every row.
	Kept []int
}

// SampleOf is the index in the step's batch of row r of the pass: what
// dropout draws its mask from.
func (p Position) SampleOf(r int) int {
	if p.Kept != nil {
		return p.Sample + p.Kept[r]
	}
	return p.Sample + r
}

// Pass is what an executor tells its kernels about the pass they run:
// kernels that need it (dropout) keep a pointer to their executor's.
type Pass struct {
	Seed int64
	Pos  Position
	// Recomputing: the pass reruns a forward already run (Executor.Recompute):
	// batch_norm leaves its running statistics alone
	Recomputing bool
}

// Kernel computes one op. Forward returns the output and whatever Backward
// needs (the stash); Backward adds into every non-nil gradient of gx (the
// op's inputs) and gp (its parameters).
type Kernel[T Num] interface {
	Forward(x, p []*Value[T]) (*Value[T], any, error)
	Backward(gy *Value[T], x, p []*Value[T], y *Value[T], st any, gx, gp []*Value[T])
}

// OpError is an op that cannot run.
type OpError struct {
	Op  string
	Msg string
}

func (e *OpError) Error() string { return fmt.Sprintf("op %q: %s", e.Op, e.Msg) }

// axis maps a per-sample axis onto the batch-major value's axes.
func axis(a int64, rank int) int {
	if a < 0 {
		a += int64(rank)
	}
	return int(a) + 1
}

func addInto[T Num](dst, src []T) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// broadcasts reports whether op o is an add or mul in model@2's forms:
// with a scalar, or with an input whose shape is not the output's.
func broadcasts(o *opArgs) bool {
	if o.op.Attrs.HasScalar {
		return true
	}
	for _, t := range o.in {
		if !t.Shape.Equal(o.out.Shape) {
			return true
		}
	}
	return false
}

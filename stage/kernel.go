package stage

import "fmt"

// kernel computes one op. forward returns the output and whatever backward
// needs (the stash); backward adds into every non-nil gradient of gx (the
// op's inputs) and gp (its parameters).
type kernel[T Num] interface {
	forward(x, p []*Value[T]) (*Value[T], any, error)
	backward(gy *Value[T], x, p []*Value[T], y *Value[T], st any, gx, gp []*Value[T])
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

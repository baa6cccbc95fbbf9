package stage

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/graphpipe/graphpipe/tensor"
)

// Finite says whether every value of x is a finite number (neither NaN nor
// an infinity). It reads x once, over the cores, each piece by
// tensor.AllFinite.
func Finite(x []float32) bool { return allFinite([][]float32{x}) }

// allFinite is Finite of every slice of xs, in one pass over them all.
func allFinite(xs [][]float32) bool {
	var bad atomic.Bool
	eachPiece(sizesOf(xs), func(k, lo, hi int) {
		if bad.Load() {
			return
		}
		if !tensor.AllFinite(xs[k][lo:hi]) {
			bad.Store(true)
		}
	})
	return !bad.Load()
}

// GradsFinite says whether every accumulated gradient is finite. Between
// EndStep and ApplyStep it is EndStep's check, made before clipping;
// otherwise one read of them on the backend (a device that fails the read
// reads as not finite).
func (e *Executor) GradsFinite() bool {
	if e.pending != nil {
		return e.pending.finite
	}
	ok, err := e.be.gradsFinite()
	return ok && err == nil
}

// FirstNonFinite names the first of the stage's ops, in topological order,
// with a value that is not finite among its parameters, buffers and
// accumulated gradients, and says which value and what it holds: ("", "")
// when every one is finite. It is the slow path behind GradsFinite, for a
// message; between EndStep and ApplyStep it answers, like GradsFinite, as
// things were before clipping. A device that fails to bring the values
// to the host gives ("", "").
func (e *Executor) FirstNonFinite() (op, what string) {
	if e.pending != nil && e.pending.scanned {
		return e.pending.op, e.pending.what
	}
	op, what, _ = e.be.firstNonFinite()
	return op, what
}

// scanNonFinite is FirstNonFinite over the host's values.
func (e *Executor) scanNonFinite() (op, what string) {
	for _, i := range e.ops {
		for _, p := range e.g.Params(i) {
			if v := firstBad(e.Params[p.Key].Data); v != "" {
				return e.g.Op(i).Name, fmt.Sprintf("parameter %q holds %s", p.Key, v)
			}
			if v := firstBad(e.Grads[p.Key].Data); v != "" {
				return e.g.Op(i).Name, fmt.Sprintf("the gradient of %q holds %s", p.Key, v)
			}
		}
		for _, b := range e.g.Buffers(i) {
			if v := firstBad(e.Buffers[b.Key].Data); v != "" {
				return e.g.Op(i).Name, fmt.Sprintf("buffer %q holds %s", b.Key, v)
			}
		}
	}
	return "", ""
}

// firstBad is the first value of x that is not finite, as text ("NaN",
// "+Inf", "-Inf"), or "".
func firstBad(x []float32) string {
	for _, v := range x {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Sprint(v)
		}
	}
	return ""
}

package kernel

import (
	"math"

	"github.com/graphpipe/graphpipe/dag"
)

// What selective backprop (the step room's selective.go) asks of the
// kernels: each sample's loss, which the loss op's output averages, and a
// micro-batch's values and stashes cut to the rows it keeps, so that the
// backward passes run on those rows alone.

// SampleLosser computes each sample's loss from a loss op's inputs (x as
// its Forward is given them): the n values whose mean is the op's output.
type SampleLosser func(x []*Value[float32]) []float64

// SampleLosses is how a loss of kind gives each sample's loss; nil for a
// kind that cannot (no loss, or a loss without the column).
func SampleLosses(kind dag.Kind) SampleLosser { return kernels[kind].perSample }

// sampleCrossEntropy: per row, logsumexp(logits) − logits[label], in the
// arithmetic of crossEntropy's Forward.
func sampleCrossEntropy(x []*Value[float32]) []float64 {
	n, c := x[0].Shape[0], x[0].Shape[1]
	out := make([]float64, n)
	for b := range out {
		row := x[0].Data[b*c : (b+1)*c]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - m)
		}
		lab := x[1].Ints[b]
		if lab < 0 || int(lab) >= c {
			out[b] = math.NaN() // Forward refused it already
			continue
		}
		out[b] = m + math.Log(sum) - float64(row[lab])
	}
	return out
}

// sampleElements is mse's and bce_with_logits' per-sample loss: the mean
// of elem over the sample's elements (the op averages over all of them,
// every sample having as many).
func sampleElements(elem func(p, t float64) float64) SampleLosser {
	return func(x []*Value[float32]) []float64 {
		n := x[0].Shape[0]
		out := make([]float64, n)
		if n == 0 {
			return out
		}
		per := len(x[0].Data) / n
		for b := range out {
			var s float64
			for i := b * per; i < (b+1)*per; i++ {
				s += elem(float64(x[0].Data[i]), float64(x[1].Data[i]))
			}
			out[b] = s / float64(per)
		}
		return out
	}
}

func squaredError(p, t float64) float64 { return (p - t) * (p - t) }

func logisticLoss(z, t float64) float64 {
	return math.Max(z, 0) - z*t + math.Log1p(math.Exp(-math.Abs(z)))
}

// GatherRows is rows of a batch-major value (indices into its first axis,
// in order), in new memory.
func GatherRows[T Num](v *Value[T], rows []int) *Value[T] {
	n := v.Shape[0]
	out := &Value[T]{Shape: append([]int{len(rows)}, v.Shape[1:]...)}
	if v.Data != nil {
		out.Data = gather(v.Data, n, rows)
	}
	if v.Ints != nil {
		out.Ints = gather(v.Ints, n, rows)
	}
	return out
}

// gather is rows of s, a batch-major slice of n rows.
func gather[E any](s []E, n int, rows []int) []E {
	if n == 0 {
		return s[:0]
	}
	per := len(s) / n
	out := make([]E, 0, len(rows)*per)
	for _, r := range rows {
		out = append(out, s[r*per:(r+1)*per]...)
	}
	return out
}

// CompactStash is a CPU kernel's stash st, made on n rows, cut to rows;
// false where the stash is not made of rows (batch_norm's statistics span
// them) or of a kind it does not know: the op's forward must run again on
// the rows instead. A stash that is a plain slice is batch-major (the
// kernels' contract: cross-entropy's probabilities, max pooling's argmax).
func CompactStash(st any, n int, rows []int) (any, bool) {
	switch s := st.(type) {
	case nil:
		return nil, true
	case []float32:
		return rowsOf(s, n, rows)
	case []float64:
		return rowsOf(s, n, rows)
	case []int32:
		return rowsOf(s, n, rows)
	case *lnStash[float32]:
		xhat, ok1 := rowsOf(s.xhat, n, rows)
		rstd, ok2 := rowsOf(s.rstd, n, rows)
		return &lnStash[float32]{xhat: xhat, rstd: rstd}, ok1 && ok2
	case *attnStash[float32]:
		if s.gqkv != nil {
			return nil, false // an inputs-only backward has run: too late to cut
		}
		qkv, ok1 := rowsOf(s.qkv, n, rows)
		probs, ok2 := rowsOf(s.probs, n, rows)
		ctx, ok3 := rowsOf(s.ctx, n, rows)
		return &attnStash[float32]{qkv: qkv, probs: probs, ctx: ctx}, ok1 && ok2 && ok3
	}
	return nil, false
}

// rowsOf is gather for a stash slice, refusing one that is not n rows.
func rowsOf[E any](s []E, n int, rows []int) ([]E, bool) {
	if n == 0 || len(s)%n != 0 {
		return nil, false
	}
	return gather(s, n, rows), true
}

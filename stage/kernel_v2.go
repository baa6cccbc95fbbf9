package stage

import "github.com/graphpipe/graphpipe/dag"

// newKernelV2 builds the kernels of the ops graphpipe/model@2 adds; ok is
// false for a kind it does not know.
func newKernelV2[T Num](g *dag.Graph, i int, ctx *runCtx) (kernel[T], bool) {
	if k, ok := newConvKernel[T](g, i, ctx); ok {
		return k, true
	}
	return newTensorKernel[T](g, i, ctx)
}

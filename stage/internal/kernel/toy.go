//go:build toyop

package kernel

import (
	"github.com/graphpipe/graphpipe/dag"
)

// The toy operator dag.Scale2 (the toyop build tag), one row of the table
// and its kernels: docs/adding-an-op.md.

func init() {
	kernels[dag.Scale2] = kernelSpec{cpu: cpu(scale2Kernel[float32], scale2Kernel[float64]),
		gpu: on(scale2Kernel[float32], gpuScale2)}
}

// scale2: x [n, ...] → y = 2x, x's shape.
type scale2[T Num] struct{}

func scale2Kernel[T Num](*opArgs) *scale2[T] { return &scale2[T]{} }

func (scale2[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	for i, v := range x[0].Data {
		y.Data[i] = 2 * v
	}
	return y, nil, nil
}

// Backward: gx += 2·gy.
func (scale2[T]) Backward(gy *Value[T], _, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	for i, g := range gy.Data {
		gx[0].Data[i] += 2 * g
	}
}

// gpuScale2 is gp_scalar's product by a scalar (kernels.cu's kind 1), by 2.
func gpuScale2(*scale2[float32]) (fwdFn, bwdFn) { return gpuPointwise("gp_scalar", 1, float32(2)) }

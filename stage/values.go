package stage

import (
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/stage/internal/kernel"
)

// The values a stage computes on, and what the kernel room
// (stage/internal/kernel) says of them, under the names importers use.

// Num is a float type the kernels run on.
type Num = kernel.Num

// Value is a batch-major tensor: Data for float tensors, Ints for int32 ones.
type Value[T Num] = kernel.Value[T]

// Position places a micro-batch in training (kernel.Position).
type Position = kernel.Position

// OpError is an op that cannot run.
type OpError = kernel.OpError

// NewValue allocates a zeroed float value.
func NewValue[T Num](shape ...int) *Value[T] { return kernel.NewValue[T](shape...) }

// SliceRows is rows [lo, hi) of a batch-major value, sharing its storage.
func SliceRows[T Num](v *Value[T], lo, hi int) *Value[T] { return kernel.SliceRows(v, lo, hi) }

// InitParams initialises op i's parameters and buffers as PyTorch's modules
// do by default, each from (seed, op name, slot), keyed by slot
// (kernel.InitParams).
func InitParams(g *dag.Graph, i int, seed int64) map[string]*Value[float32] {
	return kernel.InitParams(g, i, seed)
}

package kernel

import (
	"github.com/graphpipe/graphpipe/dag"
	"github.com/graphpipe/graphpipe/tensor"
)

func SizeOf(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

func IntShape(s dag.Shape) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}

// Num is a float type the kernels run on.
type Num interface{ ~float32 | ~float64 }

// Value is a batch-major tensor: Data for float tensors, Ints for int32 ones.
type Value[T Num] struct {
	Shape []int
	Data  []T
	Ints  []int32
}

// NewValue allocates a zeroed float value.
func NewValue[T Num](shape ...int) *Value[T] {
	return &Value[T]{Shape: append([]int(nil), shape...), Data: make([]T, tensor.Size(shape))}
}

// Batch is the leading dimension.
func (v *Value[T]) Batch() int { return v.Shape[0] }

// Rows returns the number of rows when the last dim is the row width.
func Rows(shape []int) int {
	if len(shape) == 0 {
		return 1
	}
	return tensor.Size(shape[:len(shape)-1])
}

// gemm is C[m,n] = op(A)·op(B) + beta·C, row-major: tensor.Sgemm for float32,
// a plain loop for float64 (the test path).
func gemm[T Num](transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if a32, ok := any(a).([]float32); ok {
		tensor.Sgemm(transA, transB, m, n, k, 1, a32, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
		return
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s T
			for p := 0; p < k; p++ {
				var av, bv T
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			c[i*ldc+j] = s + beta*c[i*ldc+j]
		}
	}
}

// gemmBatched is gemm on batch products at fixed strides (product i at
// a[i·sa:], b[i·sb:], c[i·sc:]): tensor.SgemmBatched for float32 (the
// library's batched call where it has one), gemm in turn for float64.
func gemmBatched[T Num](transA, transB bool, m, n, k int, a []T, lda, sa int, b []T, ldb, sb int, beta T, c []T, ldc, sc, batch int) {
	if a32, ok := any(a).([]float32); ok {
		tensor.SgemmBatched(transA, transB, m, n, k, 1, a32, lda, sa, any(b).([]float32), ldb, sb, float32(beta), any(c).([]float32), ldc, sc, batch)
		return
	}
	for i := 0; i < batch; i++ {
		gemm(transA, transB, m, n, k, a[i*sa:], lda, b[i*sb:], ldb, beta, c[i*sc:], ldc)
	}
}

// Clone is a copy of v that shares no storage with it.
func (v *Value[T]) Clone() *Value[T] {
	c := &Value[T]{Shape: append([]int(nil), v.Shape...)}
	if v.Data != nil {
		c.Data = append([]T(nil), v.Data...)
	}
	if v.Ints != nil {
		c.Ints = append([]int32(nil), v.Ints...)
	}
	return c
}

// SliceRows is rows [lo, hi) of a batch-major value, sharing its storage.
func SliceRows[T Num](v *Value[T], lo, hi int) *Value[T] {
	per := 1
	for _, d := range v.Shape[1:] {
		per *= d
	}
	out := &Value[T]{Shape: append([]int{hi - lo}, v.Shape[1:]...)}
	if v.Data != nil {
		out.Data = v.Data[lo*per : hi*per]
	}
	if v.Ints != nil {
		out.Ints = v.Ints[lo*per : hi*per]
	}
	return out
}

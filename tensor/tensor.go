package tensor

import "fmt"

// Tensor is a row-major float32 array.
type Tensor struct {
	Shape []int
	Data  []float32
}

// New allocates a zeroed tensor.
func New(shape ...int) *Tensor {
	return &Tensor{Shape: append([]int(nil), shape...), Data: make([]float32, Size(shape))}
}

// FromData wraps data with a shape; it panics if the sizes disagree (a
// programmer error).
func FromData(data []float32, shape ...int) *Tensor {
	if len(data) != Size(shape) {
		panic(fmt.Sprintf("tensor: %d values for shape %v", len(data), shape))
	}
	return &Tensor{Shape: append([]int(nil), shape...), Data: data}
}

// Size is the number of elements of a shape.
func Size(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Len is the number of elements.
func (t *Tensor) Len() int { return len(t.Data) }

// Clone copies a tensor.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{Shape: append([]int(nil), t.Shape...), Data: append([]float32(nil), t.Data...)}
}

// Zero sets every element to 0.
func (t *Tensor) Zero() { clear(t.Data) }

package dag

import (
	"fmt"
	"strings"
)

// Format is the only model file format this version reads and writes.
const Format = "graphpipe/model@1"

// MaxNameLen is the longest name the spec allows.
const MaxNameLen = 200

// DType is a tensor element type.
type DType string

const (
	Float32 DType = "float32"
	Int32   DType = "int32"
)

// Size is the bytes of one element.
func (d DType) Size() int64 { return 4 }

// Shape is the shape of one sample; the batch axis is implicit.
type Shape []int64

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Equal reports whether two shapes have the same dims.
func (s Shape) Equal(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// Elems is the number of elements; Build has checked it fits in int64.
func (s Shape) Elems() int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// Input is a tensor fed per sample.
type Input struct {
	Name  string
	Shape Shape
	DType DType
	// Range is [lo, hi) for int32 inputs: synthetic data and bounds checks.
	Range *[2]int64
}

// Op is one operator. It produces one tensor, named Name.
type Op struct {
	Name   string
	Kind   Kind
	Inputs []string
	Attrs  Attrs
}

// Attrs holds every attribute of every op kind, resolved: a field that does not
// apply to an op's kind is zero, one that applies holds its value or default.
type Attrs struct {
	Out      int64   // linear
	Bias     bool    // linear
	Eps      float64 // layer_norm
	Axis     int64   // concat, mean
	Num      int64   // embedding, embedding_bag
	Dim      int64   // embedding, embedding_bag
	Mode     string  // embedding_bag: "sum" or "mean"
	Heads    int64   // attention
	Causal   bool    // attention
	OutShape Shape   // opaque
	FlopsFwd float64 // opaque, per sample
	FlopsBwd float64 // opaque, per sample
	Params   int64   // opaque
	OutDType DType   // opaque
}

// Model is a model file's document: what was written, attributes resolved.
type Model struct {
	Name      string
	BatchSize int64
	Seed      int64
	Inputs    []Input
	Ops       []Op
}

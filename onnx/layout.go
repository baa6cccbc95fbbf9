package onnx

import (
	"fmt"

	"github.com/graphpipe/graphpipe/dag"
)

// materialize makes v's graphpipe tensor hold shape (a reshape op when it
// differs: the same elements in the same order). It returns the tensor.
func (c *converter) materialize(hint string, t string, from, to dag.Shape) string {
	if from.Equal(to) {
		return t
	}
	name, _ := c.emit(hint+":reshape", dag.Reshape, []string{t}, attrs(dag.Reshape, func(a *dag.Attrs) { a.Shape = to }), nil)
	return name
}

// withDims is activation v re-viewed with ONNX dims target (a Reshape):
// where the batch went, and a reshape op when its per-sample shape changed.
// target holds the batch as a symbol in exactly one dim.
func (c *converter) withDims(hint string, v *value, target []sym) (*value, error) {
	if v.j < 0 {
		dims := make([]int64, len(target))
		for i, s := range target {
			if s.n != 0 {
				return nil, fmt.Errorf("the target shape has the batch in it, but the tensor is the same for every sample")
			}
			dims[i] = s.c
		}
		out := &value{kind: kAct, dims: dims, dtype: v.dtype, j: -1, prod: -1}
		out.t = c.materialize(hint, v.t, v.canon(), out.canon())
		return out, nil
	}
	k := -1
	for i, s := range target {
		if s.n == 1 {
			if k >= 0 {
				return nil, fmt.Errorf("the target shape %v has the batch in two dims", target)
			}
			k = i
		}
	}
	if k < 0 {
		return nil, fmt.Errorf("the target shape %v loses the batch axis (it would merge samples)", target)
	}
	outerX := v.a
	for _, d := range v.dims[:v.j] {
		outerX *= d
	}
	innerX := v.b
	for _, d := range v.dims[v.j+1:] {
		innerX *= d
	}
	outerY, innerY := int64(1), int64(1)
	for _, s := range target[:k] {
		outerY *= s.c
	}
	for _, s := range target[k+1:] {
		innerY *= s.c
	}
	c2 := target[k].c
	if outerY == 0 || outerX%outerY != 0 || innerY == 0 || innerX%innerY != 0 || (outerX/outerY)*(innerX/innerY) != c2 {
		return nil, fmt.Errorf("the target shape %v moves elements across samples", target)
	}
	dims := make([]int64, len(target))
	for i, s := range target {
		dims[i] = s.c
	}
	out := &value{kind: kAct, dims: dims, dtype: v.dtype, j: k, a: outerX / outerY, b: innerX / innerY, prod: -1}
	out.t = c.materialize(hint, v.t, v.canon(), out.canon())
	return out, nil
}

// transposed is activation v with its ONNX dims permuted by perm.
func (c *converter) transposed(hint string, v *value, perm []int64) (*value, error) {
	r := len(v.dims)
	if len(perm) != r {
		return nil, fmt.Errorf("perm %v does not permute the %d axes of its input", perm, r)
	}
	seen := make([]bool, r)
	for _, p := range perm {
		if p < 0 || p >= int64(r) || seen[p] {
			return nil, fmt.Errorf("perm %v is not a permutation of %d axes", perm, r)
		}
		seen[p] = true
	}
	out := &value{kind: kAct, dims: make([]int64, r), dtype: v.dtype, j: -1, a: v.a, b: v.b, prod: -1}
	cd := v.cdims()
	var cperm dag.Shape
	for i, p := range perm {
		out.dims[i] = v.dims[p]
		if int(p) == v.j {
			out.j = i
		}
		for _, k := range cd[p] {
			cperm = append(cperm, int64(k))
		}
	}
	if v.j < 0 {
		out.a, out.b = 0, 0
	}
	identity := true
	for i, p := range cperm {
		identity = identity && int64(i) == p
	}
	out.t = v.t
	if !identity {
		out.t, _ = c.emit(hint, dag.Transpose, []string{v.t}, attrs(dag.Transpose, func(a *dag.Attrs) { a.Perm = cperm }), nil)
	}
	return out, nil
}

// axis normalises an ONNX axis of a rank-r tensor.
func axisOf(a int64, r int) (int, error) {
	if a < 0 {
		a += int64(r)
	}
	if a < 0 || a >= int64(r) {
		return 0, fmt.Errorf("axis %d is out of range for rank %d", a, r)
	}
	return int(a), nil
}

// sampleAxis maps ONNX axis ax of activation v to its one per-sample axis;
// it refuses the batch's axis (the op would mix samples or cut the batch).
func sampleAxis(v *value, ax int, what string) (int, error) {
	if ax == v.j {
		return 0, fmt.Errorf("%s runs along axis %d, which holds the batch", what, ax)
	}
	return v.cdims()[ax][0], nil
}

// sameLayout reports whether two activations hold the batch the same way.
func sameLayout(x, y *value) bool {
	if x.j < 0 || y.j < 0 {
		return x.j == y.j
	}
	return len(x.dims)-x.j == len(y.dims)-y.j && x.a == y.a && x.b == y.b
}

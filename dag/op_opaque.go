package dag

import "math"

// The row's pieces of opaque: an op known only by its output's shape, its
// FLOPs and its parameter count, which can be searched and simulated but
// not computed.

func opaqueDefaults(a *Attrs) { a.OutDType = Float32 }

// opaqueDerive: flops_bwd is twice flops_fwd unless given.
func opaqueDerive(a *Attrs, given func(string) bool) {
	if !given("flops_bwd") {
		a.FlopsBwd = 2 * a.FlopsFwd
	}
}

func checkOpaque(ck *attrChecker) {
	a := &ck.op.Attrs
	ck.dims("out_shape", a.OutShape)
	for _, f := range []struct {
		name string
		v    float64
	}{{"flops_fwd", a.FlopsFwd}, {"flops_bwd", a.FlopsBwd}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			ck.fail(f.name, "must be a finite number ≥ 0, got %g", f.v)
		}
	}
	if a.Params < 0 {
		ck.fail("params", "must be ≥ 0, got %d", a.Params)
	}
	if a.OutDType != Float32 && a.OutDType != Int32 {
		ck.fail("out_dtype", `must be "float32" or "int32", got %q`, a.OutDType)
	}
}

// inferOpaque: whatever it declares.
func inferOpaque(f *inferer) (Shape, DType) {
	return append(Shape{}, f.op.Attrs.OutShape...), f.op.Attrs.OutDType
}

// opaqueSlots: none; its parameters are a count (attrs.params), not
// tensors, and opaqueCost declares them.
func opaqueSlots(*Attrs, []*Tensor) (ps, bufs []Param) { return nil, nil }

// opaqueCost: the declared FLOPs, the backward split evenly between inputs
// and weights where it has parameters (no better knowledge); it stashes its
// inputs.
func opaqueCost(k *costing) {
	a, c := &k.op.Attrs, k.c
	c.Params = a.Params
	c.FwdFLOPs = a.FlopsFwd
	c.BwdInputFLOPs = a.FlopsBwd
	if a.Params > 0 {
		c.BwdInputFLOPs, c.BwdWeightFLOPs = a.FlopsBwd/2, a.FlopsBwd/2
	}
	c.StashBytes = k.inBytes
}

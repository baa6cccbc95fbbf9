package dag

// The rows' pieces of the elementwise ops: add, mul, sub, div (of two
// inputs, or of one and a scalar), pow, dropout, hard_sigmoid. relu, gelu,
// tanh, sigmoid, exp, log, sqrt, neg, erf and hard_swish need no more than
// inferSame and perElement.

// inferAddMul: model@1 adds or multiplies inputs of one shape; model@2
// broadcasts them.
func inferAddMul(f *inferer) (Shape, DType) {
	f.allFloat()
	if f.version >= 2 {
		return f.broadcast(), Float32
	}
	f.sameShapes()
	return f.in[0].Shape, Float32
}

// inferBroadcast is sub's and div's: the inputs' broadcast shape.
func inferBroadcast(f *inferer) (Shape, DType) {
	f.allFloat()
	return f.broadcast(), Float32
}

// addCost: one addition per output element and extra input; the gradient
// passes through.
func addCost(k *costing) { k.c.FwdFLOPs = float64(len(k.in)-1) * k.n }

// divCost: x / y stashes both inputs; x / scalar nothing, scalar / x its input.
func divCost(k *costing) {
	a := &k.op.Attrs
	k.c.FwdFLOPs, k.c.BwdInputFLOPs, k.c.StashBytes = k.n, 3*k.n, k.inBytes
	if a.HasScalar && !a.Reverse {
		k.c.StashBytes = 0
	}
}

func checkPow(ck *attrChecker) { ck.finite("exponent", ck.op.Attrs.Exponent) }

// hardSigmoidDefaults are PyTorch's nn.Hardsigmoid, relu6(x + 3) / 6
// (ONNX's HardSigmoid defaults to alpha 0.2: the importer writes its own).
func hardSigmoidDefaults(a *Attrs) { a.Alpha, a.Beta = 1.0/6, 0.5 }

// checkHardSigmoid: a finite slope and offset.
func checkHardSigmoid(ck *attrChecker) {
	ck.finite("alpha", ck.op.Attrs.Alpha)
	ck.finite("beta", ck.op.Attrs.Beta)
}

func dropoutDefaults(a *Attrs) { a.P = 0.5 }

func checkDropout(ck *attrChecker) {
	if p := ck.op.Attrs.P; !(p >= 0 && p < 1) {
		ck.fail("p", "must be a number in [0, 1), got %g", p)
	}
}

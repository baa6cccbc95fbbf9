package onnx

import (
	"fmt"
	"math"
)

// Constants are evaluated at import, small (maxFolded elements), with the
// batch as a symbol in integer ones.

func intConst(dims []int64, v []sym) *value {
	return &value{kind: kConst, dims: dims, isInt: true, ints: v}
}

func floatConst(dims []int64, v []float64) *value {
	return &value{kind: kConst, dims: dims, floats: v}
}

// length is a constant's element count.
func (v *value) length() int {
	if v.isInt {
		return len(v.ints)
	}
	return len(v.floats)
}

// at is a constant's element k as a float (a symbol's coefficient is not a
// float: ok is false).
func (v *value) at(k int) (float64, bool) {
	if v.isInt {
		return float64(v.ints[k].c), v.ints[k].n == 0
	}
	return v.floats[k], true
}

// asConst is input i as a constant (an initializer read whole); ok is false
// for an activation.
func (n *node) asConst(i int) (*value, bool, error) {
	v := n.in(i)
	if v == nil || v.kind == kAct {
		return nil, false, nil
	}
	if v.kind == kWeight {
		cv, err := n.c.readConst(v)
		if err != nil {
			return nil, false, n.refuse("input %d %q: %v", i, n.inName(i), err)
		}
		return cv, true, nil
	}
	return v, true, nil
}

// allConst reads every given input as a constant; ok is false if one is an
// activation.
func (n *node) allConst() ([]*value, bool, error) {
	var out []*value
	for i := 0; i < len(n.p.GetInput()); i++ {
		if n.p.GetInput()[i] == "" {
			out = append(out, nil)
			continue
		}
		v, ok, err := n.asConst(i)
		if err != nil || !ok {
			return nil, false, err
		}
		out = append(out, v)
	}
	return out, true, nil
}

// broadcastDims is NumPy's broadcast of two shapes.
func broadcastDims(x, y []int64) ([]int64, error) {
	r := max(len(x), len(y))
	out := make([]int64, r)
	for i := 0; i < r; i++ {
		dx, dy := int64(1), int64(1)
		if k := len(x) - r + i; k >= 0 {
			dx = x[k]
		}
		if k := len(y) - r + i; k >= 0 {
			dy = y[k]
		}
		switch {
		case dx == dy || dy == 1:
			out[i] = dx
		case dx == 1:
			out[i] = dy
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", x, y)
		}
	}
	return out, nil
}

// bindex maps an element of the broadcast shape out to the element of a
// tensor of dims in.
func bindex(out, in []int64, k int) int {
	idx, stride := 0, 1
	for i := len(out) - 1; i >= 0; i-- {
		d := out[i]
		pos := k % int(d)
		k /= int(d)
		if j := len(in) - len(out) + i; j >= 0 {
			if in[j] != 1 {
				idx += pos * stride
			}
			stride *= int(in[j])
		}
	}
	return idx
}

// foldBinary evaluates an elementwise binary op of two constants.
func foldBinary(op string, x, y *value) (*value, error) {
	dims, err := broadcastDims(x.dims, y.dims)
	if err != nil {
		return nil, err
	}
	n, err := count(dims)
	if err != nil || n > maxFolded {
		return nil, fmt.Errorf("the constant result is too large")
	}
	cmp := op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" || op == "GreaterOrEqual"
	if x.isInt && y.isInt {
		out := make([]sym, n)
		for k := range out {
			a, b := x.ints[bindex(dims, x.dims, k)], y.ints[bindex(dims, y.dims, k)]
			r, ok := symOp(op, a, b)
			if !ok {
				return nil, fmt.Errorf("%s of %v and %v has no value graphpipe can track (the batch size is a symbol)", op, a, b)
			}
			out[k] = r
		}
		return intConst(dims, out), nil
	}
	out := make([]float64, n)
	for k := range out {
		a, ok1 := x.at(bindex(dims, x.dims, k))
		b, ok2 := y.at(bindex(dims, y.dims, k))
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%s mixes the batch size with floats", op)
		}
		out[k] = floatOp(op, a, b)
	}
	if cmp {
		ints := make([]sym, n)
		for k, f := range out {
			ints[k] = num(int64(f))
		}
		return intConst(dims, ints), nil
	}
	return floatConst(dims, out), nil
}

func symOp(op string, a, b sym) (sym, bool) {
	switch op {
	case "Add":
		return a.add(b)
	case "Sub":
		return a.add(sym{-b.c, b.n})
	case "Mul":
		return a.mul(b)
	case "Div":
		if a.n == 0 && b.n == 0 && b.c != 0 {
			return num(a.c / b.c), true
		}
		return a.div(b)
	}
	if a.n != 0 || b.n != 0 {
		return symCompare(op, a, b)
	}
	f := floatOp(op, float64(a.c), float64(b.c))
	return num(int64(f)), true
}

// symCompare is a comparison, Max or Min of two integers one of which
// holds the batch size N, where N ≥ 1 decides it: c·N ranges over c, 2c,
// 3c, ... So c·N == -1 is false for c > 0 (the exporter's
// x.expand(N, -1, -1) compares its shape with -1 to find the axes to
// keep), N > 0 is true, max(N, 1) is N; N == 3 is not decided, nor is
// anything of N + 1 (no sym holds it).
func symCompare(op string, a, b sym) (sym, bool) {
	d := diffSpan(a, b)
	pick := func(yes, no bool) (sym, bool) { return num(int64(b2f(yes))), yes || no }
	switch op {
	case "Equal":
		return pick(d.exact && d.lo == 0, d.above(0) || d.below(0) || neverEqual(a, b) || neverEqual(b, a))
	case "Less":
		return pick(d.below(0), d.atLeast(0))
	case "Greater":
		return pick(d.above(0), d.atMost(0))
	case "LessOrEqual":
		return pick(d.atMost(0), d.above(0))
	case "GreaterOrEqual":
		return pick(d.atLeast(0), d.below(0))
	case "Max":
		if d.atLeast(0) {
			return a, true
		}
		return b, d.atMost(0)
	case "Min":
		if d.atMost(0) {
			return a, true
		}
		return b, d.atLeast(0)
	}
	return sym{}, false
}

// span is what a − b can be for every batch size N ≥ 1: at least lo
// (hasLo), at most hi (hasHi), exactly lo (exact).
type span struct {
	lo, hi       int64
	hasLo, hasHi bool
	exact        bool
}

func (s span) above(k int64) bool   { return s.hasLo && s.lo > k }
func (s span) atLeast(k int64) bool { return s.hasLo && s.lo >= k }
func (s span) below(k int64) bool   { return s.hasHi && s.hi < k }
func (s span) atMost(k int64) bool  { return s.hasHi && s.hi <= k }

// diffSpan bounds a − b over N ≥ 1: e·N (e the difference of the terms in
// N) is at least e when e > 0, at most e when e < 0.
func diffSpan(a, b sym) span {
	const big = 1 << 60 // past it the sums below could overflow: nothing is decided
	if a.c > big || a.c < -big || b.c > big || b.c < -big {
		return span{}
	}
	var e, k int64 // a − b = e·N + k
	for _, t := range []struct {
		s    sym
		sign int64
	}{{a, 1}, {b, -1}} {
		if t.s.n == 1 {
			e += t.sign * t.s.c
		} else {
			k += t.sign * t.s.c
		}
	}
	switch {
	case e == 0:
		return span{lo: k, hi: k, hasLo: true, hasHi: true, exact: true}
	case e > 0:
		return span{lo: e + k, hasLo: true}
	}
	return span{hi: e + k, hasHi: true}
}

// neverEqual says c·N is no k for any N ≥ 1 that the span leaves open:
// k is not a multiple of c.
func neverEqual(a, b sym) bool {
	return a.n == 1 && b.n == 0 && a.c != 0 && b.c%a.c != 0
}

func floatOp(op string, a, b float64) float64 {
	switch op {
	case "Add":
		return a + b
	case "Sub":
		return a - b
	case "Mul":
		return a * b
	case "Div":
		return a / b
	case "Pow":
		return math.Pow(a, b)
	case "Max":
		return math.Max(a, b)
	case "Min":
		return math.Min(a, b)
	case "Mod":
		return math.Mod(a, b)
	case "Equal":
		return b2f(a == b)
	case "Less":
		return b2f(a < b)
	case "Greater":
		return b2f(a > b)
	case "LessOrEqual":
		return b2f(a <= b)
	case "GreaterOrEqual":
		return b2f(a >= b)
	case "And":
		return b2f(a != 0 && b != 0)
	case "Or":
		return b2f(a != 0 || b != 0)
	}
	panic("onnx: floatOp " + op)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// foldUnary evaluates an elementwise unary op of a constant.
func foldUnary(op string, x *value) (*value, error) {
	if x.isInt && (op == "Neg" || op == "Abs" || op == "Identity" || op == "Not") {
		out := make([]sym, len(x.ints))
		for k, s := range x.ints {
			switch op {
			case "Neg":
				s.c = -s.c
			case "Abs":
				s.c = max(s.c, -s.c)
			case "Not":
				if s.n != 0 {
					return nil, fmt.Errorf("Not of the batch size")
				}
				s = num(int64(b2f(s.c == 0)))
			}
			out[k] = s
		}
		return intConst(x.dims, out), nil
	}
	out := make([]float64, x.length())
	for k := range out {
		a, ok := x.at(k)
		if !ok {
			return nil, fmt.Errorf("%s of the batch size has no value graphpipe can track", op)
		}
		switch op {
		case "Sqrt":
			a = math.Sqrt(a)
		case "Neg":
			a = -a
		case "Abs":
			a = math.Abs(a)
		case "Exp":
			a = math.Exp(a)
		case "Log":
			a = math.Log(a)
		case "Reciprocal":
			a = 1 / a
		case "Floor":
			a = math.Floor(a)
		case "Ceil":
			a = math.Ceil(a)
		case "Erf":
			a = math.Erf(a)
		case "Tanh":
			a = math.Tanh(a)
		case "Sigmoid":
			a = 1 / (1 + math.Exp(-a))
		case "Relu":
			a = math.Max(a, 0)
		case "HardSwish":
			a = a * min(max(a+3, 0), 6) / 6
		case "Not":
			a = b2f(a == 0)
		}
		out[k] = a
	}
	return floatConst(x.dims, out), nil
}

// foldHardSigmoid evaluates HardSigmoid of a float constant:
// max(0, min(1, alpha·x + beta)).
func foldHardSigmoid(x *value, alpha, beta float64) (*value, error) {
	if x.isInt {
		return nil, fmt.Errorf("HardSigmoid of integers")
	}
	out := make([]float64, x.length())
	for k := range out {
		a, ok := x.at(k)
		if !ok {
			return nil, fmt.Errorf("HardSigmoid of the batch size has no value graphpipe can track")
		}
		out[k] = max(0, min(1, alpha*a+beta))
	}
	return floatConst(x.dims, out), nil
}

// castConst converts a constant to integers or floats.
func castConst(x *value, toInt bool) (*value, error) {
	switch {
	case toInt && x.isInt, !toInt && !x.isInt:
		return x, nil
	case toInt:
		out := make([]sym, len(x.floats))
		for k, f := range x.floats {
			out[k] = num(int64(f))
		}
		return intConst(x.dims, out), nil
	}
	out := make([]float64, len(x.ints))
	for k, s := range x.ints {
		if s.n != 0 {
			return nil, fmt.Errorf("cannot cast the batch size %v to a float", s)
		}
		out[k] = float64(s.c)
	}
	return floatConst(x.dims, out), nil
}

// strides is a row-major tensor's strides.
func strides(dims []int64) []int64 {
	s := make([]int64, len(dims))
	acc := int64(1)
	for i := len(dims) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= dims[i]
	}
	return s
}

// gatherConst picks elements of a constant: out[idx] = x at the index
// mapped by pick (from an output multi-index to an input flat index).
func gatherConst(x *value, dims []int64, pick func(idx []int64) int64) (*value, error) {
	n, err := count(dims)
	if err != nil || n > maxFolded {
		return nil, fmt.Errorf("the constant result is too large")
	}
	idx := make([]int64, len(dims))
	st := strides(dims)
	out := &value{kind: kConst, dims: dims, isInt: x.isInt}
	for k := int64(0); k < n; k++ {
		for i := range dims {
			idx[i] = (k / st[i]) % dims[i]
		}
		src := pick(idx)
		if x.isInt {
			out.ints = append(out.ints, x.ints[src])
		} else {
			out.floats = append(out.floats, x.floats[src])
		}
	}
	return out, nil
}

package onnx

import "fmt"

// sym is an integer of a shape computation: c·N^n, N the batch size, n 0 or
// 1. Shapes are evaluated with the batch as a symbol, so that a reshape's
// target says where the batch went.
type sym struct {
	c int64
	n int8
}

func (s sym) String() string {
	switch {
	case s.n == 0:
		return fmt.Sprint(s.c)
	case s.c == 1:
		return "N"
	}
	return fmt.Sprintf("%d·N", s.c)
}

func num(c int64) sym { return sym{c: c} }

// mul is s·t; ok is false when that is not c·N^n with n ≤ 1 or overflows.
func (s sym) mul(t sym) (sym, bool) {
	c, ok := mulExact(s.c, t.c)
	n := s.n + t.n
	return sym{c, n}, ok && n <= 1
}

// div is s/t, exact; ok is false when it is not an integer of that form.
func (s sym) div(t sym) (sym, bool) {
	if t.c == 0 || s.n < t.n || s.c%t.c != 0 {
		return sym{}, false
	}
	return sym{s.c / t.c, s.n - t.n}, true
}

// add is s+t; only terms of one degree add (N + 1 has no form here).
func (s sym) add(t sym) (sym, bool) {
	if s.n != t.n && s.c != 0 && t.c != 0 {
		return sym{}, false
	}
	n := max(s.n, t.n)
	if s.c == 0 {
		n = t.n
	} else if t.c == 0 {
		n = s.n
	}
	return sym{s.c + t.c, n}, true
}

func mulExact(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	p := a * b
	return p, p/b == a && !(a == -1 && b == -1<<63) && !(b == -1 && a == -1<<63)
}

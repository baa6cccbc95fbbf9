package dag

import "math/bits"

// mul64 multiplies non-negative int64 values, reporting overflow.
func mul64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > 1<<63-1 {
		return 0, false
	}
	return int64(lo), true
}

// add64 adds non-negative int64 values, reporting overflow.
func add64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > (1<<63-1)-b {
		return 0, false
	}
	return a + b, true
}

// sizer accumulates checked products and sums; the first overflow sticks.
type sizer struct{ bad bool }

func (s *sizer) mul(vs ...int64) int64 {
	p := int64(1)
	for _, v := range vs {
		var ok bool
		if p, ok = mul64(p, v); !ok {
			s.bad = true
			return 0
		}
	}
	return p
}

func (s *sizer) add(vs ...int64) int64 {
	t := int64(0)
	for _, v := range vs {
		var ok bool
		if t, ok = add64(t, v); !ok {
			s.bad = true
			return 0
		}
	}
	return t
}

package tensor

// AllFinite says whether every element of x is a finite number (neither NaN
// nor an infinity), reading x once: v−v is 0 for a finite v and NaN
// otherwise, and a sum of them stays 0 until it meets one NaN. With AVX2,
// 32 elements a trip in assembly (finiteVec), the rest in Go.
func AllFinite(x []float32) bool {
	body := 0
	if hasVMath {
		body = len(x) &^ 31
		if body > 0 && !finiteVec(&x[0], body) {
			return false
		}
	}
	var s0, s1, s2, s3 float32
	rest := x[body:]
	i := 0
	for ; i+4 <= len(rest); i += 4 {
		v := rest[i : i+4 : i+4]
		s0 += v[0] - v[0]
		s1 += v[1] - v[1]
		s2 += v[2] - v[2]
		s3 += v[3] - v[3]
	}
	for ; i < len(rest); i++ {
		s0 += rest[i] - rest[i]
	}
	return s0+s1+s2+s3 == 0
}

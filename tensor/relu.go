package tensor

// ReLU sets y[i] = x[i] where x[i] is not ≤ 0 (NaN passes, as in
// PyTorch) and +0 elsewhere; y and x have the same length and may be the
// same slice. With AVX2, 8 lanes a trip in assembly, the rest in Go: the
// same bits either way.
func ReLU(y, x []float32) {
	y = y[:len(x)]
	body := 0
	if hasVMath {
		body = len(x) &^ 7
		if body > 0 {
			reluVec(&y[0], &x[0], body)
		}
	}
	for i := body; i < len(x); i++ {
		v := x[i]
		if v <= 0 {
			v = 0
		}
		y[i] = v
	}
}

// ReLUGrad adds gy[i] to gx[i] where x[i] > 0, and leaves gx[i] alone
// elsewhere (NaN included: not even an Inf·0 flows); the three have one
// length. With AVX2, 8 lanes a trip, the same bits as the loop.
func ReLUGrad(gx, x, gy []float32) {
	gx, gy = gx[:len(x)], gy[:len(x)]
	body := 0
	if hasVMath {
		body = len(x) &^ 7
		if body > 0 {
			reluGradVec(&gx[0], &x[0], &gy[0], body)
		}
	}
	for i := body; i < len(x); i++ {
		if x[i] > 0 {
			gx[i] += gy[i]
		}
	}
}

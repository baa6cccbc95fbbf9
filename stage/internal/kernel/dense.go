package kernel

// linear: x [R, in] (R = every leading dim) → y [R, out] = x·Wᵀ + b;
// W [out, in] (PyTorch's layout), or W [in, out] with inOut (y = x·W), b [out].
type linear[T Num] struct{ bias, inOut bool }

func linearKernel[T Num](o *opArgs) *linear[T] {
	return &linear[T]{bias: o.op.Attrs.Bias, inOut: o.op.Attrs.WeightLayout == "in_out"}
}

// dims is the layer's input and output widths.
func (k *linear[T]) dims(w *Value[T]) (in, out int) {
	if k.inOut {
		return w.Shape[0], w.Shape[1]
	}
	return w.Shape[1], w.Shape[0]
}

func (k *linear[T]) Forward(x, p []*Value[T]) (*Value[T], any, error) {
	in, out := k.dims(p[0])
	r := Rows(x[0].Shape)
	shape := append(append([]int(nil), x[0].Shape[:len(x[0].Shape)-1]...), out)
	y := NewValue[T](shape...)
	if k.bias {
		for i := 0; i < r; i++ {
			copy(y.Data[i*out:(i+1)*out], p[1].Data)
		}
	}
	if k.inOut {
		gemm(false, false, r, out, in, x[0].Data, in, p[0].Data, out, 1, y.Data, out) // y[R,out] += x[R,in]·W[in,out]
	} else {
		gemm(false, true, r, out, in, x[0].Data, in, p[0].Data, in, 1, y.Data, out) // y[R,out] += x[R,in]·Wᵀ[in,out]
	}
	return y, nil, nil
}

func (k *linear[T]) Backward(gy *Value[T], x, p []*Value[T], _ *Value[T], _ any, gx, gp []*Value[T]) {
	in, out := k.dims(p[0])
	r := Rows(x[0].Shape)
	if gx[0] != nil {
		if k.inOut {
			gemm(false, true, r, in, out, gy.Data, out, p[0].Data, out, 1, gx[0].Data, in) // gx[R,in] += gy[R,out]·Wᵀ[out,in]
		} else {
			gemm(false, false, r, in, out, gy.Data, out, p[0].Data, in, 1, gx[0].Data, in) // gx[R,in] += gy[R,out]·W[out,in]
		}
	}
	if gp == nil {
		return
	}
	if gp[0] != nil {
		if k.inOut {
			gemm(true, false, in, out, r, x[0].Data, in, gy.Data, out, 1, gp[0].Data, out) // gW[in,out] += xᵀ[in,R]·gy[R,out]
		} else {
			gemm(true, false, out, in, r, gy.Data, out, x[0].Data, in, 1, gp[0].Data, in) // gW[out,in] += gyᵀ[out,R]·x[R,in]
		}
	}
	if k.bias && gp[1] != nil {
		for i := 0; i < r; i++ {
			addInto(gp[1].Data, gy.Data[i*out:(i+1)*out])
		}
	}
}

// matmul: a [n, L..., m, k] · b [n, L..., k, p] → [n, L..., m, p], one
// product per (sample, leading index).
type matmul[T Num] struct{}

func matmulKernel[T Num](*opArgs) *matmul[T] { return &matmul[T]{} }

func (matmul[T]) dims(a, b []int) (batch, m, kk, p int) {
	r := len(a)
	m, kk, p = a[r-2], a[r-1], b[r-1]
	batch = 1
	for _, d := range a[:r-2] {
		batch *= d
	}
	return
}

func (k *matmul[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	batch, m, kk, p := k.dims(x[0].Shape, x[1].Shape)
	shape := append(append([]int(nil), x[0].Shape[:len(x[0].Shape)-1]...), p)
	y := NewValue[T](shape...)
	gemmBatched(false, false, m, p, kk, x[0].Data, kk, m*kk, x[1].Data, p, kk*p, 0, y.Data, p, m*p, batch) // c[m,p] = a[m,k]·b[k,p], each sample
	return y, nil, nil
}

func (k *matmul[T]) Backward(gy *Value[T], x, _ []*Value[T], _ *Value[T], _ any, gx, _ []*Value[T]) {
	batch, m, kk, p := k.dims(x[0].Shape, x[1].Shape)
	if gx[0] != nil { // ga[m,k] += g[m,p]·bᵀ[p,k], each sample
		gemmBatched(false, true, m, kk, p, gy.Data, p, m*p, x[1].Data, p, kk*p, 1, gx[0].Data, kk, m*kk, batch)
	}
	if gx[1] != nil { // gb[k,p] += aᵀ[k,m]·g[m,p], each sample
		gemmBatched(true, false, kk, p, m, x[0].Data, kk, m*kk, gy.Data, p, m*p, 1, gx[1].Data, p, kk*p, batch)
	}
}

package kernel

import (
	"fmt"
	"math"
)

// batchNorm normalises each channel (axis 1) over the batch and every axis
// after it, in training mode; p is weight, bias, running_mean, running_var.
// In evaluation (ctx.pos.Eval) it normalises by the running statistics.
type batchNorm[T Num] struct {
	op       string
	eps      float64
	momentum float64
	ctx      *Pass // nil: always training
}

func batchNormKernel[T Num](o *opArgs) *batchNorm[T] {
	return &batchNorm[T]{op: o.op.Name, eps: o.op.Attrs.Eps, momentum: o.op.Attrs.Momentum, ctx: o.ctx}
}

type bnStash[T Num] struct {
	xhat []T
	rstd []float64 // per channel
}

// geometry is a value's batch, channels and values per (sample, channel).
func bnGeometry(shape []int) (n, c, s int) {
	n, c, s = shape[0], shape[1], 1
	for _, d := range shape[2:] {
		s *= d
	}
	return
}

func (k *batchNorm[T]) Forward(x, p []*Value[T]) (*Value[T], any, error) {
	if k.ctx != nil && k.ctx.Pos.Eval {
		return k.eval(x[0], p), nil, nil
	}
	n, c, s := bnGeometry(x[0].Shape)
	cnt := n * s
	if cnt < 2 {
		return nil, nil, &OpError{k.op, fmt.Sprintf("batch_norm needs more than one value per channel in training; a micro-batch of %d with %d per sample has %d", n, s, cnt)}
	}
	y := NewValue[T](x[0].Shape...)
	st := &bnStash[T]{xhat: make([]T, len(x[0].Data)), rstd: make([]float64, c)}
	for ch := 0; ch < c; ch++ {
		var mu, v float64
		for b := 0; b < n; b++ {
			for _, e := range x[0].Data[(b*c+ch)*s : (b*c+ch+1)*s] {
				mu += float64(e)
			}
		}
		mu /= float64(cnt)
		for b := 0; b < n; b++ {
			for _, e := range x[0].Data[(b*c+ch)*s : (b*c+ch+1)*s] {
				v += (float64(e) - mu) * (float64(e) - mu)
			}
		}
		v /= float64(cnt)
		rstd := 1 / math.Sqrt(v+k.eps)
		st.rstd[ch] = rstd
		wt, bs := float64(p[0].Data[ch]), float64(p[1].Data[ch])
		for b := 0; b < n; b++ {
			lo := (b*c + ch) * s
			for j, e := range x[0].Data[lo : lo+s] {
				xh := (float64(e) - mu) * rstd
				st.xhat[lo+j] = T(xh)
				y.Data[lo+j] = T(xh*wt + bs)
			}
		}
		if k.ctx != nil && k.ctx.Recomputing {
			continue // the first forward moved them
		}
		m := k.momentum // PyTorch: the running variance is the unbiased one
		p[2].Data[ch] = T((1-m)*float64(p[2].Data[ch]) + m*mu)
		p[3].Data[ch] = T((1-m)*float64(p[3].Data[ch]) + m*v*float64(cnt)/float64(cnt-1))
	}
	return y, st, nil
}

// eval is y = (x − running_mean)/√(running_var + eps)·weight + bias.
func (k *batchNorm[T]) eval(x *Value[T], p []*Value[T]) *Value[T] {
	n, c, s := bnGeometry(x.Shape)
	y := NewValue[T](x.Shape...)
	for ch := 0; ch < c; ch++ {
		rstd := 1 / math.Sqrt(float64(p[3].Data[ch])+k.eps)
		mu, wt, bs := float64(p[2].Data[ch]), float64(p[0].Data[ch]), float64(p[1].Data[ch])
		for b := 0; b < n; b++ {
			lo := (b*c + ch) * s
			for j, e := range x.Data[lo : lo+s] {
				y.Data[lo+j] = T((float64(e)-mu)*rstd*wt + bs)
			}
		}
	}
	return y
}

func (k *batchNorm[T]) Backward(gy *Value[T], _, p []*Value[T], _ *Value[T], stv any, gx, gp []*Value[T]) {
	st := stv.(*bnStash[T])
	n, c, s := bnGeometry(gy.Shape)
	cnt := float64(n * s)
	for ch := 0; ch < c; ch++ {
		var sg, sgx float64 // Σ gy and Σ gy·x̂ over the channel
		for b := 0; b < n; b++ {
			lo := (b*c + ch) * s
			for j, g := range gy.Data[lo : lo+s] {
				sg += float64(g)
				sgx += float64(g) * float64(st.xhat[lo+j])
			}
		}
		if gp != nil {
			if gp[0] != nil {
				gp[0].Data[ch] += T(sgx)
			}
			if gp[1] != nil {
				gp[1].Data[ch] += T(sg)
			}
		}
		if gx[0] == nil {
			continue
		}
		// gx = w·rstd/cnt · (cnt·gy − Σgy − x̂·Σgy·x̂)
		f := float64(p[0].Data[ch]) * st.rstd[ch] / cnt
		for b := 0; b < n; b++ {
			lo := (b*c + ch) * s
			for j, g := range gy.Data[lo : lo+s] {
				gx[0].Data[lo+j] += T(f * (cnt*float64(g) - sg - float64(st.xhat[lo+j])*sgx))
			}
		}
	}
}

// layerNorm over the last dim d: y = (x-μ)/√(σ²+eps)·w + b, per row.
type layerNorm[T Num] struct{ eps T }

func layerNormKernel[T Num](o *opArgs) *layerNorm[T] { return &layerNorm[T]{eps: T(o.op.Attrs.Eps)} }

type lnStash[T Num] struct{ xhat, rstd []T }

func (k *layerNorm[T]) Forward(x, p []*Value[T]) (*Value[T], any, error) {
	d := p[0].Shape[0]
	r := Rows(x[0].Shape)
	y := NewValue[T](x[0].Shape...)
	st := &lnStash[T]{xhat: make([]T, len(x[0].Data)), rstd: make([]T, r)}
	for i := 0; i < r; i++ {
		row := x[0].Data[i*d : (i+1)*d]
		var mu, v float64
		for _, e := range row {
			mu += float64(e)
		}
		mu /= float64(d)
		for _, e := range row {
			v += (float64(e) - mu) * (float64(e) - mu)
		}
		rstd := 1 / math.Sqrt(v/float64(d)+float64(k.eps))
		st.rstd[i] = T(rstd)
		for j, e := range row {
			xh := T((float64(e) - mu) * rstd)
			st.xhat[i*d+j] = xh
			y.Data[i*d+j] = xh*p[0].Data[j] + p[1].Data[j]
		}
	}
	return y, st, nil
}

func (k *layerNorm[T]) Backward(gy *Value[T], x, p []*Value[T], _ *Value[T], s any, gx, gp []*Value[T]) {
	st := s.(*lnStash[T])
	d := p[0].Shape[0]
	r := Rows(x[0].Shape)
	for i := 0; i < r; i++ {
		g := gy.Data[i*d : (i+1)*d]
		xh := st.xhat[i*d : (i+1)*d]
		if gp != nil {
			for j := range g {
				if gp[0] != nil {
					gp[0].Data[j] += g[j] * xh[j]
				}
				if gp[1] != nil {
					gp[1].Data[j] += g[j]
				}
			}
		}
		if gx[0] == nil {
			continue
		}
		var m1, m2 T // mean of ĝ and of ĝ·x̂, ĝ = g·w
		for j := range g {
			gh := g[j] * p[0].Data[j]
			m1 += gh
			m2 += gh * xh[j]
		}
		m1 /= T(d)
		m2 /= T(d)
		dst := gx[0].Data[i*d : (i+1)*d]
		for j := range g {
			dst[j] += st.rstd[i] * (g[j]*p[0].Data[j] - m1 - xh[j]*m2)
		}
	}
}

// softmax along axis (of the batch-major value), stabilised by the maximum.
type softmax[T Num] struct{ axis int }

func softmaxKernel[T Num](o *opArgs) *softmax[T] {
	return &softmax[T]{axis: axis(o.op.Attrs.Axis, len(o.in[0].Shape))}
}

func (k *softmax[T]) Forward(x, _ []*Value[T]) (*Value[T], any, error) {
	y := NewValue[T](x[0].Shape...)
	outer, n, inner := span(x[0].Shape, k.axis)
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			base := o*n*inner + in
			m := x[0].Data[base]
			for j := 1; j < n; j++ {
				m = max(m, x[0].Data[base+j*inner])
			}
			var sum float64
			for j := 0; j < n; j++ {
				e := exp64(float64(x[0].Data[base+j*inner] - m))
				y.Data[base+j*inner] = T(e)
				sum += e
			}
			for j := 0; j < n; j++ {
				y.Data[base+j*inner] = T(float64(y.Data[base+j*inner]) / sum)
			}
		}
	}
	return y, nil, nil
}

// backward: gx = y ⊙ (gy − Σ gy ⊙ y) along the axis.
func (k *softmax[T]) Backward(gy *Value[T], _, _ []*Value[T], y *Value[T], _ any, gx, _ []*Value[T]) {
	if gx[0] == nil {
		return
	}
	outer, n, inner := span(y.Shape, k.axis)
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			base := o*n*inner + in
			var dot float64
			for j := 0; j < n; j++ {
				dot += float64(gy.Data[base+j*inner]) * float64(y.Data[base+j*inner])
			}
			for j := 0; j < n; j++ {
				p := base + j*inner
				gx[0].Data[p] += T(float64(y.Data[p]) * (float64(gy.Data[p]) - dot))
			}
		}
	}
}

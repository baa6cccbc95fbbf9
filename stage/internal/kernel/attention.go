package kernel

import (
	"math"

	"github.com/graphpipe/graphpipe/tensor"
)

// attention is torch.nn.MultiheadAttention(d, heads, batch_first=True) as
// self-attention: x [n, s, d]; qkv = x·W_inᵀ + b_in [n, s, 3d] (q, k, v in
// that order, head h taking columns h·dh..(h+1)·dh of each); per head
// P = softmax(q·kᵀ/√dh) (causal: masked above the diagonal); ctx = P·v;
// y = ctx·W_outᵀ + b_out. Params: in_proj_weight [3d, d], in_proj_bias [3d],
// out_proj.weight [d, d], out_proj.bias [d].
type attention[T Num] struct {
	heads  int
	causal bool
}

func attentionKernel[T Num](o *opArgs) *attention[T] {
	return &attention[T]{heads: int(o.op.Attrs.Heads), causal: o.op.Attrs.Causal}
}

type attnStash[T Num] struct {
	qkv, probs, ctx []T // [n,s,3d], [n,h,s,s], [n,s,d]
	gqkv            []T // [n,s,3d]: kept by an inputs-only backward for the weights' pass
}

func (k *attention[T]) dims(x *Value[T]) (n, s, d, dh int) {
	n, s, d = x.Shape[0], x.Shape[1], x.Shape[2]
	return n, s, d, d / k.heads
}

func (k *attention[T]) Forward(x, p []*Value[T]) (*Value[T], any, error) {
	n, s, d, dh := k.dims(x[0])
	st := &attnStash[T]{qkv: make([]T, n*s*3*d), probs: make([]T, n*k.heads*s*s), ctx: make([]T, n*s*d)}
	for i := 0; i < n*s; i++ {
		copy(st.qkv[i*3*d:(i+1)*3*d], p[1].Data)
	}
	gemm(false, true, n*s, 3*d, d, x[0].Data, d, p[0].Data, d, 1, st.qkv, 3*d) // qkv[ns,3d] += x[ns,d]·W_inᵀ
	scale := T(1 / math.Sqrt(float64(dh)))
	EachItem(n*k.heads, s*s*dh, func(bh int) {
		b, h := bh/k.heads, bh%k.heads
		q := st.qkv[b*s*3*d+h*dh:]
		kk := st.qkv[b*s*3*d+d+h*dh:]
		v := st.qkv[b*s*3*d+2*d+h*dh:]
		pr := st.probs[bh*s*s : (bh+1)*s*s]
		gemm(false, true, s, s, dh, q, 3*d, kk, 3*d, 0, pr, s) // scores[s,s] = q[s,dh]·kᵀ
		for i := 0; i < s; i++ {
			softmaxRow(pr[i*s:(i+1)*s], scale, k.causal, i)
		}
		gemm(false, false, s, dh, s, pr, s, v, 3*d, 0, st.ctx[b*s*d+h*dh:], d) // ctx[s,dh] = P[s,s]·v[s,dh]
	})
	y := NewValue[T](n, s, d)
	for i := 0; i < n*s; i++ {
		copy(y.Data[i*d:(i+1)*d], p[3].Data)
	}
	gemm(false, true, n*s, d, d, st.ctx, d, p[2].Data, d, 1, y.Data, d) // y[ns,d] += ctx·W_outᵀ
	return y, st, nil
}

// softmaxRow turns scores into probabilities in place: softmax(scale·row),
// with columns past i masked out when causal.
func softmaxRow[T Num](row []T, scale T, causal bool, i int) {
	end := len(row)
	if causal {
		end = i + 1
	}
	if r32, ok := any(row[:end]).([]float32); ok {
		softmax32(r32, float32(scale))
		clear(row[end:])
		return
	}
	m := math.Inf(-1)
	for j := 0; j < end; j++ {
		m = math.Max(m, float64(row[j]*scale))
	}
	var sum float64
	for j := 0; j < end; j++ {
		e := math.Exp(float64(row[j]*scale) - m)
		row[j] = T(e)
		sum += e
	}
	for j := 0; j < end; j++ {
		row[j] = T(float64(row[j]) / sum)
	}
	for j := end; j < len(row); j++ {
		row[j] = 0
	}
}

// softmax32 is softmaxRow's float32 path: the max and the shift in float32,
// e^x by tensor.Exp (AVX2 where the CPU has it), the sum in float64.
func softmax32(row []float32, scale float32) {
	m := float32(math.Inf(-1))
	for j, v := range row {
		v *= scale
		row[j] = v
		if v > m {
			m = v
		}
	}
	for j := range row {
		row[j] -= m
	}
	tensor.Exp(row, row)
	var sum float64
	for _, e := range row {
		sum += float64(e)
	}
	for j := range row {
		row[j] = float32(float64(row[j]) / sum)
	}
}

func (k *attention[T]) Backward(gy *Value[T], x, p []*Value[T], _ *Value[T], s0 any, gx, gp []*Value[T]) {
	st := s0.(*attnStash[T])
	n, s, d, dh := k.dims(x[0])
	if gp != nil {
		if gp[2] != nil {
			gemm(true, false, d, d, n*s, gy.Data, d, st.ctx, d, 1, gp[2].Data, d) // gW_out[d,d] += gyᵀ·ctx
		}
		if gp[3] != nil {
			for i := 0; i < n*s; i++ {
				addInto(gp[3].Data, gy.Data[i*d:(i+1)*d])
			}
		}
	}
	if gx[0] == nil && (gp == nil || gp[0] == nil && gp[1] == nil) {
		return
	}
	gqkv := st.gqkv
	if gqkv == nil {
		gqkv = k.qkvGrad(gy, p, st, n, s, d, dh)
	}
	st.gqkv = nil
	if gx[0] != nil {
		gemm(false, false, n*s, d, 3*d, gqkv, 3*d, p[0].Data, d, 1, gx[0].Data, d) // gx[ns,d] += gqkv·W_in
		if gp == nil {                                                             // the weights' pass follows: keep what it needs
			st.gqkv = gqkv
		}
	}
	if gp != nil {
		if gp[0] != nil {
			gemm(true, false, 3*d, d, n*s, gqkv, 3*d, x[0].Data, d, 1, gp[0].Data, d) // gW_in[3d,d] += gqkvᵀ·x
		}
		if gp[1] != nil {
			for i := 0; i < n*s; i++ {
				addInto(gp[1].Data, gqkv[i*3*d:(i+1)*3*d])
			}
		}
	}
}

// qkvGrad is the gradient of the stacked q, k, v projections, [n,s,3d], from
// the output gradient gy [n,s,d] through the output projection and softmax.
func (k *attention[T]) qkvGrad(gy *Value[T], p []*Value[T], st *attnStash[T], n, s, d, dh int) []T {
	gctx := make([]T, n*s*d)
	gemm(false, false, n*s, d, d, gy.Data, d, p[2].Data, d, 0, gctx, d) // gctx[ns,d] = gy·W_out
	gqkv := make([]T, n*s*3*d)
	scale := T(1 / math.Sqrt(float64(dh)))
	EachItem(n*k.heads, s*s*dh, func(bh int) {
		b, h := bh/k.heads, bh%k.heads
		base := b * s * 3 * d
		q, kk, v := st.qkv[base+h*dh:], st.qkv[base+d+h*dh:], st.qkv[base+2*d+h*dh:]
		gq, gk, gv := gqkv[base+h*dh:], gqkv[base+d+h*dh:], gqkv[base+2*d+h*dh:]
		pr := st.probs[bh*s*s : (bh+1)*s*s]
		gc := gctx[b*s*d+h*dh:]
		gp2 := make([]T, s*s)
		gemm(false, true, s, s, dh, gc, d, v, 3*d, 0, gp2, s) // gP[s,s] = gctx[s,dh]·vᵀ
		gemm(true, false, s, dh, s, pr, s, gc, d, 1, gv, 3*d) // gv[s,dh] += Pᵀ·gctx
		for i := 0; i < s; i++ {                              // gS = P ⊙ (gP − Σ_j gP·P), times the scale
			row, g := pr[i*s:(i+1)*s], gp2[i*s:(i+1)*s]
			var dotp T
			for j := range row {
				dotp += row[j] * g[j]
			}
			for j := range row {
				g[j] = row[j] * (g[j] - dotp) * scale
			}
		}
		gemm(false, false, s, dh, s, gp2, s, kk, 3*d, 1, gq, 3*d) // gq[s,dh] += gS·k
		gemm(true, false, s, dh, s, gp2, s, q, 3*d, 1, gk, 3*d)   // gk[s,dh] += gSᵀ·q
	})
	return gqkv
}

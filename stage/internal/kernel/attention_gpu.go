package kernel

import (
	"math"

	"github.com/graphpipe/graphpipe/tensor/cuda"
)

type gpuAttnStash struct {
	heads, probs, ctx Stashed  // q, k, v [3, n, h, s, dh]; probs [n, h, s, s]; ctx [n·s, d]
	gqkv              *Stashed // kept by an inputs-only backward for the weights' pass
	// lse, where the forward was fused (fusedAttention: probs is then
	// empty), is each (sample, head, query) row's log-sum-exp [n, h, s]
	lse *Stashed
}

// attnMaxDH is kernels.cu's GP_ATTN_DH: the widest head the fused kernels
// take.
const attnMaxDH = 256

// fusedAttention says whether attention runs fused (gp_attn_fwd and its
// backward: the scores never reach memory, their softmax in float32), as
// the residency's Compute or a test asks, for heads up to attnMaxDH wide.
// The fused kernels trade the scores' memory (s² a head and sample, kept
// for the backward) for their products on the CUDA cores rather than as
// GEMMs, and the backward's recomputing them.
func fusedAttention(s *Scope, dh int) bool {
	return (s.res.Compute().Fused || s.opts.fusedAttn) && dh <= attnMaxDH
}

// gpuAttention computes what the CPU kernel does: qkv = x·W_inᵀ + b_in
// [n·s, 3d], head j of q, k, v at columns j·dh, d + j·dh, 2d + j·dh; probs
// [n, h, s, s]; ctx [n·s, d]; y = ctx·W_outᵀ + b_out. cuBLAS's strided
// batches take one stride per operand, and the (sample, head) blocks of qkv
// lie at two (a sample's rows, a head's columns), so the projections are
// first split into heads, [3, n, h, s, dh] (gp_heads_split, adding the bias
// on the way): every per-(sample, head) product is then one strided batch
// of n·h GEMMs, forward and backward, and the context is merged back
// (gp_heads_merge) for the output projection. The softmax runs over every
// (sample, head, query) row at once, in coalesced lanes (softmaxLanes). A
// layer runs 4 cuBLAS calls and 6 launches forward, 8 and 9 backward,
// whatever its samples and heads (TestAttentionLaunchesDry). Every buffer
// below is written in full by a GEMM with beta 0 or a kernel: none is
// zeroed first.
func gpuAttention(k *attention[float32]) (fwdFn, bwdFn) { return attentionWith(k, softmaxLanes) }

// softmaxKernels is attention's softmax over rows of length cols, forward
// (y may be x) and backward (gx (+)= scale·y·(gy − Σ gy·y), acc 0 writing
// instead; gx may be gy).
type softmaxKernels struct {
	fwd func(s *Scope, x, y cuda.Buffer, rows, cols int, scale float32, causal int32)
	bwd func(s *Scope, y, gy, gx cuda.Buffer, rows, cols int, scale float32, acc int32)
}

// softmaxLanes is the softmax a step runs: a row's columns read by lnLanes
// neighbouring threads, folded per row, then applied element by element
// (3 launches each way; kernels.cu's gp_softmax_part and after).
var softmaxLanes = softmaxKernels{
	fwd: func(s *Scope, x, y cuda.Buffer, rows, cols int, scale float32, causal int32) {
		mp, sp, m, sum := s.Scratch(rows*lnLanes), s.Scratch(rows*lnLanes), s.Scratch(rows), s.Scratch(rows)
		s.Launch("gp_softmax_part", rows*lnLanes, x, mp, sp, rows, cols, scale, causal)
		s.Launch("gp_softmax_fold", rows, mp, sp, m, sum, rows)
		s.Launch("gp_softmax_apply", rows*cols, x, m, sum, y, rows, cols, scale, causal)
	},
	bwd: func(s *Scope, y, gy, gx cuda.Buffer, rows, cols int, scale float32, acc int32) {
		part, d := s.Scratch(rows*lnLanes), s.Scratch(rows)
		s.Launch("gp_softmax_bwd_part", rows*lnLanes, y, gy, part, rows, cols)
		s.Launch("gp_lanes_fold", rows, part, d, rows)
		s.Launch("gp_softmax_bwd_apply", rows*cols, y, gy, d, gx, rows, cols, scale, acc)
	},
}

// softmaxRows is the same a thread per row, each walking its row (one
// launch each way, reads a row apart: uncoalesced): the lanes' oracle in
// the tests and the before of TestAttentionTimesOnGPU.
var softmaxRows = softmaxKernels{
	fwd: func(s *Scope, x, y cuda.Buffer, rows, cols int, scale float32, causal int32) {
		s.Launch("gp_softmax_rows", rows, x, y, rows, cols, scale, causal)
	},
	bwd: func(s *Scope, y, gy, gx cuda.Buffer, rows, cols int, scale float32, acc int32) {
		s.Launch("gp_softmax_rows_bwd", rows, y, gy, gx, rows, cols, scale, acc)
	},
}

// attentionWith is gpuAttention with the given softmax kernels.
func attentionWith(k *attention[float32], sm softmaxKernels) (fwdFn, bwdFn) {
	heads := k.heads
	c := int32(0)
	if k.causal {
		c = 1
	}
	type dims struct{ n, sq, d, dh int }
	dimsOf := func(x *Value[float32]) dims {
		return dims{x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[2] / heads}
	}
	fwd := func(s *Scope, x, p []*Value[float32]) (*Value[float32], any, error) {
		z := dimsOf(x[0])
		n, sq, d, dh := z.n, z.sq, z.d, z.dh
		nb, blk := n*heads, sq*dh // batches; elements of one (sample, head) block of q, k, v or ctx
		scale := float32(1 / math.Sqrt(float64(dh)))
		nctx, npr := n*sq*d, n*heads*sq*sq
		if fusedAttention(s, dh) {
			return fusedForward(s, x, p, z.n, sq, d, dh, heads, scale, c)
		}
		qkv, hd, pr := s.ActScratch(3*nctx), s.ActScratch(3*nctx), s.ActScratch(npr)
		s.gemm(cuda.GemmArgs{TransB: true, M: n * sq, N: 3 * d, K: d, Alpha: 1, A: s.In(x[0]), B: s.param(p[0]), C: qkv}) // qkv = x·W_inᵀ
		s.Launch("gp_heads_split", 3*nctx, qkv, s.param(p[1]), hd, n, sq, heads, dh, 3)                                   // heads = qkv + b_in
		q, kh, v := hd, hd.Offset(nctx), hd.Offset(2*nctx)
		// scores[s,s] = q[s,dh]·kᵀ per (sample, head)
		s.batched(cuda.GemmArgs{TransB: true, M: sq, N: sq, K: dh, Alpha: 1, A: q, B: kh, C: pr}, blk, blk, sq*sq, nb)
		sm.fwd(s, pr, pr, n*heads*sq, sq, scale, c) // every (sample, head, query) row at once
		ctxh, ctx := s.ActScratch(nctx), s.ActScratch(nctx)
		// ctx[s,dh] = P[s,s]·v[s,dh] per (sample, head)
		s.batched(cuda.GemmArgs{M: sq, N: dh, K: sq, Alpha: 1, A: pr, B: v, C: ctxh}, sq*sq, blk, blk, nb)
		s.Launch("gp_heads_merge", nctx, ctxh, ctx, n, sq, heads, dh, 1)
		y := s.newValue(n, sq, d)
		yb := s.ActScratch(nctx)
		s.gemm(cuda.GemmArgs{TransB: true, M: n * sq, N: d, K: d, Alpha: 1, A: ctx, B: s.param(p[2]), C: yb}) // y = ctx·W_outᵀ
		s.Launch("gp_bias", nctx, yb, s.param(p[3]), n*sq, d)
		s.out(y, yb)
		return y, &gpuAttnStash{heads: s.stash(hd, 3*nctx), probs: s.stash(pr, npr), ctx: s.stash(ctx, nctx)}, nil
	}
	// qkvGrad is the gradient of the stacked q, k, v projections, [n·s, 3d],
	// from gy through the output projection and the softmax.
	qkvGrad := func(s *Scope, g cuda.Buffer, p []*Value[float32], st *gpuAttnStash, z dims, scale float32) cuda.Buffer {
		n, sq, d, dh := z.n, z.sq, z.d, z.dh
		if st.lse != nil {
			return fusedQKVGrad(s, g, p, st, n, sq, d, dh, heads, scale, c)
		}
		nb, blk := n*heads, sq*dh
		nctx, npr := n*sq*d, n*heads*sq*sq
		hd, pr := s.unstash(st.heads), s.unstash(st.probs)
		q, kh, v := hd, hd.Offset(nctx), hd.Offset(2*nctx)
		gctx, gch := s.ActScratch(nctx), s.ActScratch(nctx)
		s.gemm(cuda.GemmArgs{M: n * sq, N: d, K: d, Alpha: 1, A: g, B: s.param(p[2]), C: gctx}) // gctx = gy·W_out
		s.Launch("gp_heads_split", nctx, gctx, cuda.Buffer{}, gch, n, sq, heads, dh, 1)
		ghd, gP := s.ActScratch(3*nctx), s.ActScratch(npr)
		gq, gk, gv := ghd, ghd.Offset(nctx), ghd.Offset(2*nctx)
		// gP[s,s] = gctx[s,dh]·vᵀ; gv[s,dh] = Pᵀ·gctx
		s.batched(cuda.GemmArgs{TransB: true, M: sq, N: sq, K: dh, Alpha: 1, A: gch, B: v, C: gP}, blk, blk, sq*sq, nb)
		s.batched(cuda.GemmArgs{TransA: true, M: sq, N: dh, K: sq, Alpha: 1, A: pr, B: gch, C: gv}, sq*sq, blk, blk, nb)
		// gS = scale · P ⊙ (gP − Σ gP·P), every row at once, in gP's place
		sm.bwd(s, pr, gP, gP, n*heads*sq, sq, scale, int32(0))
		// gq[s,dh] = gS·k; gk[s,dh] = gSᵀ·q
		s.batched(cuda.GemmArgs{M: sq, N: dh, K: sq, Alpha: 1, A: gP, B: kh, C: gq}, sq*sq, blk, blk, nb)
		s.batched(cuda.GemmArgs{TransA: true, M: sq, N: dh, K: sq, Alpha: 1, A: gP, B: q, C: gk}, sq*sq, blk, blk, nb)
		gqkv := s.ActScratch(3 * nctx)
		s.Launch("gp_heads_merge", 3*nctx, ghd, gqkv, n, sq, heads, dh, 3)
		return gqkv
	}
	bwd := func(s *Scope, gy *Value[float32], x, p []*Value[float32], _ *Value[float32], st0 any, gx, gp []*Value[float32]) {
		st := st0.(*gpuAttnStash)
		z := dimsOf(x[0])
		n, sq, d, dh := z.n, z.sq, z.d, z.dh
		scale := float32(1 / math.Sqrt(float64(dh)))
		g := s.In(gy)
		if gp != nil {
			if gp[2] != nil {
				b := s.pacc(gp[2])
				s.gemm(cuda.GemmArgs{TransA: true, M: d, N: d, K: n * sq, Alpha: 1, Beta: 1, A: g, B: s.unstash(st.ctx), C: b}) // gW_out += gyᵀ·ctx
				s.back(gp[2], b)
			}
			if gp[3] != nil {
				b := s.pacc(gp[3])
				s.colSums(g, n*sq, d, b)
				s.back(gp[3], b)
			}
		}
		if gx[0] == nil && (gp == nil || gp[0] == nil && gp[1] == nil) {
			return
		}
		var gqkv cuda.Buffer
		if st.gqkv != nil {
			gqkv = s.unstash(*st.gqkv)
		} else {
			gqkv = qkvGrad(s, g, p, st, z, scale)
		}
		st.gqkv = nil
		if gx[0] != nil {
			b := s.acc(gx[0])
			s.gemm(cuda.GemmArgs{M: n * sq, N: d, K: 3 * d, Alpha: 1, Beta: 1, A: gqkv, B: s.param(p[0]), C: b}) // gx += gqkv·W_in
			s.back(gx[0], b)
			if gp == nil { // the weights' pass follows: keep what it needs
				sb := s.stash(gqkv, n*sq*3*d)
				st.gqkv = &sb
			}
		}
		if gp != nil && gp[0] != nil {
			b := s.pacc(gp[0])
			s.gemm(cuda.GemmArgs{TransA: true, M: 3 * d, N: d, K: n * sq, Alpha: 1, Beta: 1, A: gqkv, B: s.In(x[0]), C: b}) // gW_in += gqkvᵀ·x
			s.back(gp[0], b)
		}
		if gp != nil && gp[1] != nil {
			b := s.pacc(gp[1])
			s.colSums(gqkv, n*sq, 3*d, b)
			s.back(gp[1], b)
		}
	}
	return fwd, bwd
}

// fusedForward is attention's forward with the fused kernel: the
// projections and heads as the unfused forward makes them, then
// gp_attn_fwd from q, k, v to the context's heads and each row's
// log-sum-exp, which the backward keeps instead of the probabilities.
func fusedForward(s *Scope, x, p []*Value[float32], n, sq, d, dh, heads int, scale float32, causal int32) (*Value[float32], any, error) {
	nctx, rows := n*sq*d, n*heads*sq
	qkv, hd := s.ActScratch(3*nctx), s.ActScratch(3*nctx)
	s.gemm(cuda.GemmArgs{TransB: true, M: n * sq, N: 3 * d, K: d, Alpha: 1, A: s.In(x[0]), B: s.param(p[0]), C: qkv}) // qkv = x·W_inᵀ
	s.Launch("gp_heads_split", 3*nctx, qkv, s.param(p[1]), hd, n, sq, heads, dh, 3)                                   // heads = qkv + b_in
	ctxh, ctx, lse := s.ActScratch(nctx), s.ActScratch(nctx), s.Scratch(rows)
	s.Launch("gp_attn_fwd", rows, hd, hd.Offset(nctx), hd.Offset(2*nctx), ctxh, lse, rows, sq, dh, scale, causal)
	s.Launch("gp_heads_merge", nctx, ctxh, ctx, n, sq, heads, dh, 1)
	y := s.newValue(n, sq, d)
	yb := s.ActScratch(nctx)
	s.gemm(cuda.GemmArgs{TransB: true, M: n * sq, N: d, K: d, Alpha: 1, A: ctx, B: s.param(p[2]), C: yb}) // y = ctx·W_outᵀ
	s.Launch("gp_bias", nctx, yb, s.param(p[3]), n*sq, d)
	s.out(y, yb)
	l := s.stash(lse, rows)
	return y, &gpuAttnStash{heads: s.stash(hd, 3*nctx), ctx: s.stash(ctx, nctx), lse: &l}, nil
}

// fusedQKVGrad is the unfused backward's qkvGrad with the fused kernels:
// the context's gradient through the output projection, FlashAttention's
// D (gp_attn_rowdot), then q's gradient a query row a thread and k's and
// v's a key row a thread, the probabilities made again from q, k and the
// log-sum-exp, never stored.
func fusedQKVGrad(s *Scope, g cuda.Buffer, p []*Value[float32], st *gpuAttnStash, n, sq, d, dh, heads int, scale float32, causal int32) cuda.Buffer {
	nctx, rows := n*sq*d, n*heads*sq
	hd, ctx, lse := s.unstash(st.heads), s.unstash(st.ctx), s.unstash(*st.lse)
	q, kh, v := hd, hd.Offset(nctx), hd.Offset(2*nctx)
	gctx, gch, dd := s.ActScratch(nctx), s.ActScratch(nctx), s.Scratch(rows)
	s.gemm(cuda.GemmArgs{M: n * sq, N: d, K: d, Alpha: 1, A: g, B: s.param(p[2]), C: gctx}) // gctx = gy·W_out
	s.Launch("gp_heads_split", nctx, gctx, cuda.Buffer{}, gch, n, sq, heads, dh, 1)
	s.Launch("gp_attn_rowdot", rows, gctx, ctx, dd, n, sq, heads, dh)
	ghd := s.ActScratch(3 * nctx)
	s.Launch("gp_attn_bwd_dq", rows, q, kh, v, gch, lse, dd, ghd, rows, sq, dh, scale, causal)
	s.Launch("gp_attn_bwd_dkv", rows, q, kh, v, gch, lse, dd, ghd.Offset(nctx), ghd.Offset(2*nctx), rows, sq, dh, scale, causal)
	gqkv := s.ActScratch(3 * nctx)
	s.Launch("gp_heads_merge", 3*nctx, ghd, gqkv, n, sq, heads, dh, 3)
	return gqkv
}

// graphpipe's CUDA kernels, compiled by NVRTC at first use (package cuda).
// Row-major; n counts elements; backward kernels accumulate (+=) into their
// gradients. Each kernel is a grid-stride loop, one thread per output
// element, per row, or per part of a reduction (a chunk of rows, a lane of
// a row: folded by a second kernel in a fixed order), with no shared memory
// and no warp-level operations, so a launch of any grid size is correct and
// the CPU emulator runs the same code.

#define NEG_INF __int_as_float(0xff800000)
#define LOOP(i, n) for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long)blockDim.x * gridDim.x)

extern "C" {

// y[i] = v
__global__ void gp_fill(float* y, float v, long n) { LOOP(i, n) y[i] = v; }

// dst[i] += src[i]
__global__ void gp_add_into(float* dst, const float* src, long n) { LOOP(i, n) dst[i] += src[i]; }

// y += a · x
__global__ void gp_axpy(float* y, const float* x, float a, long n) { LOOP(i, n) y[i] += a * x[i]; }

// y[b, p] = Σ_e xi[b, e] · xj[b, e]   xi, xj: [n, d]; y: [n, pairs]
__global__ void gp_dot_pair(const float* xi, const float* xj, float* y, long n, long d, long pairs, long p) {
  LOOP(b, n) {
    float s = 0.f;
    for (long e = 0; e < d; e++) s += xi[b * d + e] * xj[b * d + e];
    y[b * pairs + p] = s;
  }
}

// gx[b, e] += gy[b, p] · other[b, e]
__global__ void gp_dot_pair_bwd(const float* gy, const float* other, float* gx, long n, long d, long pairs, long p) {
  LOOP(i, n * d) gx[i] += gy[(i / d) * pairs + p] * other[i];
}

// y = a + b
__global__ void gp_add(const float* a, const float* b, float* y, long n) { LOOP(i, n) y[i] = a[i] + b[i]; }

// y = a * b
__global__ void gp_mul(const float* a, const float* b, float* y, long n) { LOOP(i, n) y[i] = a[i] * b[i]; }

// ga += gy * b; gb += gy * a (either may be null)
__global__ void gp_mul_bwd(const float* gy, const float* a, const float* b, float* ga, float* gb, long n) {
  LOOP(i, n) {
    if (ga) ga[i] += gy[i] * b[i];
    if (gb) gb[i] += gy[i] * a[i];
  }
}

// kind: 0 relu, 1 gelu (exact, erf), 2 tanh, 3 sigmoid
__global__ void gp_act(int kind, const float* x, float* y, long n) {
  LOOP(i, n) {
    float v = x[i];
    switch (kind) {
      case 0: y[i] = v > 0.f ? v : 0.f; break;
      case 1: y[i] = 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); break;
      case 2: y[i] = tanhf(v); break;
      default: y[i] = 1.f / (1.f + expf(-v)); break;
    }
  }
}

// gx += gy · act'(x), with y = act(x)
__global__ void gp_act_bwd(int kind, const float* x, const float* y, const float* gy, float* gx, long n) {
  LOOP(i, n) {
    float v = x[i], d;
    switch (kind) {
      case 0: d = v > 0.f ? 1.f : 0.f; break;
      case 1: d = 0.5f * (1.f + erff(v * 0.70710678118654752f)) + v * expf(-0.5f * v * v) * 0.3989422804014327f; break;
      case 2: d = 1.f - y[i] * y[i]; break;
      default: d = y[i] * (1.f - y[i]); break;
    }
    gx[i] += gy[i] * d;
  }
}

// y[r, c] += b[c]   y: [rows, cols]
__global__ void gp_bias(float* y, const float* b, long rows, long cols) { LOOP(i, rows * cols) y[i] += b[i % cols]; }

// Column sums in two passes, so that a [rows, cols] matrix with few
// columns still fills the GPU and the order of the additions is fixed: a
// thread per (chunk of rows k, column c) sums its chunk into part[k, c],
// then a thread per column folds the parts.
// part[k, c] = Σ_{r in chunk k} gy[r, c]
__global__ void gp_colsum_part(const float* gy, float* part, long rows, long cols, long chunk, long parts) {
  LOOP(i, parts * cols) {
    long k = i / cols, c = i % cols, end = (k + 1) * chunk < rows ? (k + 1) * chunk : rows;
    float s = 0.f;
    for (long r = k * chunk; r < end; r++) s += gy[r * cols + c];
    part[i] = s;
  }
}

// dst[c] += Σ_k part[k, c]
__global__ void gp_colsum_fold(const float* part, float* dst, long parts, long cols) {
  LOOP(c, cols) {
    float s = 0.f;
    for (long k = 0; k < parts; k++) s += part[k * cols + c];
    dst[c] += s;
  }
}

// Layer norm over the last axis in coalesced passes: a row's sums are
// taken by LANES threads side by side (lane j adds columns j, j + LANES,
// ...: neighbouring threads read neighbouring addresses), folded per row,
// then applied one thread per element. x, y, gy, gx: [rows, cols]; mean,
// rstd, s1, s2: [rows]; parts: [rows, LANES].
#define LANES 32

// part[r, j] = Σ_{c ≡ j} x[r, c]            (mean == 0)
//            = Σ_{c ≡ j} (x[r, c] − mean[r])²  (mean != 0)
__global__ void gp_layernorm_part(const float* x, const float* mean, float* part, long rows, long cols) {
  LOOP(i, rows * LANES) {
    long r = i / LANES, j = i % LANES;
    const float* xr = x + r * cols;
    float s = 0.f;
    if (mean) { float m = mean[r]; for (long c = j; c < cols; c += LANES) { float d = xr[c] - m; s += d * d; } }
    else for (long c = j; c < cols; c += LANES) s += xr[c];
    part[i] = s;
  }
}

// out[r] = Σ_j part[r, j] / cols, or rsqrt of that + eps when rsqrt_eps
__global__ void gp_layernorm_fold(const float* part, float* out, long rows, long cols, float eps, int rsqrt_eps) {
  LOOP(r, rows) {
    float s = 0.f;
    for (long j = 0; j < LANES; j++) s += part[r * LANES + j];
    s /= cols;
    out[r] = rsqrt_eps ? rsqrtf(s + eps) : s;
  }
}

// y = (x − mean) · rstd · g + b   one thread per element
__global__ void gp_layernorm_apply(const float* x, const float* g, const float* b, const float* mean, const float* rstd, float* y, long rows, long cols) {
  LOOP(i, rows * cols) { long r = i / cols, c = i % cols; y[i] = (x[i] - mean[r]) * rstd[r] * g[c] + b[c]; }
}

// p1[r, j] = Σ_{c ≡ j} gŷ; p2[r, j] = Σ_{c ≡ j} gŷ · x̂, gŷ = gy · g
__global__ void gp_layernorm_bwd_x_part(const float* x, const float* g, const float* mean, const float* rstd, const float* gy, float* p1, float* p2, long rows, long cols) {
  LOOP(i, rows * LANES) {
    long r = i / LANES, j = i % LANES;
    const float* xr = x + r * cols; const float* gr = gy + r * cols;
    float m = mean[r], rs = rstd[r], s1 = 0.f, s2 = 0.f;
    for (long c = j; c < cols; c += LANES) { float gh = gr[c] * g[c]; s1 += gh; s2 += gh * (xr[c] - m) * rs; }
    p1[i] = s1; p2[i] = s2;
  }
}

// gx += rstd · (gŷ − mean(gŷ) − x̂ · mean(gŷ · x̂)), the means s1, s2 folded per row
__global__ void gp_layernorm_bwd_x_apply(const float* x, const float* g, const float* mean, const float* rstd, const float* gy, const float* s1, const float* s2, float* gx, long rows, long cols) {
  LOOP(i, rows * cols) {
    long r = i / cols, c = i % cols;
    float rs = rstd[r], xh = (x[i] - mean[r]) * rs;
    gx[i] += rs * (gy[i] * g[c] - s1[r] - xh * s2[r]);
  }
}

// the parts of layer norm's parameter gradients (folded by gp_colsum_fold):
// pg[k, c] = Σ_{r in chunk k} gy · x̂; pb[k, c] = Σ_{r in chunk k} gy
__global__ void gp_layernorm_bwd_p_part(const float* x, const float* mean, const float* rstd, const float* gy, float* pg, float* pb, long rows, long cols, long chunk, long parts) {
  LOOP(i, parts * cols) {
    long k = i / cols, c = i % cols, end = (k + 1) * chunk < rows ? (k + 1) * chunk : rows;
    float sg = 0.f, sb = 0.f;
    for (long r = k * chunk; r < end; r++) {
      float v = gy[r * cols + c];
      sg += v * (x[r * cols + c] - mean[r]) * rstd[r];
      sb += v;
    }
    pg[i] = sg; pb[i] = sb;
  }
}

// softmax of scale·x over rows of length cols; causal masks j > (r mod cols)
__global__ void gp_softmax(const float* x, float* y, long rows, long cols, float scale, int causal) {
  LOOP(r, rows) {
    const float* xr = x + r * cols; float* yr = y + r * cols;
    long last = causal ? (r % cols) : cols - 1;
    float m = NEG_INF;
    for (long c = 0; c <= last; c++) m = fmaxf(m, scale * xr[c]);
    float s = 0.f;
    for (long c = 0; c <= last; c++) { yr[c] = expf(scale * xr[c] - m); s += yr[c]; }
    for (long c = 0; c < cols; c++) yr[c] = c <= last ? yr[c] / s : 0.f;
  }
}

// gx += scale · y · (gy − Σ gy·y)
__global__ void gp_softmax_bwd(const float* y, const float* gy, float* gx, long rows, long cols, float scale) {
  LOOP(r, rows) {
    const float* yr = y + r * cols; const float* gr = gy + r * cols;
    float d = 0.f;
    for (long c = 0; c < cols; c++) d += gr[c] * yr[c];
    for (long c = 0; c < cols; c++) gx[r * cols + c] += scale * yr[c] * (gr[c] - d);
  }
}

// y[i, :] = w[idx[i], :]; bad[0] = 1 on an index outside [0, num)
__global__ void gp_embedding(const int* idx, const float* w, float* y, long n, long dim, long num, int* bad) {
  LOOP(i, n * dim) {
    long k = idx[i / dim];
    if (k < 0 || k >= num) { bad[0] = 1; continue; }
    y[i] = w[k * dim + i % dim];
  }
}

// gw[idx[i], :] += gy[i, :]
__global__ void gp_embedding_bwd(const int* idx, const float* gy, float* gw, long n, long dim, long num) {
  LOOP(i, n * dim) {
    long k = idx[i / dim];
    if (k >= 0 && k < num) atomicAdd(&gw[k * dim + i % dim], gy[i]);
  }
}

// y[b, :] = Σ_j w[idx[b, j], :] (÷ bag when mean)
__global__ void gp_embedding_bag(const int* idx, const float* w, float* y, long n, long bag, long dim, long num, int mean, int* bad) {
  LOOP(i, n * dim) {
    long b = i / dim, d = i % dim;
    float s = 0.f;
    for (long j = 0; j < bag; j++) {
      long k = idx[b * bag + j];
      if (k < 0 || k >= num) { bad[0] = 1; continue; }
      s += w[k * dim + d];
    }
    y[i] = mean ? s / bag : s;
  }
}

__global__ void gp_embedding_bag_bwd(const int* idx, const float* gy, float* gw, long n, long bag, long dim, long num, int mean) {
  LOOP(i, n * bag * dim) {
    long b = i / (bag * dim), j = (i / dim) % bag, d = i % dim;
    long k = idx[b * bag + j];
    float g = gy[b * dim + d];
    if (k >= 0 && k < num) atomicAdd(&gw[k * dim + d], mean ? g / bag : g);
  }
}

// Strided block copy: dst[o, dOff + c] (+)= src[o, c] for o < outer,
// c < width, rows of dst being dLen wide and of src width wide. Concat's
// forward copies each input into its slice; its backward adds the slice out.
__global__ void gp_copy_block(float* dst, long dLen, long dOff, const float* src, long sLen, long sOff, long outer, long width, int accumulate) {
  LOOP(i, outer * width) {
    long o = i / width, c = i % width;
    float v = src[o * sLen + sOff + c];
    float* p = &dst[o * dLen + dOff + c];
    *p = accumulate ? *p + v : v;
  }
}

// mean over the middle axis of x: [outer, len, inner] -> y: [outer, inner]
__global__ void gp_mean(const float* x, float* y, long outer, long len, long inner) {
  LOOP(i, outer * inner) {
    long o = i / inner, k = i % inner;
    float s = 0.f;
    for (long j = 0; j < len; j++) s += x[(o * len + j) * inner + k];
    y[i] = s / len;
  }
}

__global__ void gp_mean_bwd(const float* gy, float* gx, long outer, long len, long inner) {
  LOOP(i, outer * len * inner) {
    long o = i / (len * inner), k = i % inner;
    gx[i] += gy[o * inner + k] / len;
  }
}

// Losses write per-row terms; the host sums them (in float64).
// ce: rows of logits x: [n, c], labels lab; term[r] = logsumexp − x[lab];
// probs keeps the softmax for the backward.
__global__ void gp_ce(const float* x, const int* lab, float* probs, float* term, long n, long c, int* bad) {
  LOOP(r, n) {
    const float* xr = x + r * c;
    long l = lab[r];
    if (l < 0 || l >= c) { bad[0] = 1; term[r] = 0.f; continue; }
    float m = NEG_INF;
    for (long j = 0; j < c; j++) m = fmaxf(m, xr[j]);
    float s = 0.f;
    for (long j = 0; j < c; j++) { float e = expf(xr[j] - m); probs[r * c + j] = e; s += e; }
    for (long j = 0; j < c; j++) probs[r * c + j] /= s;
    term[r] = logf(s) + m - xr[l];
  }
}

// gx += g · (probs − onehot(lab)), g = gy / n
__global__ void gp_ce_bwd(const float* probs, const int* lab, float g, float* gx, long n, long c) {
  LOOP(i, n * c) {
    long r = i / c, j = i % c;
    gx[i] += g * (probs[i] - (j == lab[r] ? 1.f : 0.f));
  }
}

// term[i] = (x − t)²; gx += g · 2(x − t)
__global__ void gp_mse(const float* x, const float* t, float* term, long n) { LOOP(i, n) { float d = x[i] - t[i]; term[i] = d * d; } }
__global__ void gp_mse_bwd(const float* x, const float* t, float g, float* gx, long n) { LOOP(i, n) gx[i] += g * 2.f * (x[i] - t[i]); }

// term[i] = max(x,0) − x·t + log(1 + e^−|x|); gx += g · (σ(x) − t)
__global__ void gp_bce(const float* x, const float* t, float* term, long n) {
  LOOP(i, n) { float v = x[i]; term[i] = fmaxf(v, 0.f) - v * t[i] + log1pf(expf(-fabsf(v))); }
}
__global__ void gp_bce_bwd(const float* x, const float* t, float g, float* gx, long n) {
  LOOP(i, n) gx[i] += g * (1.f / (1.f + expf(-x[i])) - t[i]);
}

// SGD with momentum: v = μv + g; w −= lr·v (μ = 0: w −= lr·g)
__global__ void gp_sgd(float* w, const float* g, float* v, float lr, float mu, long n) {
  LOOP(i, n) {
    float d = g[i];
    if (v) { v[i] = mu * v[i] + d; d = v[i]; }
    w[i] -= lr * d;
  }
}

// Adam, bias-corrected by c1 = 1 − β1^t and c2 = 1 − β2^t
__global__ void gp_adam(float* w, const float* g, float* m, float* v, float lr, float b1, float b2, float eps, float c1, float c2, long n) {
  LOOP(i, n) {
    m[i] = b1 * m[i] + (1.f - b1) * g[i];
    v[i] = b2 * v[i] + (1.f - b2) * g[i] * g[i];
    w[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
  }
}

// FP32 -> BF16 and FP16, round to nearest even
__global__ void gp_to_bf16(const float* x, unsigned short* y, long n) {
  LOOP(i, n) {
    unsigned int u = __float_as_uint(x[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u) { y[i] = 0x7fc0; continue; }
    u += 0x7fffu + ((u >> 16) & 1u);
    y[i] = (unsigned short)(u >> 16);
  }
}
__global__ void gp_to_f16(const float* x, unsigned short* y, long n) {
  LOOP(i, n) {
#ifdef GP_EMULATE
    _Float16 h = (_Float16)x[i];
    unsigned short u;
    memcpy(&u, &h, 2);
    y[i] = u;
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x[i]));
    y[i] = h;
#endif
  }
}

}  // extern "C"

// graphpipe's CUDA kernels, compiled by NVRTC at first use (package cuda).
// Row-major; n counts elements; backward kernels accumulate (+=) into their
// gradients. Each kernel is a grid-stride loop, one thread per output
// element, per row, or per part of a reduction (a chunk of rows, a lane of
// a row: folded by a second kernel in a fixed order), with no shared memory
// and no warp-level operations, so a launch of any grid size is correct and
// the CPU emulator runs the same code.

#define NEG_INF __int_as_float(0xff800000)
#define LOOP(i, n) for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long)blockDim.x * gridDim.x)

// bf16 storage. A bf16 run keeps its activations and their gradients in
// 16-bit elements (package cuda's half buffers): gp_h reads as the float
// it holds and stores a float rounded to nearest, ties to even (a NaN
// stays one: tensor.ToBF16), so a kernel computes in float whichever it
// stores. Each kernel that reads or writes activations is a template over
// their type A with two forms: name (float32) and name_h (bf16), whose
// activation pointers are gp_h; everything else (parameters, statistics,
// partial sums, loss terms) stays float32 in both.
struct gp_h {
  unsigned short u;
  __device__ operator float() const { return __uint_as_float((unsigned)u << 16); }
  __device__ gp_h& operator=(float v) {
    unsigned x = __float_as_uint(v);
    u = (x & 0x7fffffffu) > 0x7f800000u ? (unsigned short)0x7fc0 : (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    return *this;
  }
  __device__ gp_h& operator+=(float v) { return *this = (float)*this + v; }
  __device__ gp_h& operator-=(float v) { return *this = (float)*this - v; }
  __device__ gp_h& operator*=(float v) { return *this = (float)*this * v; }
  __device__ gp_h& operator/=(float v) { return *this = (float)*this / v; }
};

extern "C" {

// y[i] = v
extern "C++" {
template <class A> static __device__ void gp_fill_k(A* y, float v, long n) { LOOP(i, n) y[i] = v; }
}
__global__ void gp_fill(float* y, float v, long n) { gp_fill_k(y, v, n); }
__global__ void gp_fill_h(gp_h* y, float v, long n) { gp_fill_k(y, v, n); }

// dst[i] += src[i]
extern "C++" {
template <class A> static __device__ void gp_add_into_k(A* dst, const A* src, long n) { LOOP(i, n) dst[i] += src[i]; }
}
__global__ void gp_add_into(float* dst, const float* src, long n) { gp_add_into_k(dst, src, n); }
__global__ void gp_add_into_h(gp_h* dst, const gp_h* src, long n) { gp_add_into_k(dst, src, n); }

// y += a · x
extern "C++" {
template <class A> static __device__ void gp_axpy_k(A* y, const A* x, float a, long n) { LOOP(i, n) y[i] += a * x[i]; }
}
__global__ void gp_axpy(float* y, const float* x, float a, long n) { gp_axpy_k(y, x, a, n); }
__global__ void gp_axpy_h(gp_h* y, const gp_h* x, float a, long n) { gp_axpy_k(y, x, a, n); }

// y[b, p] = Σ_e xi[b, e] · xj[b, e]   xi, xj: [n, d]; y: [n, pairs]
extern "C++" {
template <class A> static __device__ void gp_dot_pair_k(const A* xi, const A* xj, A* y, long n, long d, long pairs, long p) {
  LOOP(b, n) {
    float s = 0.f;
    for (long e = 0; e < d; e++) s += xi[b * d + e] * xj[b * d + e];
    y[b * pairs + p] = s;
  }
}
}
__global__ void gp_dot_pair(const float* xi, const float* xj, float* y, long n, long d, long pairs, long p) { gp_dot_pair_k(xi, xj, y, n, d, pairs, p); }
__global__ void gp_dot_pair_h(const gp_h* xi, const gp_h* xj, gp_h* y, long n, long d, long pairs, long p) { gp_dot_pair_k(xi, xj, y, n, d, pairs, p); }

// gx[b, e] += gy[b, p] · other[b, e]
extern "C++" {
template <class A> static __device__ void gp_dot_pair_bwd_k(const A* gy, const A* other, A* gx, long n, long d, long pairs, long p) {
  LOOP(i, n * d) gx[i] += gy[(i / d) * pairs + p] * other[i];
}
}
__global__ void gp_dot_pair_bwd(const float* gy, const float* other, float* gx, long n, long d, long pairs, long p) { gp_dot_pair_bwd_k(gy, other, gx, n, d, pairs, p); }
__global__ void gp_dot_pair_bwd_h(const gp_h* gy, const gp_h* other, gp_h* gx, long n, long d, long pairs, long p) { gp_dot_pair_bwd_k(gy, other, gx, n, d, pairs, p); }

// y = a + b
extern "C++" {
template <class A> static __device__ void gp_add_k(const A* a, const A* b, A* y, long n) { LOOP(i, n) y[i] = a[i] + b[i]; }
}
__global__ void gp_add(const float* a, const float* b, float* y, long n) { gp_add_k(a, b, y, n); }
__global__ void gp_add_h(const gp_h* a, const gp_h* b, gp_h* y, long n) { gp_add_k(a, b, y, n); }

// y = a * b
extern "C++" {
template <class A> static __device__ void gp_mul_k(const A* a, const A* b, A* y, long n) { LOOP(i, n) y[i] = a[i] * b[i]; }
}
__global__ void gp_mul(const float* a, const float* b, float* y, long n) { gp_mul_k(a, b, y, n); }
__global__ void gp_mul_h(const gp_h* a, const gp_h* b, gp_h* y, long n) { gp_mul_k(a, b, y, n); }

// ga += gy * b; gb += gy * a (either may be null)
extern "C++" {
template <class A> static __device__ void gp_mul_bwd_k(const A* gy, const A* a, const A* b, A* ga, A* gb, long n) {
  LOOP(i, n) {
    if (ga) ga[i] += gy[i] * b[i];
    if (gb) gb[i] += gy[i] * a[i];
  }
}
}
__global__ void gp_mul_bwd(const float* gy, const float* a, const float* b, float* ga, float* gb, long n) { gp_mul_bwd_k(gy, a, b, ga, gb, n); }
__global__ void gp_mul_bwd_h(const gp_h* gy, const gp_h* a, const gp_h* b, gp_h* ga, gp_h* gb, long n) { gp_mul_bwd_k(gy, a, b, ga, gb, n); }

// Four floats moved as one 16-byte load or store: the kernels below that
// take them read and write HBM at its bandwidth where one float per
// thread and loop cannot keep enough bytes in flight (an H200 wants about
// 3 MB in flight, more than its resident threads' scalar loads give).
// The host takes them where n is a multiple of 4 and every pointer is
// 16-byte aligned (cuda.Vec4), and the scalar kernels otherwise.
struct alignas(16) gp_f4 { float x, y, z, w; };

// the activation (kind as gp_act's) of v, and its derivative at v (y = act(v))
static __device__ inline float gp_act_f(int kind, float v) {
  switch (kind) {
    case 0: return v > 0.f ? v : 0.f;
    case 1: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case 2: return tanhf(v);
  }
  return 1.f / (1.f + expf(-v));
}
static __device__ inline float gp_act_d(int kind, float v, float y) {
  switch (kind) {
    case 0: return v > 0.f ? 1.f : 0.f;
    case 1: return 0.5f * (1.f + erff(v * 0.70710678118654752f)) + v * expf(-0.5f * v * v) * 0.3989422804014327f;
    case 2: return 1.f - y * y;
  }
  return y * (1.f - y);
}

// gp_act over n4 groups of four
__global__ void gp_act4(int kind, const gp_f4* x, gp_f4* y, long n4) {
  LOOP(i, n4) {
    gp_f4 v = x[i];
    y[i] = gp_f4{gp_act_f(kind, v.x), gp_act_f(kind, v.y), gp_act_f(kind, v.z), gp_act_f(kind, v.w)};
  }
}

// gx = gy · act'(x) (add 0: gx is written, as a gradient nothing else has
// given to yet) or gx += gy · act'(x) (add 1), over n4 groups of four; y
// is read for tanh and sigmoid only
__global__ void gp_act4_bwd(int kind, const gp_f4* x, const gp_f4* y, const gp_f4* gy, gp_f4* gx, long n4, int add) {
  LOOP(i, n4) {
    gp_f4 v = x[i], g = gy[i], o = kind >= 2 ? y[i] : gp_f4{0.f, 0.f, 0.f, 0.f};
    gp_f4 r = {g.x * gp_act_d(kind, v.x, o.x), g.y * gp_act_d(kind, v.y, o.y), g.z * gp_act_d(kind, v.z, o.z), g.w * gp_act_d(kind, v.w, o.w)};
    if (add) {
      gp_f4 a = gx[i];
      r = gp_f4{a.x + r.x, a.y + r.y, a.z + r.z, a.w + r.w};
    }
    gx[i] = r;
  }
}

// y = a + b over n4 groups of four
__global__ void gp_add4(const gp_f4* a, const gp_f4* b, gp_f4* y, long n4) {
  LOOP(i, n4) {
    gp_f4 u = a[i], v = b[i];
    y[i] = gp_f4{u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w};
  }
}

// dst += src over n4 groups of four
__global__ void gp_add4_into(gp_f4* dst, const gp_f4* src, long n4) {
  LOOP(i, n4) {
    gp_f4 u = dst[i], v = src[i];
    dst[i] = gp_f4{u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w};
  }
}

// kind: 0 relu, 1 gelu (exact, erf), 2 tanh, 3 sigmoid
extern "C++" {
template <class A> static __device__ void gp_act_k(int kind, const A* x, A* y, long n) {
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
}
__global__ void gp_act(int kind, const float* x, float* y, long n) { gp_act_k(kind, x, y, n); }
__global__ void gp_act_h(int kind, const gp_h* x, gp_h* y, long n) { gp_act_k(kind, x, y, n); }

// gx += gy · act'(x) (add 1), or gx = that (add 0: a gradient nothing
// else has given to yet), with y = act(x)
extern "C++" {
template <class A> static __device__ void gp_act_bwd_k(int kind, const A* x, const A* y, const A* gy, A* gx, long n, int add) {
  LOOP(i, n) {
    float v = x[i], d;
    switch (kind) {
      case 0: d = v > 0.f ? 1.f : 0.f; break;
      case 1: d = 0.5f * (1.f + erff(v * 0.70710678118654752f)) + v * expf(-0.5f * v * v) * 0.3989422804014327f; break;
      case 2: d = 1.f - y[i] * y[i]; break;
      default: d = y[i] * (1.f - y[i]); break;
    }
    float r = gy[i] * d;
    gx[i] = add ? gx[i] + r : r;
  }
}
}
__global__ void gp_act_bwd(int kind, const float* x, const float* y, const float* gy, float* gx, long n, int add) { gp_act_bwd_k(kind, x, y, gy, gx, n, add); }
__global__ void gp_act_bwd_h(int kind, const gp_h* x, const gp_h* y, const gp_h* gy, gp_h* gx, long n, int add) { gp_act_bwd_k(kind, x, y, gy, gx, n, add); }

// y[r, c] += b[c]   y: [rows, cols]
extern "C++" {
template <class A> static __device__ void gp_bias_k(A* y, const float* b, long rows, long cols) { LOOP(i, rows * cols) y[i] += b[i % cols]; }
}
__global__ void gp_bias(float* y, const float* b, long rows, long cols) { gp_bias_k(y, b, rows, cols); }
__global__ void gp_bias_h(gp_h* y, const float* b, long rows, long cols) { gp_bias_k(y, b, rows, cols); }

// Column sums in two passes, so that a [rows, cols] matrix with few
// columns still fills the GPU and the order of the additions is fixed: a
// thread per (chunk of rows k, column c) sums its chunk into part[k, c],
// then a thread per column folds the parts.
// part[k, c] = Σ_{r in chunk k} gy[r, c]
extern "C++" {
template <class A> static __device__ void gp_colsum_part_k(const A* gy, float* part, long rows, long cols, long chunk, long parts) {
  LOOP(i, parts * cols) {
    long k = i / cols, c = i % cols, end = (k + 1) * chunk < rows ? (k + 1) * chunk : rows;
    float s = 0.f;
    for (long r = k * chunk; r < end; r++) s += gy[r * cols + c];
    part[i] = s;
  }
}
}
__global__ void gp_colsum_part(const float* gy, float* part, long rows, long cols, long chunk, long parts) { gp_colsum_part_k(gy, part, rows, cols, chunk, parts); }
__global__ void gp_colsum_part_h(const gp_h* gy, float* part, long rows, long cols, long chunk, long parts) { gp_colsum_part_k(gy, part, rows, cols, chunk, parts); }

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
extern "C++" {
template <class A> static __device__ void gp_layernorm_part_k(const A* x, const float* mean, float* part, long rows, long cols) {
  LOOP(i, rows * LANES) {
    long r = i / LANES, j = i % LANES;
    const A* xr = x + r * cols;
    float s = 0.f;
    if (mean) { float m = mean[r]; for (long c = j; c < cols; c += LANES) { float d = xr[c] - m; s += d * d; } }
    else for (long c = j; c < cols; c += LANES) s += xr[c];
    part[i] = s;
  }
}
}
__global__ void gp_layernorm_part(const float* x, const float* mean, float* part, long rows, long cols) { gp_layernorm_part_k(x, mean, part, rows, cols); }
__global__ void gp_layernorm_part_h(const gp_h* x, const float* mean, float* part, long rows, long cols) { gp_layernorm_part_k(x, mean, part, rows, cols); }

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
extern "C++" {
template <class A> static __device__ void gp_layernorm_apply_k(const A* x, const float* g, const float* b, const float* mean, const float* rstd, A* y, long rows, long cols) {
  LOOP(i, rows * cols) { long r = i / cols, c = i % cols; y[i] = (x[i] - mean[r]) * rstd[r] * g[c] + b[c]; }
}
}
__global__ void gp_layernorm_apply(const float* x, const float* g, const float* b, const float* mean, const float* rstd, float* y, long rows, long cols) { gp_layernorm_apply_k(x, g, b, mean, rstd, y, rows, cols); }
__global__ void gp_layernorm_apply_h(const gp_h* x, const float* g, const float* b, const float* mean, const float* rstd, gp_h* y, long rows, long cols) { gp_layernorm_apply_k(x, g, b, mean, rstd, y, rows, cols); }

// p1[r, j] = Σ_{c ≡ j} gŷ; p2[r, j] = Σ_{c ≡ j} gŷ · x̂, gŷ = gy · g
extern "C++" {
template <class A> static __device__ void gp_layernorm_bwd_x_part_k(const A* x, const float* g, const float* mean, const float* rstd, const A* gy, float* p1, float* p2, long rows, long cols) {
  LOOP(i, rows * LANES) {
    long r = i / LANES, j = i % LANES;
    const A* xr = x + r * cols; const A* gr = gy + r * cols;
    float m = mean[r], rs = rstd[r], s1 = 0.f, s2 = 0.f;
    for (long c = j; c < cols; c += LANES) { float gh = gr[c] * g[c]; s1 += gh; s2 += gh * (xr[c] - m) * rs; }
    p1[i] = s1; p2[i] = s2;
  }
}
}
__global__ void gp_layernorm_bwd_x_part(const float* x, const float* g, const float* mean, const float* rstd, const float* gy, float* p1, float* p2, long rows, long cols) { gp_layernorm_bwd_x_part_k(x, g, mean, rstd, gy, p1, p2, rows, cols); }
__global__ void gp_layernorm_bwd_x_part_h(const gp_h* x, const float* g, const float* mean, const float* rstd, const gp_h* gy, float* p1, float* p2, long rows, long cols) { gp_layernorm_bwd_x_part_k(x, g, mean, rstd, gy, p1, p2, rows, cols); }

// gx += rstd · (gŷ − mean(gŷ) − x̂ · mean(gŷ · x̂)), the means s1, s2 folded per row
extern "C++" {
template <class A> static __device__ void gp_layernorm_bwd_x_apply_k(const A* x, const float* g, const float* mean, const float* rstd, const A* gy, const float* s1, const float* s2, A* gx, long rows, long cols) {
  LOOP(i, rows * cols) {
    long r = i / cols, c = i % cols;
    float rs = rstd[r], xh = (x[i] - mean[r]) * rs;
    gx[i] += rs * (gy[i] * g[c] - s1[r] - xh * s2[r]);
  }
}
}
__global__ void gp_layernorm_bwd_x_apply(const float* x, const float* g, const float* mean, const float* rstd, const float* gy, const float* s1, const float* s2, float* gx, long rows, long cols) { gp_layernorm_bwd_x_apply_k(x, g, mean, rstd, gy, s1, s2, gx, rows, cols); }
__global__ void gp_layernorm_bwd_x_apply_h(const gp_h* x, const float* g, const float* mean, const float* rstd, const gp_h* gy, const float* s1, const float* s2, gp_h* gx, long rows, long cols) { gp_layernorm_bwd_x_apply_k(x, g, mean, rstd, gy, s1, s2, gx, rows, cols); }

// the parts of layer norm's parameter gradients (folded by gp_colsum_fold):
// pg[k, c] = Σ_{r in chunk k} gy · x̂; pb[k, c] = Σ_{r in chunk k} gy
extern "C++" {
template <class A> static __device__ void gp_layernorm_bwd_p_part_k(const A* x, const float* mean, const float* rstd, const A* gy, float* pg, float* pb, long rows, long cols, long chunk, long parts) {
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
}
__global__ void gp_layernorm_bwd_p_part(const float* x, const float* mean, const float* rstd, const float* gy, float* pg, float* pb, long rows, long cols, long chunk, long parts) { gp_layernorm_bwd_p_part_k(x, mean, rstd, gy, pg, pb, rows, cols, chunk, parts); }
__global__ void gp_layernorm_bwd_p_part_h(const gp_h* x, const float* mean, const float* rstd, const gp_h* gy, float* pg, float* pb, long rows, long cols, long chunk, long parts) { gp_layernorm_bwd_p_part_k(x, mean, rstd, gy, pg, pb, rows, cols, chunk, parts); }

// Attention's softmax over rows of length cols (x, y, gy, gx: [rows,
// cols]), with the lanes of layer norm: neighbouring threads read
// neighbouring columns of a row. Forward, three launches: each lane's max
// and sum of exponentials (gp_softmax_part), the lanes folded per row in
// lane order (gp_softmax_fold), then y element by element
// (gp_softmax_apply). Backward, three: Σ gy·y per lane
// (gp_softmax_bwd_part), per row (gp_lanes_fold), then gx
// (gp_softmax_bwd_apply). Causal rows r see columns c <= r mod cols; the
// rest of y is 0. Global memory per launch, for R rows: part reads x once
// (a lane reads its columns twice; the second read finds them in cache)
// and writes 2·R·LANES floats; fold reads those and writes 2·R; apply
// reads x and writes y (4 passes over x's size in all, x may be y); the
// backward reads y and gy twice and writes gx once (or reads it too, acc).

// mp[r, j] = max_{c ≡ j, c visible} scale·x[r, c]; sp[r, j] = Σ exp(scale·x − mp)
// (−∞ and 0 for a lane that sees no column)
extern "C++" {
template <class A> static __device__ void gp_softmax_part_k(const A* x, float* mp, float* sp, long rows, long cols, float scale, int causal) {
  LOOP(i, rows * LANES) {
    long r = i / LANES, j = i % LANES, last = causal ? (r % cols) : cols - 1;
    const A* xr = x + r * cols;
    float m = NEG_INF, s = 0.f;
    for (long c = j; c <= last; c += LANES) m = fmaxf(m, scale * xr[c]);
    for (long c = j; c <= last; c += LANES) s += expf(scale * xr[c] - m);
    mp[i] = m; sp[i] = s;
  }
}
}
__global__ void gp_softmax_part(const float* x, float* mp, float* sp, long rows, long cols, float scale, int causal) { gp_softmax_part_k(x, mp, sp, rows, cols, scale, causal); }
__global__ void gp_softmax_part_h(const gp_h* x, float* mp, float* sp, long rows, long cols, float scale, int causal) { gp_softmax_part_k(x, mp, sp, rows, cols, scale, causal); }

// m[r] = max_j mp[r, j]; s[r] = Σ_j sp[r, j] · exp(mp[r, j] − m[r]), j in order
__global__ void gp_softmax_fold(const float* mp, const float* sp, float* m, float* s, long rows) {
  LOOP(r, rows) {
    const float* mr = mp + r * LANES; const float* sr = sp + r * LANES;
    float mx = NEG_INF, sum = 0.f;
    for (long j = 0; j < LANES; j++) mx = fmaxf(mx, mr[j]);
    for (long j = 0; j < LANES; j++) if (sr[j] > 0.f) sum += sr[j] * expf(mr[j] - mx);
    m[r] = mx; s[r] = sum;
  }
}

// y[r, c] = exp(scale·x[r, c] − m[r]) / s[r], or 0 where causal hides c   (x may be y)
extern "C++" {
template <class A> static __device__ void gp_softmax_apply_k(const A* x, const float* m, const float* s, A* y, long rows, long cols, float scale, int causal) {
  LOOP(i, rows * cols) {
    long r = i / cols, c = i % cols, last = causal ? (r % cols) : cols - 1;
    y[i] = c <= last ? expf(scale * x[i] - m[r]) / s[r] : 0.f;
  }
}
}
__global__ void gp_softmax_apply(const float* x, const float* m, const float* s, float* y, long rows, long cols, float scale, int causal) { gp_softmax_apply_k(x, m, s, y, rows, cols, scale, causal); }
__global__ void gp_softmax_apply_h(const gp_h* x, const float* m, const float* s, gp_h* y, long rows, long cols, float scale, int causal) { gp_softmax_apply_k(x, m, s, y, rows, cols, scale, causal); }

// part[r, j] = Σ_{c ≡ j} gy[r, c] · y[r, c]
extern "C++" {
template <class A> static __device__ void gp_softmax_bwd_part_k(const A* y, const A* gy, float* part, long rows, long cols) {
  LOOP(i, rows * LANES) {
    long r = i / LANES, j = i % LANES;
    const A* yr = y + r * cols; const A* gr = gy + r * cols;
    float d = 0.f;
    for (long c = j; c < cols; c += LANES) d += gr[c] * yr[c];
    part[i] = d;
  }
}
}
__global__ void gp_softmax_bwd_part(const float* y, const float* gy, float* part, long rows, long cols) { gp_softmax_bwd_part_k(y, gy, part, rows, cols); }
__global__ void gp_softmax_bwd_part_h(const gp_h* y, const gp_h* gy, float* part, long rows, long cols) { gp_softmax_bwd_part_k(y, gy, part, rows, cols); }

// out[r] = Σ_j part[r, j], j in order
__global__ void gp_lanes_fold(const float* part, float* out, long rows) {
  LOOP(r, rows) {
    float s = 0.f;
    for (long j = 0; j < LANES; j++) s += part[r * LANES + j];
    out[r] = s;
  }
}

// gx (+)= scale · y · (gy − d[r])   (gx may be gy: each element reads its own gy first)
extern "C++" {
template <class A> static __device__ void gp_softmax_bwd_apply_k(const A* y, const A* gy, const float* d, A* gx, long rows, long cols, float scale, int acc) {
  LOOP(i, rows * cols) {
    float v = scale * y[i] * (gy[i] - d[i / cols]);
    gx[i] = acc ? gx[i] + v : v;
  }
}
}
__global__ void gp_softmax_bwd_apply(const float* y, const float* gy, const float* d, float* gx, long rows, long cols, float scale, int acc) { gp_softmax_bwd_apply_k(y, gy, d, gx, rows, cols, scale, acc); }
__global__ void gp_softmax_bwd_apply_h(const gp_h* y, const gp_h* gy, const float* d, gp_h* gx, long rows, long cols, float scale, int acc) { gp_softmax_bwd_apply_k(y, gy, d, gx, rows, cols, scale, acc); }

// The same softmax and backward a thread per row, each walking its row
// (consecutive threads read addresses a row apart): the simple kernels,
// kept as the lanes' oracle in the tests and as the benchmark's before
// (TestAttentionTimesOnGPU); nothing in a step runs them.
// softmax of scale·x over rows of length cols; causal masks j > (r mod cols)
extern "C++" {
template <class A> static __device__ void gp_softmax_rows_k(const A* x, A* y, long rows, long cols, float scale, int causal) {
  LOOP(r, rows) {
    const A* xr = x + r * cols; A* yr = y + r * cols;
    long last = causal ? (r % cols) : cols - 1;
    float m = NEG_INF;
    for (long c = 0; c <= last; c++) m = fmaxf(m, scale * xr[c]);
    float s = 0.f;
    for (long c = 0; c <= last; c++) { yr[c] = expf(scale * xr[c] - m); s += yr[c]; }
    for (long c = 0; c < cols; c++) yr[c] = c <= last ? yr[c] / s : 0.f;
  }
}
}
__global__ void gp_softmax_rows(const float* x, float* y, long rows, long cols, float scale, int causal) { gp_softmax_rows_k(x, y, rows, cols, scale, causal); }
__global__ void gp_softmax_rows_h(const gp_h* x, gp_h* y, long rows, long cols, float scale, int causal) { gp_softmax_rows_k(x, y, rows, cols, scale, causal); }

// gx += scale · y · (gy − Σ gy·y); with acc 0, gx = that (gx may be gy:
// a row's sum is taken before the row is written)
extern "C++" {
template <class A> static __device__ void gp_softmax_rows_bwd_k(const A* y, const A* gy, A* gx, long rows, long cols, float scale, int acc) {
  LOOP(r, rows) {
    const A* yr = y + r * cols; const A* gr = gy + r * cols;
    float d = 0.f;
    for (long c = 0; c < cols; c++) d += gr[c] * yr[c];
    for (long c = 0; c < cols; c++) {
      float v = scale * yr[c] * (gr[c] - d);
      gx[r * cols + c] = acc ? gx[r * cols + c] + v : v;
    }
  }
}
}
__global__ void gp_softmax_rows_bwd(const float* y, const float* gy, float* gx, long rows, long cols, float scale, int acc) { gp_softmax_rows_bwd_k(y, gy, gx, rows, cols, scale, acc); }
__global__ void gp_softmax_rows_bwd_h(const gp_h* y, const gp_h* gy, gp_h* gx, long rows, long cols, float scale, int acc) { gp_softmax_rows_bwd_k(y, gy, gx, rows, cols, scale, acc); }

// Attention's heads apart and together. rows [n·s, parts·d], d = h·dh,
// holds part t (q, k, v: parts 3; a context: parts 1) of head j at columns
// t·d + j·dh; heads [parts, n, h, s, dh] holds each (part, sample, head)
// block contiguous, so that one strided batch of GEMMs runs over every
// sample and head.
// heads[t, b, j, i, e] = rows[b·s + i, t·d + j·dh + e] + bias[t·d + j·dh + e]   (bias may be null)
extern "C++" {
template <class A> static __device__ void gp_heads_split_k(const A* rows, const float* bias, A* heads, long n, long s, long h, long dh, long parts) {
  LOOP(i, parts * n * s * h * dh) {
    long e = i % dh, r = i / dh;
    long q = r % s; r /= s;
    long j = r % h; r /= h;
    long b = r % n, t = r / n;
    long col = t * h * dh + j * dh + e;
    float v = rows[(b * s + q) * parts * h * dh + col];
    heads[i] = bias ? v + bias[col] : v;
  }
}
}
__global__ void gp_heads_split(const float* rows, const float* bias, float* heads, long n, long s, long h, long dh, long parts) { gp_heads_split_k(rows, bias, heads, n, s, h, dh, parts); }
__global__ void gp_heads_split_h(const gp_h* rows, const float* bias, gp_h* heads, long n, long s, long h, long dh, long parts) { gp_heads_split_k(rows, bias, heads, n, s, h, dh, parts); }

// rows[b·s + i, t·d + j·dh + e] = heads[t, b, j, i, e]   one thread per element of rows
extern "C++" {
template <class A> static __device__ void gp_heads_merge_k(const A* heads, A* rows, long n, long s, long h, long dh, long parts) {
  LOOP(i, n * s * parts * h * dh) {
    long w = parts * h * dh, row = i / w, col = i % w;
    long b = row / s, q = row % s;
    long t = col / (h * dh), j = (col % (h * dh)) / dh, e = col % dh;
    rows[i] = heads[(((t * n + b) * h + j) * s + q) * dh + e];
  }
}
}
__global__ void gp_heads_merge(const float* heads, float* rows, long n, long s, long h, long dh, long parts) { gp_heads_merge_k(heads, rows, n, s, h, dh, parts); }
__global__ void gp_heads_merge_h(const gp_h* heads, gp_h* rows, long n, long s, long h, long dh, long parts) { gp_heads_merge_k(heads, rows, n, s, h, dh, parts); }

// Fused attention (the flash-attention idea, in registers alone): softmax(scale·q·kᵀ)·v for
// each (sample, head, query) row by one thread, which streams the keys once,
// keeping the running max, the running sum of exponentials and the output
// row rescaled as the max moves (online softmax), in float32 whatever A
// stores; the s × s scores never reach memory. q, k, v, o: [n, h, s, dh]
// blocks (gp_heads_split's layout), rows = n·h·s; lse [rows] keeps each
// row's log-sum-exp for the backward. Causal rows see keys t ≤ i. dh ≤
// GP_ATTN_DH.
#define GP_ATTN_DH 256
extern "C++" {
template <class A> static __device__ void gp_attn_fwd_k(const A* q, const A* k, const A* v, A* o, float* lse, long rows, long s, long dh, float scale, int causal) {
  LOOP(r, rows) {
    long i = r % s, base = (r / s) * s * dh, last = causal ? i : s - 1;
    const A* qr = q + r * dh;
    float qv[GP_ATTN_DH], acc[GP_ATTN_DH];
    for (long e = 0; e < dh; e++) { qv[e] = qr[e]; acc[e] = 0.f; }
    float m = NEG_INF, l = 0.f;
    for (long t = 0; t <= last; t++) {
      const A* kt = k + base + t * dh; const A* vt = v + base + t * dh;
      float x = 0.f;
      for (long e = 0; e < dh; e++) x += qv[e] * kt[e];
      x *= scale;
      float mn = fmaxf(m, x), c = expf(m - mn), p = expf(x - mn);
      for (long e = 0; e < dh; e++) acc[e] = acc[e] * c + p * vt[e];
      l = l * c + p;
      m = mn;
    }
    A* orow = o + r * dh;
    for (long e = 0; e < dh; e++) orow[e] = acc[e] / l;
    lse[r] = m + logf(l);
  }
}

// d[row] = Σ gctx·ctx over the head's dh columns of the row layout
// ([n·s, h·dh], as gp_heads_merge writes): FlashAttention's D, the
// softmax backward's Σ gP·P, per (sample, head, query) row of [n, h, s].
template <class A> static __device__ void gp_attn_rowdot_k(const A* g, const A* o, float* d, long n, long s, long h, long dh) {
  LOOP(r, n * h * s) {
    long i = r % s, j = (r / s) % h, b = r / (s * h);
    long off = (b * s + i) * h * dh + j * dh;
    float sum = 0.f;
    for (long e = 0; e < dh; e++) sum += (float)g[off + e] * (float)o[off + e];
    d[r] = sum;
  }
}

// dq[i] (+)= scale · Σ_t P_it (gO_i·v_t − d_i) k_t, P_it = exp(scale·q_i·k_t − lse_i):
// one thread per query row, the keys streamed as in the forward
template <class A> static __device__ void gp_attn_bwd_dq_k(const A* q, const A* k, const A* v, const A* go, const float* lse, const float* d,
                                                           A* dq, long rows, long s, long dh, float scale, int causal) {
  LOOP(r, rows) {
    long i = r % s, base = (r / s) * s * dh, last = causal ? i : s - 1;
    float qv[GP_ATTN_DH], gv[GP_ATTN_DH], acc[GP_ATTN_DH];
    for (long e = 0; e < dh; e++) { qv[e] = q[r * dh + e]; gv[e] = go[r * dh + e]; acc[e] = 0.f; }
    float ls = lse[r], di = d[r];
    for (long t = 0; t <= last; t++) {
      const A* kt = k + base + t * dh; const A* vt = v + base + t * dh;
      float x = 0.f, dp = 0.f;
      for (long e = 0; e < dh; e++) { x += qv[e] * kt[e]; dp += gv[e] * vt[e]; }
      float ds = expf(scale * x - ls) * (dp - di);
      for (long e = 0; e < dh; e++) acc[e] += ds * kt[e];
    }
    for (long e = 0; e < dh; e++) dq[r * dh + e] = scale * acc[e];
  }
}

// dk[t] = scale · Σ_i P_it (gO_i·v_t − d_i) q_i; dv[t] = Σ_i P_it gO_i: one
// thread per key row, the queries that see it streamed
template <class A> static __device__ void gp_attn_bwd_dkv_k(const A* q, const A* k, const A* v, const A* go, const float* lse, const float* d,
                                                            A* dk, A* dv, long rows, long s, long dh, float scale, int causal) {
  LOOP(r, rows) {
    long t = r % s, base = (r / s) * s * dh, lrow = (r / s) * s;
    float kv[GP_ATTN_DH], vv[GP_ATTN_DH], ak[GP_ATTN_DH], av[GP_ATTN_DH];
    for (long e = 0; e < dh; e++) { kv[e] = k[r * dh + e]; vv[e] = v[r * dh + e]; ak[e] = 0.f; av[e] = 0.f; }
    for (long i = causal ? t : 0; i < s; i++) {
      const A* qi = q + base + i * dh; const A* gi = go + base + i * dh;
      float x = 0.f, dp = 0.f;
      for (long e = 0; e < dh; e++) { x += (float)qi[e] * kv[e]; dp += (float)gi[e] * vv[e]; }
      float p = expf(scale * x - lse[lrow + i]), ds = p * (dp - d[lrow + i]);
      for (long e = 0; e < dh; e++) { ak[e] += ds * qi[e]; av[e] += p * gi[e]; }
    }
    for (long e = 0; e < dh; e++) { dk[r * dh + e] = scale * ak[e]; dv[r * dh + e] = av[e]; }
  }
}
}
__global__ void gp_attn_fwd(const float* q, const float* k, const float* v, float* o, float* lse, long rows, long s, long dh, float scale, int causal) { gp_attn_fwd_k(q, k, v, o, lse, rows, s, dh, scale, causal); }
__global__ void gp_attn_fwd_h(const gp_h* q, const gp_h* k, const gp_h* v, gp_h* o, float* lse, long rows, long s, long dh, float scale, int causal) { gp_attn_fwd_k(q, k, v, o, lse, rows, s, dh, scale, causal); }
__global__ void gp_attn_rowdot(const float* g, const float* o, float* d, long n, long s, long h, long dh) { gp_attn_rowdot_k(g, o, d, n, s, h, dh); }
__global__ void gp_attn_rowdot_h(const gp_h* g, const gp_h* o, float* d, long n, long s, long h, long dh) { gp_attn_rowdot_k(g, o, d, n, s, h, dh); }
__global__ void gp_attn_bwd_dq(const float* q, const float* k, const float* v, const float* go, const float* lse, const float* d, float* dq, long rows, long s, long dh, float scale, int causal) { gp_attn_bwd_dq_k(q, k, v, go, lse, d, dq, rows, s, dh, scale, causal); }
__global__ void gp_attn_bwd_dq_h(const gp_h* q, const gp_h* k, const gp_h* v, const gp_h* go, const float* lse, const float* d, gp_h* dq, long rows, long s, long dh, float scale, int causal) { gp_attn_bwd_dq_k(q, k, v, go, lse, d, dq, rows, s, dh, scale, causal); }
__global__ void gp_attn_bwd_dkv(const float* q, const float* k, const float* v, const float* go, const float* lse, const float* d, float* dk, float* dv, long rows, long s, long dh, float scale, int causal) { gp_attn_bwd_dkv_k(q, k, v, go, lse, d, dk, dv, rows, s, dh, scale, causal); }
__global__ void gp_attn_bwd_dkv_h(const gp_h* q, const gp_h* k, const gp_h* v, const gp_h* go, const float* lse, const float* d, gp_h* dk, gp_h* dv, long rows, long s, long dh, float scale, int causal) { gp_attn_bwd_dkv_k(q, k, v, go, lse, d, dk, dv, rows, s, dh, scale, causal); }

// y[i, :] = w[idx[i], :]; bad[0] = 1 on an index outside [0, num)
extern "C++" {
template <class A> static __device__ void gp_embedding_k(const int* idx, const float* w, A* y, long n, long dim, long num, int* bad) {
  LOOP(i, n * dim) {
    long k = idx[i / dim];
    if (k < 0 || k >= num) { bad[0] = 1; continue; }
    y[i] = w[k * dim + i % dim];
  }
}
}
__global__ void gp_embedding(const int* idx, const float* w, float* y, long n, long dim, long num, int* bad) { gp_embedding_k(idx, w, y, n, dim, num, bad); }
__global__ void gp_embedding_h(const int* idx, const float* w, gp_h* y, long n, long dim, long num, int* bad) { gp_embedding_k(idx, w, y, n, dim, num, bad); }

// gw[idx[i], :] += gy[i, :]
extern "C++" {
template <class A> static __device__ void gp_embedding_bwd_k(const int* idx, const A* gy, float* gw, long n, long dim, long num) {
  LOOP(i, n * dim) {
    long k = idx[i / dim];
    if (k >= 0 && k < num) atomicAdd(&gw[k * dim + i % dim], gy[i]);
  }
}
}
__global__ void gp_embedding_bwd(const int* idx, const float* gy, float* gw, long n, long dim, long num) { gp_embedding_bwd_k(idx, gy, gw, n, dim, num); }
__global__ void gp_embedding_bwd_h(const int* idx, const gp_h* gy, float* gw, long n, long dim, long num) { gp_embedding_bwd_k(idx, gy, gw, n, dim, num); }

// y[b, :] = Σ_j w[idx[b, j], :] (÷ bag when mean)
extern "C++" {
template <class A> static __device__ void gp_embedding_bag_k(const int* idx, const float* w, A* y, long n, long bag, long dim, long num, int mean, int* bad) {
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
}
__global__ void gp_embedding_bag(const int* idx, const float* w, float* y, long n, long bag, long dim, long num, int mean, int* bad) { gp_embedding_bag_k(idx, w, y, n, bag, dim, num, mean, bad); }
__global__ void gp_embedding_bag_h(const int* idx, const float* w, gp_h* y, long n, long bag, long dim, long num, int mean, int* bad) { gp_embedding_bag_k(idx, w, y, n, bag, dim, num, mean, bad); }

extern "C++" {
template <class A> static __device__ void gp_embedding_bag_bwd_k(const int* idx, const A* gy, float* gw, long n, long bag, long dim, long num, int mean) {
  LOOP(i, n * bag * dim) {
    long b = i / (bag * dim), j = (i / dim) % bag, d = i % dim;
    long k = idx[b * bag + j];
    float g = gy[b * dim + d];
    if (k >= 0 && k < num) atomicAdd(&gw[k * dim + d], mean ? g / bag : g);
  }
}
}
__global__ void gp_embedding_bag_bwd(const int* idx, const float* gy, float* gw, long n, long bag, long dim, long num, int mean) { gp_embedding_bag_bwd_k(idx, gy, gw, n, bag, dim, num, mean); }
__global__ void gp_embedding_bag_bwd_h(const int* idx, const gp_h* gy, float* gw, long n, long bag, long dim, long num, int mean) { gp_embedding_bag_bwd_k(idx, gy, gw, n, bag, dim, num, mean); }

// Strided block copy: dst[o, dOff + c] (+)= src[o, c] for o < outer,
// c < width, rows of dst being dLen wide and of src width wide. Concat's
// forward copies each input into its slice; its backward adds the slice out.
extern "C++" {
template <class A> static __device__ void gp_copy_block_k(A* dst, long dLen, long dOff, const A* src, long sLen, long sOff, long outer, long width, int accumulate) {
  LOOP(i, outer * width) {
    long o = i / width, c = i % width;
    float v = src[o * sLen + sOff + c];
    A* p = &dst[o * dLen + dOff + c];
    *p = accumulate ? *p + v : v;
  }
}
}
__global__ void gp_copy_block(float* dst, long dLen, long dOff, const float* src, long sLen, long sOff, long outer, long width, int accumulate) { gp_copy_block_k(dst, dLen, dOff, src, sLen, sOff, outer, width, accumulate); }
__global__ void gp_copy_block_h(gp_h* dst, long dLen, long dOff, const gp_h* src, long sLen, long sOff, long outer, long width, int accumulate) { gp_copy_block_k(dst, dLen, dOff, src, sLen, sOff, outer, width, accumulate); }

// mean over the middle axis of x: [outer, len, inner] -> y: [outer, inner]
extern "C++" {
template <class A> static __device__ void gp_mean_k(const A* x, A* y, long outer, long len, long inner) {
  LOOP(i, outer * inner) {
    long o = i / inner, k = i % inner;
    float s = 0.f;
    for (long j = 0; j < len; j++) s += x[(o * len + j) * inner + k];
    y[i] = s / len;
  }
}
}
__global__ void gp_mean(const float* x, float* y, long outer, long len, long inner) { gp_mean_k(x, y, outer, len, inner); }
__global__ void gp_mean_h(const gp_h* x, gp_h* y, long outer, long len, long inner) { gp_mean_k(x, y, outer, len, inner); }

extern "C++" {
template <class A> static __device__ void gp_mean_bwd_k(const A* gy, A* gx, long outer, long len, long inner) {
  LOOP(i, outer * len * inner) {
    long o = i / (len * inner), k = i % inner;
    gx[i] += gy[o * inner + k] / len;
  }
}
}
__global__ void gp_mean_bwd(const float* gy, float* gx, long outer, long len, long inner) { gp_mean_bwd_k(gy, gx, outer, len, inner); }
__global__ void gp_mean_bwd_h(const gp_h* gy, gp_h* gx, long outer, long len, long inner) { gp_mean_bwd_k(gy, gx, outer, len, inner); }

// Losses write per-row terms; the host sums them (in float64).
// ce: rows of logits x: [n, c], labels lab; term[r] = logsumexp − x[lab];
// probs keeps the softmax for the backward.
extern "C++" {
template <class A> static __device__ void gp_ce_k(const A* x, const int* lab, float* probs, float* term, long n, long c, int* bad) {
  LOOP(r, n) {
    const A* xr = x + r * c;
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
}
__global__ void gp_ce(const float* x, const int* lab, float* probs, float* term, long n, long c, int* bad) { gp_ce_k(x, lab, probs, term, n, c, bad); }
__global__ void gp_ce_h(const gp_h* x, const int* lab, float* probs, float* term, long n, long c, int* bad) { gp_ce_k(x, lab, probs, term, n, c, bad); }

// gx += g · (probs − onehot(lab)), g = gy / n
extern "C++" {
template <class A> static __device__ void gp_ce_bwd_k(const float* probs, const int* lab, float g, A* gx, long n, long c) {
  LOOP(i, n * c) {
    long r = i / c, j = i % c;
    gx[i] += g * (probs[i] - (j == lab[r] ? 1.f : 0.f));
  }
}
}
__global__ void gp_ce_bwd(const float* probs, const int* lab, float g, float* gx, long n, long c) { gp_ce_bwd_k(probs, lab, g, gx, n, c); }
__global__ void gp_ce_bwd_h(const float* probs, const int* lab, float g, gp_h* gx, long n, long c) { gp_ce_bwd_k(probs, lab, g, gx, n, c); }

// term[i] = (x − t)²; gx += g · 2(x − t)
extern "C++" {
template <class A> static __device__ void gp_mse_k(const A* x, const A* t, float* term, long n) { LOOP(i, n) { float d = x[i] - t[i]; term[i] = d * d; } }
}
__global__ void gp_mse(const float* x, const float* t, float* term, long n) { gp_mse_k(x, t, term, n); }
__global__ void gp_mse_h(const gp_h* x, const gp_h* t, float* term, long n) { gp_mse_k(x, t, term, n); }
extern "C++" {
template <class A> static __device__ void gp_mse_bwd_k(const A* x, const A* t, float g, A* gx, long n) { LOOP(i, n) gx[i] += g * 2.f * (x[i] - t[i]); }
}
__global__ void gp_mse_bwd(const float* x, const float* t, float g, float* gx, long n) { gp_mse_bwd_k(x, t, g, gx, n); }
__global__ void gp_mse_bwd_h(const gp_h* x, const gp_h* t, float g, gp_h* gx, long n) { gp_mse_bwd_k(x, t, g, gx, n); }

// term[i] = max(x,0) − x·t + log(1 + e^−|x|); gx += g · (σ(x) − t)
extern "C++" {
template <class A> static __device__ void gp_bce_k(const A* x, const A* t, float* term, long n) {
  LOOP(i, n) { float v = x[i]; term[i] = fmaxf(v, 0.f) - v * t[i] + log1pf(expf(-fabsf(v))); }
}
}
__global__ void gp_bce(const float* x, const float* t, float* term, long n) { gp_bce_k(x, t, term, n); }
__global__ void gp_bce_h(const gp_h* x, const gp_h* t, float* term, long n) { gp_bce_k(x, t, term, n); }
extern "C++" {
template <class A> static __device__ void gp_bce_bwd_k(const A* x, const A* t, float g, A* gx, long n) {
  LOOP(i, n) gx[i] += g * (1.f / (1.f + expf(-x[i])) - t[i]);
}
}
__global__ void gp_bce_bwd(const float* x, const float* t, float g, float* gx, long n) { gp_bce_bwd_k(x, t, g, gx, n); }
__global__ void gp_bce_bwd_h(const gp_h* x, const gp_h* t, float g, gp_h* gx, long n) { gp_bce_bwd_k(x, t, g, gx, n); }

// ---- the training step on the device (package stage's devTrain) ----
// The optimizers and the norms compute what package stage computes on the
// host, operation for operation: each float32 product, sum and quotient
// rounded on its own (the _rn intrinsics, so that no compiler fuses a
// multiply and an add into one FMA, which rounds once), in the host's
// order. x, g, p, m, v, buf hold one parameter's n elements.

// Squared norms in fixed blocks, as stage's sumSquares: block j covers
// blk[2j+1] elements from x + blk[2j], summed in double in order:
// parts[j] = Σ x²
__global__ void gp_sumsq_blocks(const float* x, const long* blk, double* parts, long nblocks) {
  LOOP(j, nblocks) {
    const float* p = x + blk[2 * j];
    long len = blk[2 * j + 1];
    double s = 0.0;
    for (long k = 0; k < len; k++) { double v = (double)p[k]; s = __dadd_rn(s, __dmul_rn(v, v)); }
    parts[j] = s;
  }
}

// sq[q] = Σ parts[first[q] .. first[q+1]) in order: parameter q's ‖g‖²
__global__ void gp_sumsq_fold(const double* parts, const long* first, double* sq, long nparams) {
  LOOP(q, nparams) {
    double t = 0.0;
    for (long j = first[q]; j < first[q + 1]; j++) t = __dadd_rn(t, parts[j]);
    sq[q] = t;
  }
}

// x[i] *= c   (clip_grad_norm_'s coefficient)
__global__ void gp_scale(float* x, float c, long n) { LOOP(i, n) x[i] = __fmul_rn(x[i], c); }

// torch.optim.SGD (dampening 0), stage's SGD.Step: d = g (+ wd·p);
// with momentum (buf not null) b = d on the first step, μ·b + d after, and
// d = b, or d + μ·b with Nesterov; p −= rate·d
// ph, where not null, is the weight's bf16 copy, written with it (a bf16
// run's products read it: no rounding kernel of its own)
__global__ void gp_sgd_step(float* p, const float* g, float* buf, gp_h* ph, float rate, float wd, float mu, int first, int nesterov, long n) {
  LOOP(i, n) {
    float d = g[i];
    if (wd != 0.f) d = __fadd_rn(d, __fmul_rn(wd, p[i]));
    if (buf) {
      float b = first ? d : __fadd_rn(__fmul_rn(mu, buf[i]), d);
      buf[i] = b;
      d = nesterov ? __fadd_rn(d, __fmul_rn(mu, b)) : b;
    }
    p[i] = __fsub_rn(p[i], __fmul_rn(rate, d));
    if (ph) ph[i] = p[i];
  }
}

// torch.optim.Adam and AdamW, stage's Adam.Step: gi = g (+ coupled·p);
// p ·= shrink (AdamW); m = β1·m + (1−β1)·gi; v = β2·v + (1−β2)·gi·gi;
// p −= step·m / (√v / sqrtbc2 + eps), √ taken in double and rounded, as
// the host's float32(math.Sqrt(float64(v))); omb1, omb2 are 1−β1 and 1−β2
// computed in float32
__global__ void gp_adam_step(float* p, const float* g, float* m, float* v, gp_h* ph, float step, float sqrtbc2, float b1, float b2, float omb1, float omb2,
                             float eps, float coupled, float shrink, long n) {
  LOOP(i, n) {
    float gi = g[i], pi = p[i];
    if (coupled != 0.f) gi = __fadd_rn(gi, __fmul_rn(coupled, pi));
    if (shrink != 1.f) pi = __fmul_rn(pi, shrink);
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(omb1, gi));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(omb2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float denom = __fadd_rn(__fdiv_rn((float)__dsqrt_rn((double)vi), sqrtbc2), eps);
    p[i] = __fsub_rn(pi, __fdiv_rn(__fmul_rn(step, mi), denom));
    if (ph) ph[i] = p[i];
  }
}

// A loss's mean over its n terms in double, in blocks of block terms
// (one block: the host's sum in order): parts[j] = Σ block j;
// y[0] = (float)(Σ parts / n)
__global__ void gp_sum_blocks(const float* x, double* parts, long n, long block) {
  LOOP(j, (n + block - 1) / block) {
    long end = (j + 1) * block < n ? (j + 1) * block : n;
    double s = 0.0;
    for (long i = j * block; i < end; i++) s = __dadd_rn(s, (double)x[i]);
    parts[j] = s;
  }
}

__global__ void gp_mean_fold(const double* parts, long nparts, long n, float* y) {
  LOOP(r, 1) {
    double s = 0.0;
    for (long j = 0; j < nparts; j++) s = __dadd_rn(s, parts[j]);
    y[0] = (float)__ddiv_rn(s, (double)n);
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


// ---- graphpipe/model@2's ops ----
// Values are batch-major and row-major as on the CPU; reductions run in
// double, in the order the CPU kernels (package stage) use, one thread per
// output or per part of a sum, never atomics, so that results do not
// depend on the grid.

// gp_mix is SplitMix64's finaliser (stage's splitmix).
static __device__ inline unsigned long long gp_mix(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// gp_map is the offset Σ c_d·st[d] of element i of a row-major tensor of
// shape dims[rank], c its coordinates.
static __device__ inline long gp_map(long i, const int* dims, const int* st, int rank) {
  long src = 0;
  for (int d = rank - 1; d >= 0; d--) { long c = i % dims[d]; i /= dims[d]; src += c * st[d]; }
  return src;
}

// Strided copy through an index map; meta: dims[rank], st[rank]; element
// i of a tensor of shape dims is element off + gp_map(i) of the other.
// dir 0 (gather): dst[i] (+)= src[off + map(i)]; dir 1 (scatter):
// dst[off + map(i)] (+)= src[i], the map one to one (transpose, slice, pad).
extern "C++" {
template <class A> static __device__ void gp_strided_k(const A* src, A* dst, const int* meta, int rank, long n, long off, int dir, int acc) {
  LOOP(i, n) {
    long j = off + gp_map(i, meta, meta + rank, rank);
    if (dir == 0) dst[i] = acc ? dst[i] + src[j] : src[j];
    else dst[j] = acc ? dst[j] + src[i] : src[i];
  }
}
}
__global__ void gp_strided(const float* src, float* dst, const int* meta, int rank, long n, long off, int dir, int acc) { gp_strided_k(src, dst, meta, rank, n, off, dir, acc); }
__global__ void gp_strided_h(const gp_h* src, gp_h* dst, const int* meta, int rank, long n, long off, int dir, int acc) { gp_strided_k(src, dst, meta, rank, n, off, dir, acc); }

// Broadcast: y [n] over dims op= x read at strides (0 where x stretches);
// meta: dims[rank], st[rank]. op: 0 =, 1 +=, 2 −=, 3 *=, 4 /=, 5 += scale·x.
extern "C++" {
template <class A> static __device__ void gp_bcast_k(A* y, const A* x, const int* meta, int rank, long n, int op, float scale) {
  LOOP(i, n) {
    float v = x[gp_map(i, meta, meta + rank, rank)];
    switch (op) {
      case 0: y[i] = v; break;
      case 1: y[i] += v; break;
      case 2: y[i] -= v; break;
      case 3: y[i] *= v; break;
      case 4: y[i] /= v; break;
      default: y[i] += scale * v; break;
    }
  }
}
}
__global__ void gp_bcast(float* y, const float* x, const int* meta, int rank, long n, int op, float scale) { gp_bcast_k(y, x, meta, rank, n, op, scale); }
__global__ void gp_bcast_h(gp_h* y, const gp_h* x, const int* meta, int rank, long n, int op, float scale) { gp_bcast_k(y, x, meta, rank, n, op, scale); }

// The gradient of a·b (div 0) or a/b (div 1) with respect to input j, per
// output element c [n]: gy·b, gy·a, gy/b, −gy·a/b²; meta: dims[rank],
// a's strides[rank], b's strides[rank].
extern "C++" {
template <class A> static __device__ void gp_bcast_grad_k(const A* gy, const A* a, const A* b, const int* meta, int rank, long n, int div, int j, A* c) {
  LOOP(i, n) {
    float av = a[gp_map(i, meta, meta + rank, rank)], bv = b[gp_map(i, meta, meta + 2 * rank, rank)], g = gy[i];
    if (!div) c[i] = j == 0 ? g * bv : g * av;
    else c[i] = j == 0 ? g / bv : -(g * av / (bv * bv));
  }
}
}
__global__ void gp_bcast_grad(const float* gy, const float* a, const float* b, const int* meta, int rank, long n, int div, int j, float* c) { gp_bcast_grad_k(gy, a, b, meta, rank, n, div, j, c); }
__global__ void gp_bcast_grad_h(const gp_h* gy, const gp_h* a, const gp_h* b, const int* meta, int rank, long n, int div, int j, gp_h* c) { gp_bcast_grad_k(gy, a, b, meta, rank, n, div, j, c); }

// Sum over axes: x has shape dims[rank] (row-major), red[rank] marks the
// axes summed; y [n] has the kept axes in order. y[o] (+)= scale · Σ, the
// sum in double, its terms in x's order; meta: dims[rank], red[rank].
extern "C++" {
template <class A> static __device__ void gp_reduce_k(const A* x, A* y, const int* meta, int rank, long n, double scale, int acc) {
  const int* dims = meta; const int* red = meta + rank;
  LOOP(o, n) {
    long rem = o, base = 0, st = 1, cnt = 1;
    for (int d = rank - 1; d >= 0; d--) {
      if (red[d]) cnt *= dims[d];
      else { base += (rem % dims[d]) * st; rem /= dims[d]; }
      st *= dims[d];
    }
    double s = 0.0;
    for (long k = 0; k < cnt; k++) {
      long r = k, off = base, sd = 1;
      for (int d = rank - 1; d >= 0; d--) {
        if (red[d]) { off += (r % dims[d]) * sd; r /= dims[d]; }
        sd *= dims[d];
      }
      s += x[off];
    }
    float v = (float)(s * scale);
    y[o] = acc ? y[o] + v : v;
  }
}
}
__global__ void gp_reduce(const float* x, float* y, const int* meta, int rank, long n, double scale, int acc) { gp_reduce_k(x, y, meta, rank, n, scale, acc); }
__global__ void gp_reduce_h(const gp_h* x, gp_h* y, const int* meta, int rank, long n, double scale, int acc) { gp_reduce_k(x, y, meta, rank, n, scale, acc); }

// Elementwise with a constant s, in float: kind 0 x + s, 1 x·s, 2 x − s,
// 3 s − x, 4 x / s, 5 s / x.
extern "C++" {
template <class A> static __device__ void gp_scalar_k(int kind, const A* x, A* y, float s, long n) {
  LOOP(i, n) {
    float v = x[i];
    switch (kind) {
      case 0: y[i] = v + s; break;
      case 1: y[i] = v * s; break;
      case 2: y[i] = v - s; break;
      case 3: y[i] = s - v; break;
      case 4: y[i] = v / s; break;
      default: y[i] = s / v; break;
    }
  }
}
}
__global__ void gp_scalar(int kind, const float* x, float* y, float s, long n) { gp_scalar_k(kind, x, y, s, n); }
__global__ void gp_scalar_h(int kind, const gp_h* x, gp_h* y, float s, long n) { gp_scalar_k(kind, x, y, s, n); }

// gx += gy · ∂y/∂x, with y = gp_scalar(x) (s / x: ∂ = −y/x)
extern "C++" {
template <class A> static __device__ void gp_scalar_bwd_k(int kind, const A* x, const A* y, const A* gy, A* gx, float s, long n) {
  LOOP(i, n) {
    float g = gy[i];
    switch (kind) {
      case 0: case 2: gx[i] += g; break;
      case 1: gx[i] += g * s; break;
      case 3: gx[i] -= g; break;
      case 4: gx[i] += g / s; break;
      default: gx[i] -= g * y[i] / x[i]; break;
    }
  }
}
}
__global__ void gp_scalar_bwd(int kind, const float* x, const float* y, const float* gy, float* gx, float s, long n) { gp_scalar_bwd_k(kind, x, y, gy, gx, s, n); }
__global__ void gp_scalar_bwd_h(int kind, const gp_h* x, const gp_h* y, const gp_h* gy, gp_h* gx, float s, long n) { gp_scalar_bwd_k(kind, x, y, gy, gx, s, n); }

// kind: 0 exp, 1 log, 2 sqrt, 3 neg, 4 erf, 5 pow (exponent e), 6 hard_sigmoid
// (slope e, offset e2), 7 hard_swish, in double
extern "C++" {
template <class A> static __device__ void gp_unary_k(int kind, const A* x, A* y, double e, double e2, long n) {
  LOOP(i, n) {
    double f = x[i];
    switch (kind) {
      case 0: f = exp(f); break;
      case 1: f = log(f); break;
      case 2: f = sqrt(f); break;
      case 3: f = -f; break;
      case 4: f = erf(f); break;
      case 6: f = fmax(0.0, fmin(1.0, e * f + e2)); break;  // hard_sigmoid: slope e, offset e2
      case 7: f = f * fmin(fmax(f + 3.0, 0.0), 6.0) / 6.0; break;  // hard_swish
      default: f = pow(f, e); break;
    }
    y[i] = (float)f;
  }
}
}
__global__ void gp_unary(int kind, const float* x, float* y, double e, double e2, long n) { gp_unary_k(kind, x, y, e, e2, n); }
__global__ void gp_unary_h(int kind, const gp_h* x, gp_h* y, double e, double e2, long n) { gp_unary_k(kind, x, y, e, e2, n); }

// gx += gy · f'(x), with y = f(x), in double
extern "C++" {
template <class A> static __device__ void gp_unary_bwd_k(int kind, const A* x, const A* y, const A* gy, A* gx, double e, double e2, long n) {
  LOOP(i, n) {
    double f = x[i], d, v;
    switch (kind) {
      case 0: d = y[i]; break;
      case 1: d = 1.0 / f; break;
      case 2: d = 0.5 / (double)y[i]; break;
      case 3: d = -1.0; break;
      case 4: d = 1.1283791670955126 * exp(-f * f); break;  // 2/√π
      case 6: v = e * f + e2; d = v > 0.0 && v < 1.0 ? e : 0.0; break;
      case 7: d = f < -3.0 ? 0.0 : f <= 3.0 ? f / 3.0 + 0.5 : 1.0; break;
      default: d = e == 0.0 ? 0.0 : e == 1.0 ? 1.0 : e == 2.0 ? 2.0 * f : e * pow(f, e - 1.0); break;
    }
    gx[i] += (float)((double)gy[i] * d);
  }
}
}
__global__ void gp_unary_bwd(int kind, const float* x, const float* y, const float* gy, float* gx, double e, double e2, long n) { gp_unary_bwd_k(kind, x, y, gy, gx, e, e2, n); }
__global__ void gp_unary_bwd_h(int kind, const gp_h* x, const gp_h* y, const gp_h* gy, gp_h* gx, double e, double e2, long n) { gp_unary_bwd_k(kind, x, y, gy, gx, e, e2, n); }

// softmax over the middle axis of x: [outer, len, inner], a thread per
// (outer, inner); e = exp(x − max) in double, y = e / Σe
extern "C++" {
template <class A> static __device__ void gp_softmax_axis_k(const A* x, A* y, long outer, long len, long inner) {
  LOOP(r, outer * inner) {
    long base = (r / inner) * len * inner + r % inner;
    float m = x[base];
    for (long j = 1; j < len; j++) m = fmaxf(m, x[base + j * inner]);
    double s = 0.0;
    for (long j = 0; j < len; j++) { double e = exp((double)(x[base + j * inner] - m)); y[base + j * inner] = (float)e; s += e; }
    for (long j = 0; j < len; j++) y[base + j * inner] = (float)((double)y[base + j * inner] / s);
  }
}
}
__global__ void gp_softmax_axis(const float* x, float* y, long outer, long len, long inner) { gp_softmax_axis_k(x, y, outer, len, inner); }
__global__ void gp_softmax_axis_h(const gp_h* x, gp_h* y, long outer, long len, long inner) { gp_softmax_axis_k(x, y, outer, len, inner); }

// gx += y ⊙ (gy − Σ gy ⊙ y) along the axis
extern "C++" {
template <class A> static __device__ void gp_softmax_axis_bwd_k(const A* y, const A* gy, A* gx, long outer, long len, long inner) {
  LOOP(r, outer * inner) {
    long base = (r / inner) * len * inner + r % inner;
    double dot = 0.0;
    for (long j = 0; j < len; j++) dot += (double)gy[base + j * inner] * (double)y[base + j * inner];
    for (long j = 0; j < len; j++) {
      long p = base + j * inner;
      gx[p] += (float)((double)y[p] * ((double)gy[p] - dot));
    }
  }
}
}
__global__ void gp_softmax_axis_bwd(const float* y, const float* gy, float* gx, long outer, long len, long inner) { gp_softmax_axis_bwd_k(y, gy, gx, outer, len, inner); }
__global__ void gp_softmax_axis_bwd_h(const gp_h* y, const gp_h* gy, gp_h* gx, long outer, long len, long inner) { gp_softmax_axis_bwd_k(y, gy, gx, outer, len, inner); }

// Dropout: src, dst [n/per, per]; element e of sample s (the micro-batch's
// first being sample0) is dropped where (mix(mix(key ^ sample) ^ e) >> 11)
// < thresh (= ⌈p·2⁵³⌉, stage's dropped); the rest scaled: dst (+)= scale·src.
extern "C++" {
template <class A> static __device__ void gp_dropout_k(const A* src, A* dst, long key, long sample0, long per, long n, long thresh, float scale, int acc) {
  LOOP(i, n) {
    unsigned long long s = (unsigned long long)(sample0 + i / per), e = (unsigned long long)(i % per);
    unsigned long long h = gp_mix(gp_mix((unsigned long long)key ^ s) ^ e);
    bool drop = (h >> 11) < (unsigned long long)thresh;
    float v = drop ? 0.f : src[i] * scale;
    if (acc) { if (!drop) dst[i] += v; } else dst[i] = v;
  }
}
}
__global__ void gp_dropout(const float* src, float* dst, long key, long sample0, long per, long n, long thresh, float scale, int acc) { gp_dropout_k(src, dst, key, sample0, per, n, thresh, scale, acc); }
__global__ void gp_dropout_h(const gp_h* src, gp_h* dst, long key, long sample0, long per, long n, long thresh, float scale, int acc) { gp_dropout_k(src, dst, key, sample0, per, n, thresh, scale, acc); }

// y[i] = src[i % per]   y: [n/per, per] (parameter, constant)
extern "C++" {
template <class A> static __device__ void gp_tile_k(const float* src, A* y, long per, long n) { LOOP(i, n) y[i] = src[i % per]; }
}
__global__ void gp_tile(const float* src, float* y, long per, long n) { gp_tile_k(src, y, per, n); }
__global__ void gp_tile_h(const float* src, gp_h* y, long per, long n) { gp_tile_k(src, y, per, n); }

// y[r] = mean of x[r, :] in double   x: [rows, s]
extern "C++" {
template <class A> static __device__ void gp_rowmean_k(const A* x, A* y, long rows, long s) {
  LOOP(r, rows) {
    double sum = 0.0;
    for (long j = 0; j < s; j++) sum += x[r * s + j];
    y[r] = (float)(sum / s);
  }
}
}
__global__ void gp_rowmean(const float* x, float* y, long rows, long s) { gp_rowmean_k(x, y, rows, s); }
__global__ void gp_rowmean_h(const gp_h* x, gp_h* y, long rows, long s) { gp_rowmean_k(x, y, rows, s); }

// gx[r, j] += gy[r] / s
extern "C++" {
template <class A> static __device__ void gp_rowmean_bwd_k(const A* gy, A* gx, long rows, long s) {
  LOOP(i, rows * s) gx[i] += gy[i / s] / (float)s;
}
}
__global__ void gp_rowmean_bwd(const float* gy, float* gx, long rows, long s) { gp_rowmean_bwd_k(gy, gx, rows, s); }
__global__ void gp_rowmean_bwd_h(const gp_h* gy, gp_h* gx, long rows, long s) { gp_rowmean_bwd_k(gy, gx, rows, s); }

// Convolution by im2col, S samples at once, channel-major: x [S, c, h, w]
// → col [c·kh·kw, S·oh·ow], row (ch, i, j), column (sample, oy, ox); zeros
// in the padding. A thread per element of col.
extern "C++" {
template <class A> static __device__ void gp_im2col_k(const A* x, A* col, long S, long c, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw) {
  long hw = oh * ow, cols = S * hw;
  LOOP(i, c * kh * kw * cols) {
    long r = i / cols, q = i % cols, s = q / hw, p = q % hw;
    long ch = r / (kh * kw), ki = (r / kw) % kh, kj = r % kw;
    long iy = (p / ow) * sh - pt + ki * dh, ix = (p % ow) * sw - pl + kj * dw;
    col[i] = (iy < 0 || iy >= h || ix < 0 || ix >= w) ? 0.f : x[((s * c + ch) * h + iy) * w + ix];
  }
}
}
__global__ void gp_im2col(const float* x, float* col, long S, long c, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw) { gp_im2col_k(x, col, S, c, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw); }
__global__ void gp_im2col_h(const gp_h* x, gp_h* col, long S, long c, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw) { gp_im2col_k(x, col, S, c, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw); }

// gx [S, c, h, w] += col2im(gcol [c·kh·kw, S·oh·ow]): a thread per input
// element sums the columns that read it, outputs in increasing order.
extern "C++" {
template <class A> static __device__ void gp_col2im_k(const A* col, A* gx, long S, long c, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw) {
  long hw = oh * ow, cols = S * hw;
  LOOP(i, S * c * h * w) {
    long ix = i % w, iy = (i / w) % h, ch = (i / (h * w)) % c, s = i / (c * h * w);
    float sum = 0.f;
    for (long ki = kh - 1; ki >= 0; ki--) {
      long ty = iy + pt - ki * dh;
      if (ty < 0 || ty % sh != 0 || ty / sh >= oh) continue;
      for (long kj = kw - 1; kj >= 0; kj--) {
        long tx = ix + pl - kj * dw;
        if (tx < 0 || tx % sw != 0 || tx / sw >= ow) continue;
        sum += col[((ch * kh + ki) * kw + kj) * cols + s * hw + (ty / sh) * ow + tx / sw];
      }
    }
    gx[i] += sum;
  }
}
}
__global__ void gp_col2im(const float* col, float* gx, long S, long c, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw) { gp_col2im_k(col, gx, S, c, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw); }
__global__ void gp_col2im_h(const gp_h* col, gp_h* gx, long S, long c, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw) { gp_col2im_k(col, gx, S, c, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw); }

// y [S, out, hw] = ycm [out, S·hw] (+ bias[out] when not null)
extern "C++" {
template <class A> static __device__ void gp_cm_to_nchw_k(const A* ycm, A* y, const float* bias, long S, long out, long hw) {
  LOOP(i, S * out * hw) {
    long p = i % hw, o = (i / hw) % out, s = i / (out * hw);
    float v = ycm[o * S * hw + s * hw + p];
    y[i] = bias ? v + bias[o] : v;
  }
}
}
__global__ void gp_cm_to_nchw(const float* ycm, float* y, const float* bias, long S, long out, long hw) { gp_cm_to_nchw_k(ycm, y, bias, S, out, hw); }
__global__ void gp_cm_to_nchw_h(const gp_h* ycm, gp_h* y, const float* bias, long S, long out, long hw) { gp_cm_to_nchw_k(ycm, y, bias, S, out, hw); }

// ycm [out, S·hw] = y [S, out, hw]
extern "C++" {
template <class A> static __device__ void gp_nchw_to_cm_k(const A* y, A* ycm, long S, long out, long hw) {
  LOOP(i, S * out * hw) {
    long p = i % hw, o = (i / hw) % out, s = i / (out * hw);
    ycm[o * S * hw + s * hw + p] = y[i];
  }
}
}
__global__ void gp_nchw_to_cm(const float* y, float* ycm, long S, long out, long hw) { gp_nchw_to_cm_k(y, ycm, S, out, hw); }
__global__ void gp_nchw_to_cm_h(const gp_h* y, gp_h* ycm, long S, long out, long hw) { gp_nchw_to_cm_k(y, ycm, S, out, hw); }

// Max pool: x [nc, h, w] → y, arg [nc, oh, ow]; arg is the input position
// (iy·w + ix) of the window's maximum (NaN wins), −1 for a window of padding.
extern "C++" {
template <class A> static __device__ void gp_maxpool_k(const A* x, A* y, int* arg, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw) {
  LOOP(o, nc * oh * ow) {
    long ox = o % ow, oy = (o / ow) % oh;
    const A* src = x + (o / (oh * ow)) * h * w;
    float best = NEG_INF; int at = -1;
    for (long i = 0; i < kh; i++) {
      long iy = oy * sh - pt + i * dh;
      if (iy < 0 || iy >= h) continue;
      for (long j = 0; j < kw; j++) {
        long ix = ox * sw - pl + j * dw;
        if (ix < 0 || ix >= w) continue;
        float v = src[iy * w + ix];
        if (v > best || at < 0 || v != v) {
          best = v; at = (int)(iy * w + ix);
          if (v != v) break;
        }
      }
    }
    y[o] = best; arg[o] = at;
  }
}
}
__global__ void gp_maxpool(const float* x, float* y, int* arg, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw) { gp_maxpool_k(x, y, arg, nc, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw); }
__global__ void gp_maxpool_h(const gp_h* x, gp_h* y, int* arg, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw) { gp_maxpool_k(x, y, arg, nc, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw); }

// gx [nc, h, w] += (add 1) or = (add 0: nothing else has given to it yet)
// the gradients of the outputs whose maximum it was: a thread per input
// element, its windows in increasing output order. The window arithmetic
// is in 32-bit ints (a plane's sizes, strides and offsets fit; 64-bit
// division is several times slower), the plane's index alone in long.
extern "C++" {
template <class A> static __device__ void gp_maxpool_bwd_k(const int* arg, const A* gy, A* gx, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw, int add) {
  int W = (int)w, OH = (int)oh, OW = (int)ow, KH = (int)kh, KW = (int)kw, SH = (int)sh, SW = (int)sw, PT = (int)pt, PL = (int)pl, DH = (int)dh, DW = (int)dw;
  LOOP(i, nc * h * w) {
    long plane = i / (h * w);
    int at = (int)(i - plane * h * w), iy = at / W, ix = at - iy * W;
    const int* a = arg + plane * oh * ow;
    const A* g = gy + plane * oh * ow;
    float sum = 0.f;
    for (int ki = KH - 1; ki >= 0; ki--) {
      int ty = iy + PT - ki * DH;
      if (ty < 0) continue;
      int oy = ty / SH;
      if (oy * SH != ty || oy >= OH) continue;
      for (int kj = KW - 1; kj >= 0; kj--) {
        int tx = ix + PL - kj * DW;
        if (tx < 0) continue;
        int ox = tx / SW;
        if (ox * SW != tx || ox >= OW) continue;
        int o = oy * OW + ox;
        if (a[o] == at) sum += g[o];
      }
    }
    gx[i] = add ? gx[i] + sum : sum;
  }
}
}
__global__ void gp_maxpool_bwd(const int* arg, const float* gy, float* gx, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw, int add) { gp_maxpool_bwd_k(arg, gy, gx, nc, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw, add); }
__global__ void gp_maxpool_bwd_h(const int* arg, const gp_h* gy, gp_h* gx, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long dh, long dw, int add) { gp_maxpool_bwd_k(arg, gy, gx, nc, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw, add); }

// Average pool's window (oy, ox): its rows [y0, y1) and columns [x0, x1)
// inside the input, and its divisor: the window clipped to the padded input
// (include) or to the input, as PyTorch's AvgPool2d (stage's avgPool.span).
static __device__ inline float gp_avg_span(long oy, long ox, long h, long w, long kh, long kw, long sh, long sw, long pt, long pl, long pb, long pr, int include, long* y0, long* y1, long* x0, long* x1) {
  long a = oy * sh - pt, b = ox * sw - pl;
  long c = a + kh < h + pb ? a + kh : h + pb, d = b + kw < w + pr ? b + kw : w + pr;
  long div = (c - a) * (d - b);
  *y0 = a > 0 ? a : 0; *x0 = b > 0 ? b : 0; *y1 = c < h ? c : h; *x1 = d < w ? d : w;
  if (!include) div = (*y1 - *y0) * (*x1 - *x0);
  return (float)div;
}

// Average pool: x [nc, h, w] → y [nc, oh, ow], sums in double
extern "C++" {
template <class A> static __device__ void gp_avgpool_k(const A* x, A* y, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long pb, long pr, int include) {
  LOOP(o, nc * oh * ow) {
    long y0, y1, x0, x1;
    float div = gp_avg_span((o / ow) % oh, o % ow, h, w, kh, kw, sh, sw, pt, pl, pb, pr, include, &y0, &y1, &x0, &x1);
    const A* src = x + (o / (oh * ow)) * h * w;
    double s = 0.0;
    for (long iy = y0; iy < y1; iy++)
      for (long ix = x0; ix < x1; ix++) s += src[iy * w + ix];
    y[o] = (float)(s / div);
  }
}
}
__global__ void gp_avgpool(const float* x, float* y, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long pb, long pr, int include) { gp_avgpool_k(x, y, nc, h, w, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, include); }
__global__ void gp_avgpool_h(const gp_h* x, gp_h* y, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long pb, long pr, int include) { gp_avgpool_k(x, y, nc, h, w, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, include); }

// gx [nc, h, w] += Σ gy / div over the windows holding the element (a
// thread per input element, windows in increasing output order)
extern "C++" {
template <class A> static __device__ void gp_avgpool_bwd_k(const A* gy, A* gx, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long pb, long pr, int include) {
  LOOP(i, nc * h * w) {
    long ix = i % w, iy = (i / w) % h, base = (i / (h * w)) * oh * ow;
    float sum = 0.f;
    // the windows holding (iy, ix): oy·sh − pt ≤ iy < oy·sh − pt + kh
    long ly = iy + pt - kh + 1, lx = ix + pl - kw + 1;
    long oy0 = ly <= 0 ? 0 : (ly + sh - 1) / sh, ox0 = lx <= 0 ? 0 : (lx + sw - 1) / sw;
    long oy1 = (iy + pt) / sh < oh - 1 ? (iy + pt) / sh : oh - 1, ox1 = (ix + pl) / sw < ow - 1 ? (ix + pl) / sw : ow - 1;
    for (long oy = oy0; oy <= oy1; oy++) {
      for (long ox = ox0; ox <= ox1; ox++) {
        long y0, y1, x0, x1;
        float div = gp_avg_span(oy, ox, h, w, kh, kw, sh, sw, pt, pl, pb, pr, include, &y0, &y1, &x0, &x1);
        sum += gy[base + oy * ow + ox] / div;
      }
    }
    gx[i] += sum;
  }
}
}
__global__ void gp_avgpool_bwd(const float* gy, float* gx, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long pb, long pr, int include) { gp_avgpool_bwd_k(gy, gx, nc, h, w, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, include); }
__global__ void gp_avgpool_bwd_h(const gp_h* gy, gp_h* gx, long nc, long h, long w, long oh, long ow, long kh, long kw, long sh, long sw, long pt, long pl, long pb, long pr, int include) { gp_avgpool_bwd_k(gy, gx, nc, h, w, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, include); }

// Batch norm in training mode over x [n, c, s] (s values per sample and
// channel), statistics per channel in double, in two passes like the
// column sums: a thread per (chunk of samples k, channel ch, lane l) sums
// its chunk's values j ≡ l (mod lanes) into part[k, ch, l] (lanes 32 for
// planes of 32 values or more, 1 otherwise: neighbouring threads read
// neighbouring values of a plane); gp_fold_lanes_d folds each part's lanes
// in order, then gp_fold_d the chunks in order.
// Each pass reads x (and gy, x̂) once and writes parts·c·lanes doubles.
// part = Σ x (mean null) or Σ (x − mean[ch])²
extern "C++" {
template <class A> static __device__ void gp_bn_part_k(const A* x, const double* mean, double* part, long n, long c, long s, long chunk, long parts, long lanes) {
  LOOP(i, parts * c * lanes) {
    long l = i % lanes, kc = i / lanes, k = kc / c, ch = kc % c, end = (k + 1) * chunk < n ? (k + 1) * chunk : n;
    double m = mean ? mean[ch] : 0.0, sum = 0.0;
    for (long b = k * chunk; b < end; b++) {
      const A* xr = x + (b * c + ch) * s;
      if (mean) for (long j = l; j < s; j += lanes) { double d = (double)xr[j] - m; sum += d * d; }
      else for (long j = l; j < s; j += lanes) sum += xr[j];
    }
    part[i] = sum;
  }
}
}
__global__ void gp_bn_part(const float* x, const double* mean, double* part, long n, long c, long s, long chunk, long parts, long lanes) { gp_bn_part_k(x, mean, part, n, c, s, chunk, parts, lanes); }
__global__ void gp_bn_part_h(const gp_h* x, const double* mean, double* part, long n, long c, long s, long chunk, long parts, long lanes) { gp_bn_part_k(x, mean, part, n, c, s, chunk, parts, lanes); }

// p1 = Σ gy, p2 = Σ gy · x̂ per (chunk, channel, lane)
extern "C++" {
template <class A> static __device__ void gp_bn_bwd_part_k(const A* gy, const float* xhat, double* p1, double* p2, long n, long c, long s, long chunk, long parts, long lanes) {
  LOOP(i, parts * c * lanes) {
    long l = i % lanes, kc = i / lanes, k = kc / c, ch = kc % c, end = (k + 1) * chunk < n ? (k + 1) * chunk : n;
    double s1 = 0.0, s2 = 0.0;
    for (long b = k * chunk; b < end; b++) {
      long lo = (b * c + ch) * s;
      for (long j = l; j < s; j += lanes) { s1 += gy[lo + j]; s2 += (double)gy[lo + j] * (double)xhat[lo + j]; }
    }
    p1[i] = s1; p2[i] = s2;
  }
}
}
__global__ void gp_bn_bwd_part(const float* gy, const float* xhat, double* p1, double* p2, long n, long c, long s, long chunk, long parts, long lanes) { gp_bn_bwd_part_k(gy, xhat, p1, p2, n, c, s, chunk, parts, lanes); }
__global__ void gp_bn_bwd_part_h(const gp_h* gy, const float* xhat, double* p1, double* p2, long n, long c, long s, long chunk, long parts, long lanes) { gp_bn_bwd_part_k(gy, xhat, p1, p2, n, c, s, chunk, parts, lanes); }

// mid[i] = Σ_l part[i, l], l in order, i over n (chunk, channel) parts:
// a part's lanes folded first, by a thread per part, so that gp_fold_d's
// thread per channel then sums parts values, not parts·lanes (one thread
// summing thousands of values in turn waits on memory thousands of times)
__global__ void gp_fold_lanes_d(const double* part, double* mid, long n, long lanes) {
  LOOP(i, n) {
    double s = 0.0;
    for (long l = 0; l < lanes; l++) s += part[i * lanes + l];
    mid[i] = s;
  }
}

// out[ch] = Σ_k Σ_l part[k, ch, l] / div, k then l in order
__global__ void gp_fold_d(const double* part, double* out, long parts, long c, long lanes, double div) {
  LOOP(ch, c) {
    double s = 0.0;
    for (long k = 0; k < parts; k++)
      for (long l = 0; l < lanes; l++) s += part[(k * c + ch) * lanes + l];
    out[ch] = s / div;
  }
}

// x̂ and rstd (in double) from cuDNN's saved mean and 1/σ (float), for
// graphpipe's backward where cuDNN was dropped after the forward:
// x̂ = (x − mean)·inv over x [n, c, s]; rstd[ch] = inv[ch]
extern "C++" {
template <class A> static __device__ void gp_bn_restore_k(const A* x, const float* mean, const float* inv, float* xhat, double* rstd, long n, long c, long s) {
  LOOP(i, n * c * s) {
    long ch = (i / s) % c;
    xhat[i] = (x[i] - mean[ch]) * inv[ch];
    if (i < c) rstd[i] = (double)inv[i];
  }
}
}
__global__ void gp_bn_restore(const float* x, const float* mean, const float* inv, float* xhat, double* rstd, long n, long c, long s) { gp_bn_restore_k(x, mean, inv, xhat, rstd, n, c, s); }
__global__ void gp_bn_restore_h(const gp_h* x, const float* mean, const float* inv, float* xhat, double* rstd, long n, long c, long s) { gp_bn_restore_k(x, mean, inv, xhat, rstd, n, c, s); }

// rstd[ch] = 1 / √(var[ch] + eps)
__global__ void gp_bn_rstd(const double* var, double* rstd, double eps, long c) { LOOP(ch, c) rstd[ch] = 1.0 / sqrt(var[ch] + eps); }

// x̂ = (x − mean)·rstd, y = x̂·w + b per channel, in double; x, xhat, y [n, c, s];
// x̂ is float32 in a bf16 run too (the backward's sums read it: autocast
// keeps batch norm's in float32)
extern "C++" {
template <class A> static __device__ void gp_bn_apply_k(const A* x, const double* mean, const double* rstd, const float* w, const float* b, float* xhat, A* y, long n, long c, long s) {
  LOOP(i, n * c * s) {
    long ch = (i / s) % c;
    double xh = ((double)x[i] - mean[ch]) * rstd[ch];
    xhat[i] = (float)xh;
    y[i] = (float)(xh * (double)w[ch] + (double)b[ch]);
  }
}
}
__global__ void gp_bn_apply(const float* x, const double* mean, const double* rstd, const float* w, const float* b, float* xhat, float* y, long n, long c, long s) { gp_bn_apply_k(x, mean, rstd, w, b, xhat, y, n, c, s); }
__global__ void gp_bn_apply_h(const gp_h* x, const double* mean, const double* rstd, const float* w, const float* b, float* xhat, gp_h* y, long n, long c, long s) { gp_bn_apply_k(x, mean, rstd, w, b, xhat, y, n, c, s); }

// gx += w·rstd/cnt · (cnt·gy − Σgy − x̂·Σgy·x̂), cnt = n·s
extern "C++" {
template <class A> static __device__ void gp_bn_bwd_x_k(const A* gy, const float* xhat, const float* w, const double* rstd, const double* sg, const double* sgx, A* gx, long n, long c, long s) {
  double cnt = (double)(n * s);
  LOOP(i, n * c * s) {
    long ch = (i / s) % c;
    double f = (double)w[ch] * rstd[ch] / cnt;
    gx[i] += (float)(f * (cnt * (double)gy[i] - sg[ch] - (double)xhat[i] * sgx[ch]));
  }
}
}
__global__ void gp_bn_bwd_x(const float* gy, const float* xhat, const float* w, const double* rstd, const double* sg, const double* sgx, float* gx, long n, long c, long s) { gp_bn_bwd_x_k(gy, xhat, w, rstd, sg, sgx, gx, n, c, s); }
__global__ void gp_bn_bwd_x_h(const gp_h* gy, const float* xhat, const float* w, const double* rstd, const double* sg, const double* sgx, gp_h* gx, long n, long c, long s) { gp_bn_bwd_x_k(gy, xhat, w, rstd, sg, sgx, gx, n, c, s); }

// gw[ch] += Σgy·x̂, gb[ch] += Σgy (either may be null)
__global__ void gp_bn_bwd_p(const double* sg, const double* sgx, float* gw, float* gb, long c) {
  LOOP(ch, c) {
    if (gw) gw[ch] += (float)sgx[ch];
    if (gb) gb[ch] += (float)sg[ch];
  }
}

// batch_norm's running statistics moved by a micro-batch's mean and
// biased variance (m the momentum, cnt the values per channel), in double
// as stage's CPU kernel: rm = (1−m)·rm + m·mean; rv = (1−m)·rv + m·var·cnt/(cnt−1)
__global__ void gp_bn_running(const double* mean, const double* var, float* rm, float* rv, double m, double cnt, long c) {
  LOOP(ch, c) {
    double k = __dsub_rn(1.0, m);
    rm[ch] = (float)__dadd_rn(__dmul_rn(k, (double)rm[ch]), __dmul_rn(m, mean[ch]));
    rv[ch] = (float)__dadd_rn(__dmul_rn(k, (double)rv[ch]), __ddiv_rn(__dmul_rn(__dmul_rn(m, var[ch]), cnt), __dsub_rn(cnt, 1.0)));
  }
}

// evaluation's statistics from the running ones: mean = rm, rstd = 1/√(rv + eps), in double
__global__ void gp_bn_eval_stats(const float* rm, const float* rv, double* mean, double* rstd, double eps, long c) {
  LOOP(ch, c) {
    mean[ch] = (double)rm[ch];
    rstd[ch] = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn((double)rv[ch], eps)));
  }
}

}  // extern "C"

// Fused scaled-dot attention: for each (batch, head) the six products of the forward and the
// backward run on 50×64-sized tiles that stay in L1/L2, with the softmax and its backward in
// between, instead of batched oneDNN matmuls over [B, H, T, T] tensors in memory. At the ViT's
// shapes (T = 50, dh = 64, B·H = 384 tiny products per call) oneDNN's batched matmul ran at 35 to
// 70 GFLOP/s per core and needed head copies (or a slower strided kernel); these register-blocked
// AVX-512 tiles reach more than that and read q, k, v in place from the fused projection.
//
// Every product is one micro-kernel: C[R rows, 64 columns] = alpha · Σ_k A(r, k) · Bm[k, 0:64],
// A read element by element (broadcast) with any strides, Bm row by row (four 16-float vectors).
//   scores  S  = q · kᵀ      A = q,   Bm = kᵀ (a transposed copy of k, columns padded to 64)
//   context O  = P · v       A = P,   Bm = v
//   dP         = dO · vᵀ     A = dO,  Bm = vᵀ
//   dv         = Pᵀ · dO     A = Pᵀ,  Bm = dO
//   dq         = dS · k      A = dS,  Bm = k
//   dk         = dSᵀ · q     A = dSᵀ, Bm = q
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/ops/attention_tiles.h"
#include "common/ops/kernel_functions.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"
#include "common/ops/vmath.h"

// GCC 12 reports its own AVX-512 intrinsics (reductions, unpacks, shuffles: an undefined
// pass-through operand) as "maybe uninitialized" wherever they are inlined: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace vitk::ops::VITK_ISA_NAMESPACE {
namespace {

constexpr int64_t kHeadDim = 64;  // the only head size with a kernel (ViT-Ti/S/B, Transformer-base)
constexpr int64_t kTile = 64;     // output columns per micro-kernel call

// Element offset of matrix (b, h) of a rank-4 view.
inline int64_t matrix_offset(const MatrixView& v, int64_t b, int64_t h) {
  return b * v.strides[0] + h * v.strides[1];
}

bool rows_contiguous(const MatrixView& v) {
  return v.dtype == DType::f32 && v.dims.size() == 4 && v.strides.size() == 4 &&
         v.strides[3] == 1 && v.dims[3] == kHeadDim && v.strides[2] >= kHeadDim;
}

#if defined(__AVX512F__)

// C[R, 64] = alpha · Σ_{k < K} A(r, k) · Bm[k, 0:64], A(r, k) = a[r·a_rs + k·a_ks].
template <int R>
inline void tile(const float* a, int64_t a_rs, int64_t a_ks, const float* bm, int64_t b_rs,
                 int64_t K, float* c, int64_t c_rs, float alpha) {
  __m512 acc[R][4];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* brow = bm + k * b_rs;
    const __m512 b0 = _mm512_loadu_ps(brow), b1 = _mm512_loadu_ps(brow + 16);
    const __m512 b2 = _mm512_loadu_ps(brow + 32), b3 = _mm512_loadu_ps(brow + 48);
    const float* ak = a + k * a_ks;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ak[r * a_rs]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(av, b2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(av, b3, acc[r][3]);
    }
  }
  const __m512 s = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v)
      _mm512_storeu_ps(c + r * c_rs + 16 * v, _mm512_mul_ps(acc[r][v], s));
}

// C[M, 64] over all M rows, in blocks of six (24 accumulators, four B vectors, one broadcast).
void gemm_rows(int64_t M, const float* a, int64_t a_rs, int64_t a_ks, const float* bm, int64_t b_rs,
               int64_t K, float* c, int64_t c_rs, float alpha) {
  int64_t i = 0;
  for (; i + 6 <= M; i += 6)
    tile<6>(a + i * a_rs, a_rs, a_ks, bm, b_rs, K, c + i * c_rs, c_rs, alpha);
  const float* ai = a + i * a_rs;
  float* ci = c + i * c_rs;
  switch (M - i) {
    case 5:
      tile<5>(ai, a_rs, a_ks, bm, b_rs, K, ci, c_rs, alpha);
      break;
    case 4:
      tile<4>(ai, a_rs, a_ks, bm, b_rs, K, ci, c_rs, alpha);
      break;
    case 3:
      tile<3>(ai, a_rs, a_ks, bm, b_rs, K, ci, c_rs, alpha);
      break;
    case 2:
      tile<2>(ai, a_rs, a_ks, bm, b_rs, K, ci, c_rs, alpha);
      break;
    case 1:
      tile<1>(ai, a_rs, a_ks, bm, b_rs, K, ci, c_rs, alpha);
      break;
    default:
      break;
  }
}

// dst [64, n_pad] = src [n, 64]ᵀ (src rows src_rs apart), columns n..n_pad zero; n_pad is a
// multiple of 16.
void transpose_padded(const float* src, int64_t src_rs, int64_t n, int64_t n_pad, float* dst) {
  __m512 r[16];
  for (int64_t j0 = 0; j0 < n_pad; j0 += 16)
    for (int64_t c0 = 0; c0 < kHeadDim; c0 += 16) {
      for (int64_t i = 0; i < 16; ++i)
        r[i] = j0 + i < n ? _mm512_loadu_ps(src + (j0 + i) * src_rs + c0) : _mm512_setzero_ps();
      detail::transpose16(r);
      for (int64_t i = 0; i < 16; ++i) _mm512_storeu_ps(dst + (c0 + i) * n_pad + j0, r[i]);
    }
}

// Lanes [j, min(j + 16, n)) of a row.
inline __mmask16 tail_mask(int64_t j, int64_t n) {
  const int64_t left = n - j;
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
}

inline float row_max(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = tail_mask(j, n);
    m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, x + j));
  }
  return _mm512_reduce_max_ps(m);
}

inline float row_dot(const float* x, const float* y, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = tail_mask(j, n);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + j), _mm512_maskz_loadu_ps(k, y + j), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// dst [n, 64] contiguous = the n rows of src (rows src_rs apart). Reading a head's rows out of the
// fused projection (3·d floats apart) straight from the products stalled on cache misses; one
// streaming copy per tile first, then every product reads L1.
inline void pack_rows(const float* src, int64_t src_rs, int64_t n, float* dst) {
  for (int64_t t = 0; t < n; ++t, src += src_rs, dst += kHeadDim)
    for (int64_t c = 0; c < kHeadDim; c += 16) _mm512_storeu_ps(dst + c, _mm512_loadu_ps(src + c));
}

// Per-thread scratch, grown once to the largest shape seen.
struct Scratch {
  std::vector<float> t;        // [64, Tk_pad]: kᵀ (forward) or vᵀ (backward)
  std::vector<float> s;        // [Tq, Tk_pad]: scores (forward) or dP, then dS (backward)
  std::vector<float> a, b, c;  // packed rows [T, 64]: q and v (forward); q, k and dO (backward)
  void fit(int64_t tq, int64_t tk, int64_t tk_pad) {
    auto grow = [](std::vector<float>& v, int64_t n) {
      if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    };
    const int64_t t_max = std::max(tq, tk);
    grow(t, kHeadDim * tk_pad);
    grow(s, tq * tk_pad);
    grow(a, t_max * kHeadDim);
    grow(b, t_max * kHeadDim);
    grow(c, t_max * kHeadDim);
  }
};
Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}

#endif  // __AVX512F__

void check_views(const char* op, const MatrixView& q, const MatrixView& k, const MatrixView& v,
                 const Tensor& probs) {
  if (!rows_contiguous(q) || !rows_contiguous(k) || !rows_contiguous(v))
    throw Error(std::string(op) + ": q, k, v must be f32 [B, H, T, 64] views with contiguous rows");
  const int64_t B = q.dims[0], H = q.dims[1], Tq = q.dims[2], Tk = k.dims[2];
  if (k.dims[0] != B || k.dims[1] != H || v.dims[0] != B || v.dims[1] != H || v.dims[2] != Tk)
    throw Error(std::string(op) + ": q " + shape_str(q.dims) + ", k " + shape_str(k.dims) +
                " and v " + shape_str(v.dims) + " do not fit");
  if (probs.dtype() != DType::f32 || probs.shape() != Shape{B, H, Tq, Tk})
    throw Error(std::string(op) + ": probs " + shape_str(probs.shape()) + " should be f32 " +
                shape_str({B, H, Tq, Tk}));
}

}  // namespace

bool fused_attention_supported(const MatrixView& q, const MatrixView& k) {
#if defined(__AVX512F__)
  return rows_contiguous(q) && rows_contiguous(k) && q.dims[2] > 0 && k.dims[2] > 0;
#else
  (void)q, (void)k;
  return false;
#endif
}

bool fused_attention_supported(int64_t head_dim) {
#if defined(__AVX512F__)
  return head_dim == kHeadDim;
#else
  (void)head_dim;
  return false;
#endif
}

void fused_attention_forward(const MatrixView& q, const MatrixView& k, const MatrixView& v,
                             float scale, Tensor& probs, const MatrixView& context) {
  const char* op = "fused_attention_forward";
  check_views(op, q, k, v, probs);
  if (!rows_contiguous(context) || context.dims != q.dims)
    throw Error(std::string(op) + ": context " + shape_str(context.dims) + " should be a view " +
                shape_str(q.dims) + " with contiguous rows");
#if defined(__AVX512F__)
  const int64_t B = q.dims[0], H = q.dims[1], Tq = q.dims[2], Tk = k.dims[2];
  const int64_t tk_pad = (Tk + kTile - 1) / kTile * kTile;
  profile::Scope scope("fused_attention_forward", B * H, Tq, Tk);
  const float* qp = static_cast<const float*>(q.data);
  const float* kp = static_cast<const float*>(k.data);
  const float* vp = static_cast<const float*>(v.data);
  float* pp = probs.f32();
  float* op_ = static_cast<float*>(context.data);
  const int64_t q_rs = q.strides[2], k_rs = k.strides[2], v_rs = v.strides[2];
  const int64_t o_rs = context.strides[2];
#pragma omp parallel for schedule(static) if (B * H > 1)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    Scratch& sc = scratch();
    sc.fit(Tq, Tk, tk_pad);
    float* kt = sc.t.data();
    float* s = sc.s.data();
    float* qm = sc.a.data();  // [Tq, 64]
    float* vm = sc.b.data();  // [Tk, 64]
    pack_rows(qp + matrix_offset(q, b, h), q_rs, Tq, qm);
    pack_rows(vp + matrix_offset(v, b, h), v_rs, Tk, vm);
    transpose_padded(kp + matrix_offset(k, b, h), k_rs, Tk, tk_pad, kt);
    for (int64_t j0 = 0; j0 < tk_pad; j0 += kTile)  // S = scale · q · kᵀ
      gemm_rows(Tq, qm, kHeadDim, 1, kt + j0, tk_pad, kHeadDim, s + j0, tk_pad, scale);
    float* p = pp + bh * Tq * Tk;       // [Tq, Tk]
    for (int64_t i = 0; i < Tq; ++i) {  // the same steps as softmax_forward
      const float* si = s + i * tk_pad;
      float* pi = p + i * Tk;
      const float mx = row_max(si, Tk);
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < Tk; ++j) {
        const float e = detail::fast_exp(si[j] - mx);
        pi[j] = e;
        sum += e;
      }
      const float inv = 1.f / sum;
#pragma omp simd
      for (int64_t j = 0; j < Tk; ++j) pi[j] *= inv;
    }
    // O = P · v, written into the context view.
    gemm_rows(Tq, p, Tk, 1, vm, kHeadDim, Tk, op_ + matrix_offset(context, b, h), o_rs, 1.f);
  }
#else
  (void)scale, (void)probs;
  throw Error(std::string(op) + ": not available in this build (needs AVX-512)");
#endif
}

void fused_attention_backward(const MatrixView& q, const MatrixView& k, const MatrixView& v,
                              const Tensor& probs, const MatrixView& dcontext, float scale,
                              const MatrixView& dq, const MatrixView& dk, const MatrixView& dv) {
  const char* op = "fused_attention_backward";
  check_views(op, q, k, v, probs);
  if (!rows_contiguous(dcontext) || dcontext.dims != q.dims || !rows_contiguous(dq) ||
      dq.dims != q.dims || !rows_contiguous(dk) || dk.dims != k.dims || !rows_contiguous(dv) ||
      dv.dims != v.dims)
    throw Error(std::string(op) + ": dcontext, dq, dk, dv must be views shaped like q, q, k, v " +
                "with contiguous rows");
#if defined(__AVX512F__)
  const int64_t B = q.dims[0], H = q.dims[1], Tq = q.dims[2], Tk = k.dims[2];
  const int64_t tk_pad = (Tk + kTile - 1) / kTile * kTile;
  profile::Scope scope("fused_attention_backward", B * H, Tq, Tk);
  const float* qp = static_cast<const float*>(q.data);
  const float* kp = static_cast<const float*>(k.data);
  const float* vp = static_cast<const float*>(v.data);
  const float* pp = probs.f32();
  const float* gp = static_cast<const float*>(dcontext.data);
  float* dqp = static_cast<float*>(dq.data);
  float* dkp = static_cast<float*>(dk.data);
  float* dvp = static_cast<float*>(dv.data);
  const int64_t q_rs = q.strides[2], k_rs = k.strides[2], v_rs = v.strides[2];
  const int64_t g_rs = dcontext.strides[2];
#pragma omp parallel for schedule(static) if (B * H > 1)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    Scratch& sc = scratch();
    sc.fit(Tq, Tk, tk_pad);
    float* vt = sc.t.data();
    float* ds = sc.s.data();  // [Tq, tk_pad]: dP, then dS in place
    const float* p = pp + bh * Tq * Tk;
    float* qm = sc.a.data();  // [Tq, 64]
    float* km = sc.b.data();  // [Tk, 64]
    float* g = sc.c.data();   // [Tq, 64]: dO
    pack_rows(qp + matrix_offset(q, b, h), q_rs, Tq, qm);
    pack_rows(kp + matrix_offset(k, b, h), k_rs, Tk, km);
    pack_rows(gp + matrix_offset(dcontext, b, h), g_rs, Tq, g);
    transpose_padded(vp + matrix_offset(v, b, h), v_rs, Tk, tk_pad, vt);
    for (int64_t j0 = 0; j0 < tk_pad; j0 += kTile)  // dP = dO · vᵀ
      gemm_rows(Tq, g, kHeadDim, 1, vt + j0, tk_pad, kHeadDim, ds + j0, tk_pad, 1.f);
    // dv = Pᵀ · dO: rows j of dv, A(j, i) = P[i, j].
    gemm_rows(Tk, p, 1, Tk, g, kHeadDim, Tq, dvp + matrix_offset(dv, b, h), dv.strides[2], 1.f);
    for (int64_t i = 0; i < Tq; ++i) {  // dS = scale · P ⊙ (dP − Σ_j dP·P), as softmax_backward
      float* di = ds + i * tk_pad;
      const float* pi = p + i * Tk;
      const float dot = row_dot(pi, di, Tk);
#pragma omp simd
      for (int64_t j = 0; j < Tk; ++j) di[j] = pi[j] * (di[j] - dot);
    }
    // dq = scale · dS · k; dk = scale · dSᵀ · q.
    gemm_rows(Tq, ds, tk_pad, 1, km, kHeadDim, Tk, dqp + matrix_offset(dq, b, h), dq.strides[2],
              scale);
    gemm_rows(Tk, ds, 1, tk_pad, qm, kHeadDim, Tq, dkp + matrix_offset(dk, b, h), dk.strides[2],
              scale);
  }
#else
  (void)scale, (void)probs;
  throw Error(std::string(op) + ": not available in this build (needs AVX-512)");
#endif
}

}  // namespace vitk::ops::VITK_ISA_NAMESPACE

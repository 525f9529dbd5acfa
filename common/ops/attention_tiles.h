#pragma once
// Tiles for the attention kernels (attention_blocked.cpp, attention_fused.cpp), internal to
// common/ops:
// - small register-blocked products C[M, N] = alpha · A · B (+ C when accumulating), A read
//   element by element through any two strides (so a transpose is free), B row by row, N a
//   multiple of 16 (AVX-512 and AVX2 tiles; a plain loop at the baseline level). Every product of
//   flash-style attention has this form on tiles of at most 64 × 128 that sit in L1, where a oneDNN
//   call per tile would cost more than the tile itself;
// - the row operations of a softmax on one 64-wide row of block scores;
// - an in-register 16 × 16 transpose.
#include <cstdint>
#include <limits>

#include "common/ops/vmath.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace vitk::ops::detail {

#if defined(__AVX512F__)

// C[R, 16·NV] (+)= alpha · Σ_{k < K} A(r, k) · B[k, 0:16·NV]: R·NV accumulators, NV vectors of B
// and one broadcast of A per k, all in registers (at most 29 of the 32).
template <int R, int NV, bool kAccumulate>
inline void tile_kernel(const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t b_rs,
                        int64_t K, float* c, int64_t c_rs, float alpha) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* brow = b + k * b_rs;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(brow + 16 * v);
    const float* ak = a + k * a_ks;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ak[r * a_rs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m512 s = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* cp = c + r * c_rs + 16 * v;
      const __m512 out = kAccumulate ? _mm512_fmadd_ps(acc[r][v], s, _mm512_loadu_ps(cp))
                                     : _mm512_mul_ps(acc[r][v], s);
      _mm512_storeu_ps(cp, out);
    }
}

// Rows per tile for NV column vectors: as many as the register file holds.
template <int NV>
constexpr int kTileRows = NV == 4   ? 6
                          : NV == 3 ? 8
                                    : 12;

// Runs tile_kernel<rows, NV> for a runtime rows in [1, kTileRows<NV>].
template <int NV, bool kAccumulate, int R = 1>
inline void tile_rows(int64_t rows, const float* a, int64_t a_rs, int64_t a_ks, const float* b,
                      int64_t b_rs, int64_t K, float* c, int64_t c_rs, float alpha) {
  if constexpr (R < kTileRows<NV>) {
    if (rows != R)
      return tile_rows<NV, kAccumulate, R + 1>(rows, a, a_rs, a_ks, b, b_rs, K, c, c_rs, alpha);
  }
  tile_kernel<R, NV, kAccumulate>(a, a_rs, a_ks, b, b_rs, K, c, c_rs, alpha);
}

template <int NV, bool kAccumulate>
inline void gemm_columns(int64_t M, const float* a, int64_t a_rs, int64_t a_ks, const float* b,
                         int64_t b_rs, int64_t K, float* c, int64_t c_rs, float alpha) {
  constexpr int64_t R = kTileRows<NV>;
  int64_t i = 0;
  for (; i + R <= M; i += R)
    tile_kernel<R, NV, kAccumulate>(a + i * a_rs, a_rs, a_ks, b, b_rs, K, c + i * c_rs, c_rs,
                                    alpha);
  if (i < M)
    tile_rows<NV, kAccumulate>(M - i, a + i * a_rs, a_rs, a_ks, b, b_rs, K, c + i * c_rs, c_rs,
                               alpha);
}

template <bool kAccumulate>
inline void tile_gemm_impl(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs,
                           int64_t a_ks, const float* b, int64_t b_rs, float* c, int64_t c_rs,
                           float alpha) {
  for (int64_t n0 = 0; n0 < N; n0 += 64) {
    const int64_t nv = N - n0 >= 64 ? 4 : (N - n0) / 16;
    const float* bn = b + n0;
    float* cn = c + n0;
    switch (nv) {
      case 4:
        gemm_columns<4, kAccumulate>(M, a, a_rs, a_ks, bn, b_rs, K, cn, c_rs, alpha);
        break;
      case 3:
        gemm_columns<3, kAccumulate>(M, a, a_rs, a_ks, bn, b_rs, K, cn, c_rs, alpha);
        break;
      case 2:
        gemm_columns<2, kAccumulate>(M, a, a_rs, a_ks, bn, b_rs, K, cn, c_rs, alpha);
        break;
      default:
        gemm_columns<1, kAccumulate>(M, a, a_rs, a_ks, bn, b_rs, K, cn, c_rs, alpha);
        break;
    }
  }
}

// exp(x) on 16 lanes: detail::fast_exp's range reduction and polynomial, written with
// intrinsics because GCC does not vectorise it inside masked row loops. −inf and anything below
// about −87.3 give exactly 0.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-88.3762626647949f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(fx, _mm512_set1_ps(2.12194440e-4f), r);
  const __m512 z = _mm512_mul_ps(r, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, z, r), _mm512_set1_ps(1.0f));
  __m512i e = _mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127));
  e = _mm512_max_epi32(e, _mm512_setzero_si512());  // 2^-128 and below: a zero scale
  return _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(e, 23)));
}

// Lanes [0, n − j0) of the 16 starting at column j0.
inline __mmask16 lanes_below(int64_t n, int64_t j0) {
  const int64_t left = n - j0;
  return left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1u);
}

#elif defined(__AVX2__) && defined(__FMA__)

// C[R, 16] (+)= alpha · Σ_{k < K} A(r, k) · B[k, 0:16]: the AVX2 form of tile_kernel, 2·R
// accumulators (12 of the 16 registers at R = 6), two vectors of B and one broadcast per k. Each
// element is summed over k in the same order as the AVX-512 tiles, so both give the same bits.
template <int R, bool kAccumulate>
inline void tile_kernel8(const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t b_rs,
                         int64_t K, float* c, int64_t c_rs, float alpha) {
  __m256 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* brow = b + k * b_rs;
    const __m256 b0 = _mm256_loadu_ps(brow), b1 = _mm256_loadu_ps(brow + 8);
    const float* ak = a + k * a_ks;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(ak + r * a_rs);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  const __m256 s = _mm256_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 2; ++v) {
      float* cp = c + r * c_rs + 8 * v;
      const __m256 out = kAccumulate ? _mm256_fmadd_ps(acc[r][v], s, _mm256_loadu_ps(cp))
                                     : _mm256_mul_ps(acc[r][v], s);
      _mm256_storeu_ps(cp, out);
    }
}

// Runs tile_kernel8<rows> for a runtime rows in [1, 6].
template <bool kAccumulate, int R = 1>
inline void tile_rows8(int64_t rows, const float* a, int64_t a_rs, int64_t a_ks, const float* b,
                       int64_t b_rs, int64_t K, float* c, int64_t c_rs, float alpha) {
  if constexpr (R < 6) {
    if (rows != R)
      return tile_rows8<kAccumulate, R + 1>(rows, a, a_rs, a_ks, b, b_rs, K, c, c_rs, alpha);
  }
  tile_kernel8<R, kAccumulate>(a, a_rs, a_ks, b, b_rs, K, c, c_rs, alpha);
}

template <bool kAccumulate>
inline void tile_gemm_impl(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs,
                           int64_t a_ks, const float* b, int64_t b_rs, float* c, int64_t c_rs,
                           float alpha) {
  for (int64_t n0 = 0; n0 < N; n0 += 16) {
    int64_t i = 0;
    for (; i + 6 <= M; i += 6)
      tile_kernel8<6, kAccumulate>(a + i * a_rs, a_rs, a_ks, b + n0, b_rs, K, c + i * c_rs + n0,
                                   c_rs, alpha);
    if (i < M)
      tile_rows8<kAccumulate>(M - i, a + i * a_rs, a_rs, a_ks, b + n0, b_rs, K, c + i * c_rs + n0,
                              c_rs, alpha);
  }
}

#endif  // __AVX512F__, __AVX2__

// ---- Softmax steps on one row of 64 block scores; columns >= n are masked ----
// max over x[0, n), n >= 1.
inline float row_max64(const float* x, int64_t n) {
#if defined(__AVX512F__)
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < 64; j += 16)
    m = _mm512_mask_max_ps(m, lanes_below(n, j), m, _mm512_loadu_ps(x + j));
  return _mm512_reduce_max_ps(m);
#else
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
#endif
}

// x[j] = exp(x[j] − shift) for j < n and 0 for n <= j < 64; returns the sum.
inline float row_exp64(float* x, int64_t n, float shift) {
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < 64; j += 16) {
    const __m512 e =
        _mm512_maskz_mov_ps(lanes_below(n, j), exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), s)));
    _mm512_storeu_ps(x + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
#else
  float sum = 0.f;
  for (int64_t j = 0; j < 64; ++j) {
    x[j] = j < n ? fast_exp(x[j] - shift) : 0.f;
    sum += x[j];
  }
  return sum;
#endif
}

// ds[j] = p[j] · (ds[j] − d) for j < n and 0 for n <= j < 64 (whatever ds held there).
inline void row_softmax_grad64(const float* p, float* ds, float d, int64_t n) {
#if defined(__AVX512F__)
  const __m512 dv = _mm512_set1_ps(d);
  for (int64_t j = 0; j < 64; j += 16)
    _mm512_storeu_ps(ds + j, _mm512_maskz_mul_ps(lanes_below(n, j), _mm512_loadu_ps(p + j),
                                                 _mm512_sub_ps(_mm512_loadu_ps(ds + j), dv)));
#else
  for (int64_t j = 0; j < 64; ++j) ds[j] = j < n ? p[j] * (ds[j] - d) : 0.f;
#endif
}

#if defined(__AVX512F__)

// In-register transpose of a 16×16 block: r[i] holds row i on entry, column i on return.
// GCC 12 warns that its own unpack and shuffle intrinsics read an undefined pass-through value
// (_mm512_undefined_ps) "maybe uninitialized": a false positive, silenced here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const int a = 4 * i;
    r[a] = _mm512_shuffle_ps(t[a], t[a + 2], 0x44);
    r[a + 1] = _mm512_shuffle_ps(t[a], t[a + 2], 0xEE);
    r[a + 2] = _mm512_shuffle_ps(t[a + 1], t[a + 3], 0x44);
    r[a + 3] = _mm512_shuffle_ps(t[a + 1], t[a + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
    t[4 + k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xDD);
    t[8 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    t[12 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xDD);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xDD);
    r[4 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0x88);
    r[12 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0xDD);
  }
}
#pragma GCC diagnostic pop

#endif  // __AVX512F__

// C[M, N] = alpha · A · B, or C += alpha · A · B with accumulate; A(r, k) = a[r·a_rs + k·a_ks],
// B[k, n] = b[k·b_rs + n], C[r, n] = c[r·c_rs + n]. N must be a multiple of 16; K may be 0.
inline void tile_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_ks,
                      const float* b, int64_t b_rs, float* c, int64_t c_rs, float alpha,
                      bool accumulate) {
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  if (accumulate)
    tile_gemm_impl<true>(M, N, K, a, a_rs, a_ks, b, b_rs, c, c_rs, alpha);
  else
    tile_gemm_impl<false>(M, N, K, a, a_rs, a_ks, b, b_rs, c, c_rs, alpha);
#else
  // Portable path: the compiler vectorises the inner loop over n.
  for (int64_t i = 0; i < M; ++i) {
    float* ci = c + i * c_rs;
    if (!accumulate)
      for (int64_t n = 0; n < N; ++n) ci[n] = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      const float aik = alpha * a[i * a_rs + k * a_ks];
      const float* bk = b + k * b_rs;
#pragma omp simd
      for (int64_t n = 0; n < N; ++n) ci[n] += aik * bk[n];
    }
  }
#endif
}

}  // namespace vitk::ops::detail

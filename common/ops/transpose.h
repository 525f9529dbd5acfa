#pragma once
// Transposes of 16-bit matrices (bf16 operands), internal to common/ops: the bf16 weight
// gradient reads dyᵀ as a plain matrix, which oneDNN 2.6's bf16 kernel multiplies about 1.3×
// faster than dy's strided transpose (matmul.cpp), so the pass that rounds dy writes dyᵀ too.
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace vitk::ops::detail {

// dst[c · ld_dst + r] = src[r · ld_src + c] for r < rows, c < cols: 8×8 tiles in registers, the
// edges one element at a time.
inline void transpose_u16(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld_src,
                          uint16_t* dst, int64_t ld_dst) {
  int64_t tiled = 0;  // rows done in tiles
#if defined(__SSE2__)
  tiled = rows / 8 * 8;
  const int64_t tiled_cols = cols / 8 * 8;
  // Column tiles outside, row tiles inside: each row of dst is written in one contiguous run.
  for (int64_t c0 = 0; c0 < tiled_cols; c0 += 8) {
    for (int64_t r0 = 0; r0 < tiled; r0 += 8) {
      const uint16_t* s = src + r0 * ld_src + c0;
      __m128i r[8];
      for (int i = 0; i < 8; ++i)
        r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * ld_src));
      // Pairs of rows interleaved, then pairs of pairs, then halves: column j of the tile ends up
      // in register j.
      __m128i t[8], u[8];
      for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
      }
      for (int i = 0; i < 2; ++i) {
        u[4 * i] = _mm_unpacklo_epi32(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm_unpackhi_epi32(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);
      }
      uint16_t* d = dst + c0 * ld_dst + r0;
      for (int j = 0; j < 4; ++j) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * j) * ld_dst),
                         _mm_unpacklo_epi64(u[j], u[j + 4]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * j + 1) * ld_dst),
                         _mm_unpackhi_epi64(u[j], u[j + 4]));
      }
    }
  }
  for (int64_t r0 = 0; r0 < tiled; r0 += 8)
    for (int64_t c0 = tiled_cols; c0 < cols; ++c0)
      for (int i = 0; i < 8; ++i) dst[c0 * ld_dst + r0 + i] = src[(r0 + i) * ld_src + c0];
#endif
  for (int64_t r = tiled; r < rows; ++r) {
    const uint16_t* s = src + r * ld_src;
    uint16_t* d = dst + r;
    for (int64_t c = 0; c < cols; ++c, d += ld_dst) *d = s[c];
  }
}

}  // namespace vitk::ops::detail

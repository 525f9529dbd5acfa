#pragma once
// Column sums of a row-major matrix in a fixed order, for the bias gradients (internal to
// common/ops). The rows are cut into blocks of kBlockRows whose partial sums are added in block
// order: the result does not depend on the thread count, and both threads stay busy whatever the
// width is (a split by columns left one of two threads idle for n = 192).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/tensor.h"

namespace vitk::ops::detail {

// Rows per block of the passes below: the same cut for every pass over a matrix.
constexpr int64_t kBlockRows = 128;

// fn(r0, r1) for each block of kBlockRows rows of an [m, n] matrix, the blocks shared out among
// the threads when the matrix is big enough to pay for it.
template <typename Fn>
void for_row_blocks(int64_t m, int64_t n, Fn&& fn) {
  const int64_t blocks = (m + kBlockRows - 1) / kBlockRows;
#pragma omp parallel for schedule(static) if (m * n >= 32768)
  for (int64_t blk = 0; blk < blocks; ++blk)
    fn(blk * kBlockRows, std::min(m, (blk + 1) * kBlockRows));
}

// out[c] += Σ_r g[r, c] over g [m, n], where the caller hands the rows out block by block:
// rows(r0, r1) returns rows r0..r1 of g ([r1 − r0, n], contiguous: g itself, or a block it
// computes on demand into a buffer of its thread), and done(r0, r1, block) is called once the
// block is summed, while it is still in cache (to round it, say). Blocks are cut the same way for
// every caller, so the sums of a matrix are the same bits whichever way its rows are handed out.
template <typename Rows, typename Done>
void column_sums_by_block(int64_t m, int64_t n, float* out, Rows&& rows, Done&& done) {
  const int64_t blocks = (m + kBlockRows - 1) / kBlockRows;
  if (blocks <= 1 || m * n < 32768) {
    const float* g = rows(int64_t{0}, m);
    for (int64_t r = 0; r < m; ++r) {
      const float* row = g + r * n;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) out[c] += row[c];
    }
    done(int64_t{0}, m, g);
    return;
  }
  static thread_local std::vector<float> partial;
  partial.resize(static_cast<size_t>(blocks * n));
  float* part = partial.data();
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* acc = part + blk * n;
    const int64_t r0 = blk * kBlockRows, r1 = std::min(m, r0 + kBlockRows);
    const float* g = rows(r0, r1);
    std::copy(g, g + n, acc);
    for (int64_t r = 1; r < r1 - r0; ++r) {
      const float* row = g + r * n;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) acc[c] += row[c];
    }
    done(r0, r1, g);
  }
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const float* acc = part + blk * n;
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) out[c] += acc[c];
  }
}

// dst[0 .. count) = src rounded to bf16.
inline void round_block(const float* src, int64_t count, uint16_t* dst) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace vitk::ops::detail

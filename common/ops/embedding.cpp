// Embedding lookup and its scatter-add gradient.
#include <algorithm>

#include "common/error.h"
#include "common/ops/ops.h"

namespace vitk::ops {
namespace {

void check(const char* op, const Tensor& ids, const Tensor& table, const Tensor& rows) {
  if (ids.dtype() != DType::i32) throw Error(std::string(op) + ": ids must be i32");
  if (table.rank() != 2)
    throw Error(std::string(op) + ": table must be [V, D], not " + shape_str(table.shape()));
  if (rows.numel() != ids.numel() * table.dim(1))
    throw Error(std::string(op) + ": " + shape_str(rows.shape()) + " does not hold " +
                std::to_string(ids.numel()) + " rows of " + std::to_string(table.dim(1)));
  const int32_t* id = ids.i32();
  const int64_t v = table.dim(0);
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (id[i] < 0 || id[i] >= v)
      throw Error(std::string(op) + ": id " + std::to_string(id[i]) + " at position " +
                  std::to_string(i) + " is outside the table of " + std::to_string(v) + " rows");
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y, float scale) {
  check("embedding_forward", ids, table, y);
  const int64_t m = ids.numel(), d = table.dim(1);
  const int32_t* id = ids.i32();
  const float* t = table.f32();
  float* out = y.f32();
#pragma omp parallel for schedule(static) if (m * d > 65536)
  for (int64_t i = 0; i < m; ++i) {
    const float* src = t + static_cast<int64_t>(id[i]) * d;
    float* dst = out + i * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) dst[j] = scale * src[j];
  }
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, float scale) {
  check("embedding_backward", ids, dtable, dy);
  const int64_t m = ids.numel(), d = dtable.dim(1);
  const int32_t* id = ids.i32();
  const float* g = dy.f32();
  float* out = dtable.f32();
  // Threads split the embedding width, so no two threads touch the same element and every
  // element sums its tokens in token order.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (d + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (m * d > 65536)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(d, c0 + kBlock);
    for (int64_t i = 0; i < m; ++i) {
      float* dst = out + static_cast<int64_t>(id[i]) * d;
      const float* src = g + i * d;
#pragma omp simd
      for (int64_t j = c0; j < c1; ++j) dst[j] += scale * src[j];
    }
  }
}

}  // namespace vitk::ops

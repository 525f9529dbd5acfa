// Cross-entropy against soft targets (a distribution per row), as timm's SoftTargetCrossEntropy:
// what a Mixup/CutMix batch trains on.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/ops/kernel_functions.h"
#include "common/ops/ops.h"
#include "common/ops/vmath.h"

namespace vitk::ops::VITK_ISA_NAMESPACE {
namespace {

struct Dims {
  int64_t rows, classes;
};

Dims check(const char* op, const Tensor& logits, const Tensor& targets) {
  if (logits.dtype() != DType::f32 || logits.rank() < 1)
    throw Error(std::string(op) + ": logits must be f32 [M, C]");
  if (targets.dtype() != DType::f32 || targets.shape() != logits.shape())
    throw Error(std::string(op) + ": targets " + shape_str(targets.shape()) +
                " must be f32 of the logits' shape " + shape_str(logits.shape()));
  const int64_t c = logits.dim(-1), m = c ? logits.numel() / c : 0;
  return {m, c};
}

// log Σ exp(x) of one row, shifted by its maximum.
float log_norm(const float* x, int64_t c) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x[j]);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < c; ++j) sum += detail::fast_exp(x[j] - mx);
  return mx + std::log(sum);
}

}  // namespace

CrossEntropyStats soft_cross_entropy_forward(const Tensor& logits, const Tensor& targets) {
  // Not a structured binding: clang before 16 cannot capture one in an OpenMP region.
  const Dims dims = check("soft_cross_entropy_forward", logits, targets);
  const int64_t m = dims.rows, c = dims.classes;
  const float* x = logits.f32();
  const float* t = targets.f32();
  double total = 0.0;
  int64_t correct = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, correct) if (m * c > 16384)
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * c;
    const float* tr = t + i * c;
    const double lse = log_norm(row, c);
    // −Σ t·(x − lse) = lse·Σt − Σ t·x
    double mass = 0.0, dot = 0.0;
    for (int64_t j = 0; j < c; ++j) mass += tr[j], dot += static_cast<double>(tr[j]) * row[j];
    total += lse * mass - dot;
    if (std::max_element(row, row + c) - row == std::max_element(tr, tr + c) - tr) ++correct;
  }
  CrossEntropyStats s;
  s.count = m;
  s.correct = correct;
  s.loss = m ? total / static_cast<double>(m) : 0.0;
  return s;
}

void soft_cross_entropy_backward(const Tensor& logits, const Tensor& targets, float scale,
                                 Tensor& dlogits) {
  // Not a structured binding: clang before 16 cannot capture one in an OpenMP region.
  const Dims dims = check("soft_cross_entropy_backward", logits, targets);
  const int64_t m = dims.rows, c = dims.classes;
  if (dlogits.shape() != logits.shape() || dlogits.dtype() != DType::f32)
    throw Error("soft_cross_entropy_backward: dlogits " + shape_str(dlogits.shape()) +
                " must match logits " + shape_str(logits.shape()));
  const float* x = logits.f32();
  const float* t = targets.f32();
  float* d = dlogits.f32();
  const float g = m ? scale / static_cast<float>(m) : 0.f;
#pragma omp parallel for schedule(static) if (m * c > 16384)
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * c;
    const float* tr = t + i * c;
    float* dr = d + i * c;
    const float shift = log_norm(row, c);
    float mass = 0.f;
    for (int64_t j = 0; j < c; ++j) mass += tr[j];
    const float gm = g * mass;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) dr[j] = gm * detail::fast_exp(row[j] - shift) - g * tr[j];
  }
}

}  // namespace vitk::ops::VITK_ISA_NAMESPACE

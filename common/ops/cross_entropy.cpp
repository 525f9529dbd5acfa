// Cross-entropy over logits with label smoothing and an ignore index, with the same definition as
// torch.nn.functional.cross_entropy(reduction="mean").
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/ops/ops.h"
#include "common/ops/vmath.h"

namespace vitk::ops {
namespace {

struct Dims {
  int64_t rows, classes;
};

Dims check(const char* op, const Tensor& logits, const Tensor& targets, int ignore_index) {
  if (logits.dtype() != DType::f32 || logits.rank() < 1)
    throw Error(std::string(op) + ": logits must be f32 [M, C]");
  if (targets.dtype() != DType::i32) throw Error(std::string(op) + ": targets must be i32");
  const int64_t c = logits.dim(-1), m = c ? logits.numel() / c : 0;
  if (targets.numel() != m)
    throw Error(std::string(op) + ": " + std::to_string(targets.numel()) + " targets for " +
                std::to_string(m) + " rows of logits " + shape_str(logits.shape()));
  const int32_t* t = targets.i32();
  for (int64_t i = 0; i < m; ++i)
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= c))
      throw Error(std::string(op) + ": target " + std::to_string(t[i]) + " at row " +
                  std::to_string(i) + " is outside [0, " + std::to_string(c) + ")");
  return {m, c};
}

// Max and log Σ exp(x − max) of one row.
void log_sum_exp(const float* x, int64_t c, float& mx, float& lse) {
  mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x[j]);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < c; ++j) sum += detail::fast_exp(x[j] - mx);
  lse = std::log(sum);
}

}  // namespace

CrossEntropyStats cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                        float label_smoothing, int ignore_index) {
  const auto [m, c] = check("cross_entropy_forward", logits, targets, ignore_index);
  const float* x = logits.f32();
  const int32_t* t = targets.i32();
  const double eps = label_smoothing;
  double total = 0.0;
  int64_t count = 0, correct = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, count, correct) if (m * c > 16384)
  for (int64_t i = 0; i < m; ++i) {
    if (t[i] == ignore_index) continue;
    const float* row = x + i * c;
    float mx, lse;
    log_sum_exp(row, c, mx, lse);
    const double log_norm = static_cast<double>(mx) + lse;  // log Σ exp(x)
    double nll = log_norm - row[t[i]];
    double loss = (1.0 - eps) * nll;
    if (eps != 0.0) {
      double sum = 0.0;
      for (int64_t j = 0; j < c; ++j) sum += row[j];
      loss += eps * (log_norm - sum / static_cast<double>(c));
    }
    total += loss;
    ++count;
    // Arg-max, first index on ties (as torch.argmax).
    if (std::max_element(row, row + c) - row == t[i]) ++correct;
  }
  CrossEntropyStats s;
  s.count = count;
  s.correct = correct;
  s.loss = count ? total / static_cast<double>(count) : 0.0;
  return s;
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                            int ignore_index, float scale, Tensor& dlogits) {
  const auto [m, c] = check("cross_entropy_backward", logits, targets, ignore_index);
  if (dlogits.shape() != logits.shape() || dlogits.dtype() != DType::f32)
    throw Error("cross_entropy_backward: dlogits " + shape_str(dlogits.shape()) +
                " must match logits " + shape_str(logits.shape()));
  const float* x = logits.f32();
  const int32_t* t = targets.i32();
  float* d = dlogits.f32();
  int64_t count = 0;
  for (int64_t i = 0; i < m; ++i) count += t[i] != ignore_index;
  const float g = count ? scale / static_cast<float>(count) : 0.f;
  const float off = label_smoothing / static_cast<float>(c);  // smoothed target mass per class
#pragma omp parallel for schedule(static) if (m * c > 16384)
  for (int64_t i = 0; i < m; ++i) {
    float* dr = d + i * c;
    if (t[i] == ignore_index) {
      std::fill(dr, dr + c, 0.f);
      continue;
    }
    const float* row = x + i * c;
    float mx, lse;
    log_sum_exp(row, c, mx, lse);
    const float shift = mx + lse;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) dr[j] = g * (detail::fast_exp(row[j] - shift) - off);
    dr[t[i]] -= g * (1.f - label_smoothing);
  }
}

}  // namespace vitk::ops

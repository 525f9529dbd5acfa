// Cross-entropy over logits with label smoothing and an ignore index, with the same definition as
// torch.nn.functional.cross_entropy(reduction="mean").
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
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x[j]);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < c; ++j) sum += detail::fast_exp(x[j] - mx);
  lse = std::log(sum);
}

// One row's loss term and whether its target is the arg-max, from its max and log Σ exp.
struct RowLoss {
  double loss;
  bool correct;
};
RowLoss row_loss(const float* row, int64_t c, int32_t target, double eps, float mx, float lse) {
  const double log_norm = static_cast<double>(mx) + lse;  // log Σ exp(x)
  double loss = (1.0 - eps) * (log_norm - row[target]);
  if (eps != 0.0) {
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < c; ++j) sum += row[j];
    loss += eps * (log_norm - sum / static_cast<double>(c));
  }
  // Right when the target is the arg-max, the first index on ties (as torch.argmax): its logit is
  // the row's maximum and no earlier logit equals it.
  bool correct = false;
  if (row[target] == mx) {
    int64_t earlier = 0;
#pragma omp simd reduction(+ : earlier)
    for (int64_t j = 0; j < target; ++j) earlier += row[j] == mx;
    correct = earlier == 0;
  }
  return {loss, correct};
}

// out = g · (softmax(row) − ε/C − (1 − ε)·onehot(target)); out may be row itself.
void row_grad(const float* row, int64_t c, int32_t target, float eps, float g, float shift,
              float* out) {
  const float off = eps / static_cast<float>(c);  // smoothed target mass per class
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) out[j] = g * (detail::fast_exp(row[j] - shift) - off);
  out[target] -= g * (1.f - eps);
}

int64_t counted(const int32_t* t, int64_t m, int ignore_index) {
  int64_t count = 0;
  for (int64_t i = 0; i < m; ++i) count += t[i] != ignore_index;
  return count;
}

CrossEntropyStats stats(double total, int64_t count, int64_t correct) {
  CrossEntropyStats s;
  s.count = count;
  s.correct = correct;
  s.loss = count ? total / static_cast<double>(count) : 0.0;
  return s;
}

void check_grad(const char* op, const Tensor& logits, const Tensor& dlogits) {
  if (dlogits.shape() != logits.shape() || dlogits.dtype() != DType::f32)
    throw Error(std::string(op) + ": dlogits " + shape_str(dlogits.shape()) +
                " must match logits " + shape_str(logits.shape()));
}

}  // namespace

CrossEntropyStats cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                        float label_smoothing, int ignore_index) {
  // Not a structured binding: clang before 16 cannot capture one in an OpenMP region.
  const Dims dims = check("cross_entropy_forward", logits, targets, ignore_index);
  const int64_t m = dims.rows, c = dims.classes;
  const float* x = logits.f32();
  const int32_t* t = targets.i32();
  double total = 0.0;
  int64_t count = 0, correct = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, count, correct) if (m * c > 16384)
  for (int64_t i = 0; i < m; ++i) {
    if (t[i] == ignore_index) continue;
    const float* row = x + i * c;
    float mx, lse;
    log_sum_exp(row, c, mx, lse);
    const RowLoss r = row_loss(row, c, t[i], label_smoothing, mx, lse);
    total += r.loss;
    ++count;
    correct += r.correct;
  }
  return stats(total, count, correct);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                            int ignore_index, float scale, Tensor& dlogits) {
  // Not a structured binding: clang before 16 cannot capture one in an OpenMP region.
  const Dims dims = check("cross_entropy_backward", logits, targets, ignore_index);
  const int64_t m = dims.rows, c = dims.classes;
  check_grad("cross_entropy_backward", logits, dlogits);
  const float* x = logits.f32();
  const int32_t* t = targets.i32();
  float* d = dlogits.f32();
  const int64_t count = counted(t, m, ignore_index);
  const float g = count ? scale / static_cast<float>(count) : 0.f;
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
    row_grad(row, c, t[i], label_smoothing, g, mx + lse, dr);
  }
}

CrossEntropyStats cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets,
                                                 float label_smoothing, int ignore_index,
                                                 float scale, Tensor& dlogits) {
  // Not a structured binding: clang before 16 cannot capture one in an OpenMP region.
  const Dims dims = check("cross_entropy_forward_backward", logits, targets, ignore_index);
  const int64_t m = dims.rows, c = dims.classes;
  check_grad("cross_entropy_forward_backward", logits, dlogits);
  const float* x = logits.f32();
  const int32_t* t = targets.i32();
  float* d = dlogits.f32();
  const int64_t count = counted(t, m, ignore_index);
  const float g = count ? scale / static_cast<float>(count) : 0.f;
  double total = 0.0;
  int64_t correct = 0;
  // Row by row: the row is read once from memory, then its loss terms and its gradient (written
  // last, so that d may be x) come from the cache.
#pragma omp parallel for schedule(static) reduction(+ : total, correct) if (m * c > 16384)
  for (int64_t i = 0; i < m; ++i) {
    float* dr = d + i * c;
    if (t[i] == ignore_index) {
      std::fill(dr, dr + c, 0.f);
      continue;
    }
    const float* row = x + i * c;
    float mx, lse;
    log_sum_exp(row, c, mx, lse);
    const RowLoss r = row_loss(row, c, t[i], label_smoothing, mx, lse);
    total += r.loss;
    correct += r.correct;
    row_grad(row, c, t[i], label_smoothing, g, mx + lse, dr);
  }
  return stats(total, count, correct);
}

}  // namespace vitk::ops::VITK_ISA_NAMESPACE

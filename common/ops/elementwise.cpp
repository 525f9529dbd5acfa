// Residual add, gradient accumulation, the global gradient norm and rounding to bf16.
#include <cmath>

#include "common/error.h"
#include "common/ops/kernel_functions.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"

namespace vitk::ops::VITK_ISA_NAMESPACE {
namespace {

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != DType::f32 || b.dtype() != DType::f32)
    throw Error(std::string(op) + ": " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                " must be f32 of the same shape");
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& y) {
  check_same("add", a, b);
  check_same("add", a, y);
  const int64_t n = a.numel();
  profile::Scope scope("add", n);
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* py = y.f32();
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
}

void accumulate(Tensor& y, const Tensor& x, float alpha) {
  check_same("accumulate", y, x);
  const int64_t n = x.numel();
  profile::Scope scope("accumulate", n);
  const float* px = x.f32();
  float* py = y.f32();
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) py[i] += alpha * px[i];
}

double l2_norm(const Tensor& t) {
  const int64_t n = t.numel();
  const float* p = t.f32();
  double sum = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]) * p[i];
  return std::sqrt(sum);
}

double clip_grad_norm(Tensor& grads, double max_norm) {
  if (!(max_norm > 0)) throw Error("gradient clipping needs a positive max norm");
  const double norm = l2_norm(grads);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const float c = static_cast<float>(coef);
    const int64_t n = grads.numel();
    float* p = grads.f32();
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] *= c;
  }
  return norm;
}

void round_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  profile::Scope scope("round_bf16");
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void round_to_bf16(const Tensor& src, Tensor& dst) {
  if (src.dtype() != DType::f32 || dst.dtype() != DType::bf16 || src.numel() != dst.numel())
    throw Error("round_to_bf16: want f32 source and bf16 destination of the same size, got " +
                std::string(dtype_name(src.dtype())) + " " + shape_str(src.shape()) + " and " +
                dtype_name(dst.dtype()) + " " + shape_str(dst.shape()));
  VITK_ISA_NAMESPACE::round_to_bf16(src.f32(), dst.bf16(), src.numel());
}

}  // namespace vitk::ops::VITK_ISA_NAMESPACE

// ReLU and exact (erf) GELU as plain vectorised loops. oneDNN 2.6's eltwise gelu_erf took about
// 13 ms on a [6400, 768] activation; these loops take about 2.5 ms (forward, 2 threads).
//
// GELU needs Φ(x) = 1 − erfc(x/√2)/2 (x ≥ 0) or erfc(|x|/√2)/2 (x < 0) to a few ulp, including
// the tiny values of the left tail, so erfc is computed with its relative error bounded
// everywhere, in the form of Numerical Recipes' erfcc (t = 1 / (1 + z/2) maps z ∈ [0, ∞) onto
// t ∈ (0, 1]):
//   erfc(z) = t · exp(−z²) · Q(t),
// where Q(t) = erfc(z)·exp(z²)/t is smooth on [0, 1] (from 1/(2√π) at t = 0 to 1 at t = 1) and
// is a degree-10 polynomial of our own fit (common/ops/fit_gelu_poly.py: relative error 1.1e-8,
// and 1.5e-7 evaluated in f32). Numerical Recipes' form, exp(−z² + P(t)), needs a second exp for
// P; here the one exp(−z²) = exp(−x²/2) also gives the density φ(x) for the backward.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/column_sums.h"
#include "common/ops/kernel_functions.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"
#include "common/ops/transpose.h"
#include "common/ops/vmath.h"

namespace vitk::ops::VITK_ISA_NAMESPACE {
namespace {

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != DType::f32 || b.dtype() != DType::f32)
    throw Error(std::string(op) + ": " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                " must be f32 of the same shape");
}

// Q(t) of the header, t = 1 / (1 + |x|/(2√2)).
inline float erfcx_poly(float t) {
  float q = 0.0423524641f;
  q = q * t - 0.23085703f;
  q = q * t + 0.486177564f;
  q = q * t - 0.446975946f;
  q = q * t + 0.127088413f;
  q = q * t - 0.0572320186f;
  q = q * t + 0.0930004567f;
  q = q * t + 0.175376847f;
  q = q * t + 0.246880591f;
  q = q * t + 0.282093853f;
  q = q * t + 0.282094806f;
  return q;
}

inline float inv_one_plus(float x) {  // 1 / (1 + |x|/(2√2))
  return 1.f / (1.f + 0.35355339059327373f * std::fabs(x));
}

// Φ(x) and exp(−x²/2); inline and branch-free so that the loops calling it vectorise.
inline void gelu_parts(float x, float& cdf, float& gauss) {
  const float t = inv_one_plus(x);
  // exp(−x²/2) with the rounding error of x² put back (first order): for |x| near 5, x² alone
  // would cost about 8 ulp of relative error in the left tail.
  const float xx = x * x;
#ifdef __FMA__
  const float xx_err = std::fma(x, x, -xx);  // exact: x² − xx
#else
  const float xx_err = 0.f;  // without FMA instructions std::fma is a libm call per element
#endif
  gauss = detail::fast_exp(-0.5f * xx) * (1.f - 0.5f * xx_err);
  const float half_erfc = 0.5f * t * erfcx_poly(t) * gauss;  // erfc(|x|/√2) / 2
  cdf = x >= 0.f ? 1.f - half_erfc : half_erfc;
}

// Φ(x) alone (the forward), without the correction of x²'s rounding: a relative error of about
// (x²/2)·2⁻²⁴ in erfc, which matters only in the left tail (7e-7 of GELU's value at x = −5, where
// that value is −1.4e-6).
inline float gelu_cdf(float x) {
  const float t = inv_one_plus(x);
  const float half_erfc = 0.5f * t * erfcx_poly(t) * detail::fast_exp(-0.5f * x * x);
  return x >= 0.f ? 1.f - half_erfc : half_erfc;
}

constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr int64_t kParallelMin = 1 << 15;

// out[i] = f(in[i]), f32 or bf16 (detail::store).
template <typename Out>
void forward_into(Activation a, const float* in, int64_t n, Out* out) {
  if (a == Activation::relu) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) detail::store(out + i, in[i] > 0.f ? in[i] : 0.f);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) detail::store(out + i, in[i] * gelu_cdf(in[i]));
}

}  // namespace

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  throw UsageError("unknown activation '" + name + "' (expected relu or gelu)");
}

const char* activation_name(Activation a) {
  return a == Activation::relu ? "relu" : "gelu";
}

void activation_forward(Activation a, const Tensor& x, Tensor& y) {
  if (y.dtype() == DType::bf16) {
    if (x.shape() != y.shape() || x.dtype() != DType::f32)
      throw Error("activation_forward: " + shape_str(x.shape()) + " and bf16 " +
                  shape_str(y.shape()) + ": want f32 input of the output's shape");
  } else {
    check_same("activation_forward", x, y);
  }
  const int64_t n = x.numel();
  if (n == 0) return;
  profile::Scope scope("activation_forward", n);
  if (y.dtype() == DType::bf16)  // f(x) rounded as it is written: one pass instead of two
    forward_into(a, x.f32(), n, y.bf16());
  else
    forward_into(a, x.f32(), n, y.f32());
}

namespace {

// dx[i] = dy[i] · f'(x[i]) for i in [0, n), in one thread.
void activation_grad(Activation a, const float* in, const float* g, float* out, int64_t n) {
  if (a == Activation::relu) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? g[i] : 0.f;
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float cdf, gauss;
    gelu_parts(in[i], cdf, gauss);
    out[i] = g[i] * (cdf + in[i] * gauss * kInvSqrt2Pi);
  }
}

}  // namespace

void activation_backward_rounded(Activation a, const Tensor& x, const Tensor& dy, Tensor& dx,
                                 Tensor& dsum) {
  Tensor none;
  VITK_ISA_NAMESPACE::activation_backward_rounded(a, x, dy, dx, dsum, none);
}

void activation_backward_rounded(Activation a, const Tensor& x, const Tensor& dy, Tensor& dx,
                                 Tensor& dsum, Tensor& dx_t) {
  check_same("activation_backward_rounded", x, dy);
  const int64_t n = x.dim(-1), m = n > 0 ? x.numel() / n : 0;
  if (dx.dtype() != DType::bf16 || dx.shape() != x.shape() || dsum.dtype() != DType::f32 ||
      dsum.numel() != n)
    throw Error("activation_backward_rounded: x " + shape_str(x.shape()) + ", dx " +
                dtype_name(dx.dtype()) + " " + shape_str(dx.shape()) + ", dsum " +
                dtype_name(dsum.dtype()) + " " + shape_str(dsum.shape()) +
                ": want dx bf16 shaped like x and dsum f32 [" + std::to_string(n) + "]");
  if (!dx_t.empty() && (dx_t.dtype() != DType::bf16 || dx_t.shape() != Shape{n, m}))
    throw Error(std::string("activation_backward_rounded: dx_t ") + dtype_name(dx_t.dtype()) + " " +
                shape_str(dx_t.shape()) + ": want bf16 [" + std::to_string(n) + ", " +
                std::to_string(m) + "], the transpose of dx " + shape_str(dx.shape()));
  if (m == 0) return;
  uint16_t* out_t = dx_t.empty() ? nullptr : dx_t.bf16();
  profile::Scope scope("activation_backward_rounded", m, n);
  const float* in = x.f32();
  const float* g = dy.f32();
  uint16_t* out = dx.bf16();
  // Each block of rows is computed into its thread's buffer, summed and rounded there: the f32
  // gradient never goes to memory.
  detail::column_sums_by_block(
      m, n, dsum.f32(),
      [&](int64_t r0, int64_t r1) {
        static thread_local std::vector<float> buffer;
        buffer.resize(static_cast<size_t>((r1 - r0) * n));
        activation_grad(a, in + r0 * n, g + r0 * n, buffer.data(), (r1 - r0) * n);
        return static_cast<const float*>(buffer.data());
      },
      [&](int64_t r0, int64_t r1, const float* block) {
        detail::round_block(block, (r1 - r0) * n, out + r0 * n);
        if (out_t) detail::transpose_u16(out + r0 * n, r1 - r0, n, n, out_t + r0, m);
      });
}

void activation_backward(Activation a, const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_same("activation_backward", x, dy);
  check_same("activation_backward", x, dx);
  const int64_t n = x.numel();
  if (n == 0) return;
  profile::Scope scope("activation_backward", n);
  const float* in = x.f32();
  const float* g = dy.f32();
  float* out = dx.f32();
  constexpr int64_t kChunk = 1 << 14;  // element-wise: how the work is split changes no bit
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i0 = c * kChunk;
    activation_grad(a, in + i0, g + i0, out + i0, std::min(kChunk, n - i0));
  }
}

}  // namespace vitk::ops::VITK_ISA_NAMESPACE

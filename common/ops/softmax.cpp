// Softmax over the last axis with an optional broadcast additive mask, as a plain vectorised loop:
// fusing the mask add with the softmax saves a pass over the scores, and a fully masked row can be
// turned into zeros instead of NaN.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "common/ops/kernel_functions.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"
#include "common/ops/vmath.h"

namespace vitk::ops::VITK_ISA_NAMESPACE {
namespace {

// Element strides of mask over x's axes: 0 where the mask broadcasts (size 1).
std::vector<int64_t> mask_strides(const Tensor& x, const Tensor& mask) {
  if (mask.dtype() != DType::f32) throw Error("softmax: mask must be f32");
  if (mask.rank() != x.rank())
    throw Error("softmax: mask " + shape_str(mask.shape()) + " must have the rank of x " +
                shape_str(x.shape()));
  std::vector<int64_t> strides(x.rank(), 0);
  int64_t s = 1;
  for (int i = x.rank() - 1; i >= 0; --i) {
    if (mask.dim(i) != x.dim(i) && mask.dim(i) != 1)
      throw Error("softmax: mask " + shape_str(mask.shape()) + " does not broadcast to " +
                  shape_str(x.shape()));
    strides[i] = mask.dim(i) == 1 ? 0 : s;
    s *= mask.dim(i);
  }
  return strides;
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& mask, Tensor& y) {
  if (x.shape() != y.shape() || x.rank() < 1)
    throw Error("softmax_forward: x " + shape_str(x.shape()) + " and y " + shape_str(y.shape()) +
                " differ");
  const int64_t n = x.dim(-1), rows = n ? x.numel() / n : 0;
  profile::Scope scope("softmax_forward", rows, n);
  const float* in = x.f32();
  float* out = y.f32();
  const bool masked = !mask.empty();
  std::vector<int64_t> mstride;
  if (masked) mstride = mask_strides(x, mask);
  const float* m = masked ? mask.f32() : nullptr;
  const int outer = x.rank() - 1;
  const int64_t mcol = masked ? mstride[outer] : 0;

#pragma omp parallel for schedule(static) if (rows * n > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = in + r * n;
    float* yr = out + r * n;
    float mx = -std::numeric_limits<float>::infinity();
    if (masked) {
      // Mask offset of this row: decompose r over x's outer axes.
      int64_t off = 0, rem = r;
      for (int i = outer - 1; i >= 0; --i) {
        int64_t d = x.shape()[i];
        off += (rem % d) * mstride[i];
        rem /= d;
      }
      const float* mr = m + off;
      for (int64_t j = 0; j < n; ++j) {
        float v = xr[j] + mr[j * mcol];
        yr[j] = v;
        mx = std::max(mx, v);
      }
    } else {
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, xr[j]);
      if (yr != xr) std::copy(xr, xr + n, yr);
    }
    if (mx == -std::numeric_limits<float>::infinity()) {
      std::fill(yr, yr + n, 0.f);
      continue;
    }
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      float e = detail::fast_exp(yr[j] - mx);
      yr[j] = e;
      sum += e;
    }
    const float inv = 1.f / sum;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
  }
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  if (y.shape() != dy.shape() || y.shape() != dx.shape() || y.rank() < 1)
    throw Error("softmax_backward: y " + shape_str(y.shape()) + ", dy " + shape_str(dy.shape()) +
                " and dx " + shape_str(dx.shape()) + " differ");
  const int64_t n = y.dim(-1), rows = n ? y.numel() / n : 0;
  profile::Scope scope("softmax_backward", rows, n);
  const float* yp = y.f32();
  const float* gp = dy.f32();
  float* out = dx.f32();
#pragma omp parallel for schedule(static) if (rows * n > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = yp + r * n;
    const float* gr = gp + r * n;
    float* dr = out + r * n;
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < n; ++j) dot += yr[j] * gr[j];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - dot);
  }
}

}  // namespace vitk::ops::VITK_ISA_NAMESPACE

// The counter-based generator and dropout. Each element's draw is hash(seed, counter + i), so the
// mask does not depend on how the loop is split over threads.
#include <cmath>

#include "common/error.h"
#include "common/ops/ops.h"

namespace vitk::ops {

uint64_t Rng::next_u64() {
  return hash(seed_, counter_++);
}

float Rng::uniform() {
  return to_uniform(next_u64());
}

double Rng::normal() {
  // Box-Muller; u1 in (0, 1] so the log is finite.
  double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1p-53;
  double u2 = static_cast<double>(next_u64() >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

void dropout_forward(const Tensor& x, float p, Rng& rng, Tensor& y, Tensor& mask) {
  if (!(p >= 0.f && p < 1.f)) throw Error("dropout: p must be in [0, 1), not " + std::to_string(p));
  const int64_t n = x.numel();
  if (y.shape() != x.shape() || mask.numel() != n || mask.dtype() != DType::u8)
    throw Error("dropout_forward: x " + shape_str(x.shape()) + ", y " + shape_str(y.shape()) +
                " and u8 mask " + shape_str(mask.shape()) + " must match (the mask in size)");
  const float* in = x.f32();
  float* out = y.f32();
  uint8_t* keep = mask.u8();
  if (p == 0.f) {
    for (int64_t i = 0; i < n; ++i) keep[i] = 1;
    if (out != in) std::copy(in, in + n, out);
    return;
  }
  const uint64_t seed = rng.seed(), first = rng.reserve(static_cast<uint64_t>(n));
  const float scale = 1.f / (1.f - p);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const bool k = Rng::to_uniform(Rng::hash(seed, first + static_cast<uint64_t>(i))) >= p;
    keep[i] = k;
    out[i] = k ? in[i] * scale : 0.f;
  }
}

void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  const int64_t n = dy.numel();
  if (dx.shape() != dy.shape() || mask.numel() != n || mask.dtype() != DType::u8)
    throw Error("dropout_backward: dy " + shape_str(dy.shape()) + ", dx " + shape_str(dx.shape()) +
                " and u8 mask " + shape_str(mask.shape()) + " must match (the mask in size)");
  const float scale = 1.f / (1.f - p);
  const float* g = dy.f32();
  const uint8_t* keep = mask.u8();
  float* out = dx.f32();
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = keep[i] ? g[i] * scale : 0.f;
}

}  // namespace vitk::ops

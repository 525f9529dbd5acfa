#pragma once
// Element-wise maths written so that GCC vectorises the loops that call it (no libm calls).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/tensor.h"

namespace vitk::ops::detail {

// exp(x) with about 1 ulp of error on [-87, 88]: range reduction by ln 2 in two parts (Cody and
// Waite), then a degree-6 polynomial for exp on [-ln2/2, ln2/2]. Below about -87.3 (and for -inf)
// the result is exactly 0, which is what a masked softmax entry needs.
inline float fast_exp(float x) {
  x = x < -88.3762626647949f ? -88.3762626647949f : x;
  x = x > 88.0f ? 88.0f : x;
  // n = round(x / ln 2) by adding and removing 1.5·2^23, which leaves no fraction bits; unlike
  // std::floor this needs no libm call (GCC keeps floorf out of line unless -fno-trapping-math),
  // so loops that call fast_exp vectorise.
  constexpr float kRound = 12582912.f;
  float fx = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - fx * 0.693359375f;
  r = r + fx * 2.12194440e-4f;
  float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  int32_t e = static_cast<int32_t>(fx) + 127;
  e = e < 0 ? 0 : e;  // the clamp can round to 2^-128: a zero scale, as for 2^-127
  uint32_t bits = static_cast<uint32_t>(e) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Writes v as f32, or rounded to nearest even as bf16: one loop body for loops that write either
// (a bf16 output being the input of a bf16 product, rounded as it is written).
inline void store(float* p, float v) {
  *p = v;
}
inline void store(uint16_t* p, float v) {
  *p = f32_to_bf16(v);
}

}  // namespace vitk::ops::detail

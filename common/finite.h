#pragma once
// Finding a NaN or an infinity in weights (while loading them) and in logits (before they become a
// score): one pass, cheap beside reading or computing the values.
#include <cmath>
#include <cstdint>

namespace vitk {

// The index of the first NaN or infinity among n floats, or -1 when every one is finite.
inline int64_t first_non_finite(const float* data, int64_t n) {
  // x - x is 0 for a finite x and NaN otherwise: a branch-free sum finds whether there is one.
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc += data[i] - data[i];
  if (acc == 0.f) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(data[i])) return i;
  return -1;
}

}  // namespace vitk

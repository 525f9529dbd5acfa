#pragma once
// Bitwise comparison of tensors and loader batches, for the loader tests.
#include <cstring>

#include "common/tensor.h"
#include "datasets/loader.h"

namespace vitk::test {

inline bool same(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.empty() != b.empty()) return false;
  return a.empty() || std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

inline bool same(const datasets::Batch& a, const datasets::Batch& b) {
  return same(a.images, b.images) && same(a.labels, b.labels) && same(a.targets, b.targets) &&
         a.epoch == b.epoch && a.index == b.index;
}

}  // namespace vitk::test

#pragma once
// Bitwise comparison of tensors and loader batches, and an epoch's batches, for the loader tests.
#include <cstdint>
#include <cstring>
#include <vector>

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

// Every batch of `epoch`, from batch `first` on.
inline std::vector<datasets::Batch> epoch(datasets::Loader& loader, int64_t e, int64_t first = 0) {
  loader.start_epoch(e, first);
  std::vector<datasets::Batch> out;
  datasets::Batch b;
  while (loader.next(b)) out.push_back(b);
  return out;
}

}  // namespace vitk::test

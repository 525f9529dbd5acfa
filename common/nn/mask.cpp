// nn::AttentionMask as a matrix of 0 and 1, for pictures and tests.
#include "common/nn/mask.h"

#include "common/error.h"

namespace vitk::nn {

Tensor mask_matrix(const AttentionMask& mask, int64_t b, int64_t Tq, int64_t Tk) {
  if (Tq < 1 || Tk < 1)
    throw Error("mask_matrix: " + std::to_string(Tq) + " queries and " + std::to_string(Tk) +
                " keys; both must be at least 1");
  const bool padded = !mask.key_lengths.empty();
  if (padded && (mask.key_lengths.dtype() != DType::i32 || b < 0 || b >= mask.key_lengths.numel()))
    throw Error("mask_matrix: sequence " + std::to_string(b) + " has no key length in " +
                shape_str(mask.key_lengths.shape()));
  const int32_t* len = padded ? mask.key_lengths.i32() : nullptr;
  Tensor m({Tq, Tk});  // [Tq, Tk]
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j)
      m.f32()[i * Tk + j] = mask_visible(mask, len, b, i, j, Tq, Tk) ? 1.f : 0.f;
  return m;
}

}  // namespace vitk::nn

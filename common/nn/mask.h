#pragma once
// The rule of nn::AttentionMask as values: which key j a query i of sequence b may see. The
// attention's own additive mask (attention.cpp) is built from mask_visible, so a picture of
// mask_matrix shows exactly what the layers do.
#include <cstdint>

#include "common/nn/nn.h"

namespace vitk::nn {

// Padding hides keys at or past key_lengths[b]; causal hides keys after i + (Tk − Tq); diagonal
// hides key i + (Tk − Tq).
inline bool mask_visible(const AttentionMask& mask, const int32_t* key_lengths, int64_t b,
                         int64_t i, int64_t j, int64_t Tq, int64_t Tk) {
  if (key_lengths && j >= key_lengths[b]) return false;
  if (mask.diagonal && j == i + (Tk - Tq)) return false;
  return !(mask.causal && j > i + (Tk - Tq));
}

// f32 [Tq, Tk] for sequence b: 1 where the query may attend to the key, 0 where it may not.
Tensor mask_matrix(const AttentionMask& mask, int64_t b, int64_t Tq, int64_t Tk);

}  // namespace vitk::nn

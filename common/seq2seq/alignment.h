#pragma once
// Source-target alignment as the translation model sees it: the cross-attention weights of one
// decoder layer while it produces a given translation (`vitk translate --attention-dir`).
//
// The weights come from one teacher-forced forward over the chosen output rather than from the
// search itself: beam search reorders and drops rows as it goes, and the output it settles on is
// known only at the end. Decoding is deterministic, so the forced forward attends exactly as the
// search did on its way to that output (tests/seq2seq/test_alignment.cpp checks it against
// Decoder::step).
#include <cstdint>
#include <string>
#include <vector>

#include "common/ops/ops.h"
#include "common/seq2seq/model.h"

namespace vitk::seq2seq {

struct AlignmentOptions {
  int layer = -1;  // decoder layer, 0-based; -1: the last
  int head = -1;   // -1: the mean of the heads
  // Of the forced forward's products: the search's, so that it attends as the search did.
  ops::Precision precision = ops::Precision::f32;
};

// Cross-attention weights [rows, Ts] of `layer` for the translation `target` (tokens without BOS
// and EOS) of `source` (ids as the model reads them, EOS included): row t is the decoder position
// that predicts target[t], and with `with_eos` a last row for the position that predicts EOS (a
// hypothesis cut by the length limit has none). Each row sums to 1 over the source.
// vitk::UsageError for a layer or head the model does not have; vitk::Error for bad ids.
Tensor cross_attention(Transformer& model, const std::vector<int>& source,
                       const std::vector<int32_t>& target, bool with_eos,
                       const AlignmentOptions& options);

// "decoder layer 5 of 6 (the last), mean of 8 heads": what the picture shows.
std::string describe(const Transformer& model, const AlignmentOptions& options);

}  // namespace vitk::seq2seq

#pragma once
// The translation model's training batches: pairs of token ids cut into batches by size,
// sentences of similar length together, in an order fixed by a seed and the epoch.
#include <cstdint>
#include <vector>

#include "common/tensor.h"

namespace vitk::seq2seq {

struct TokenBatch {
  Tensor source;      // i32 [B, Ts]: source ids, padded with kPadId (no BOS/EOS added)
  Tensor target_in;   // i32 [B, Tt]: BOS + target ids, padded
  Tensor target_out;  // i32 [B, Tt]: target ids + EOS, padded
  Tensor source_lengths, target_lengths;  // i32 [B]: tokens; target counts the EOS (tokens + 1)
  std::vector<int64_t> index;             // [B]: pair indices into the batcher's input
  int64_t target_tokens = 0;              // sum of target_lengths: the predicted positions
};

// Batches by number of tokens. An epoch shuffles the pairs, sorts them by length within pools of
// about 100 batches (so that a batch holds sentences of similar length and little padding),
// cuts each pool into batches whose padded size max(B·Ts, B·Tt) stays within max_tokens, and
// shuffles the batch order. A pair too long to fit even alone gets a batch of its own. The
// result depends only on (the data, max_tokens, seed, epoch).
class TokenBatcher {
 public:
  TokenBatcher(std::vector<std::vector<int>> src, std::vector<std::vector<int>> tgt,
               int64_t max_tokens /* per batch, padded size max(B·Ts, B·Tt) */, uint64_t seed);
  std::vector<TokenBatch> epoch(int64_t epoch) const;
  int64_t pairs() const { return static_cast<int64_t>(src_.size()); }

 private:
  std::vector<std::vector<int>> src_, tgt_;
  int64_t max_tokens_;
  uint64_t seed_;
};

}  // namespace vitk::seq2seq

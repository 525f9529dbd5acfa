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

// Splits a batch into `parts` pieces for data-parallel training: N ranks × K accumulation
// micro-batches share every global batch, so that --max-tokens keeps meaning the global batch and
// a run makes the same batches whatever N and K (the batcher never sees N).
// - Pieces are contiguous runs of the batch's rows, in order (the batcher sorts a batch by length,
//   so a piece holds similar lengths): piece p is rows [c_p, c_{p+1}). The caller chooses which
//   piece goes where; piece r·K + k for rank r's micro-batch k keeps a rank's rows together.
// - Balance: with at least `parts` rows every piece has rows, and the pieces' target tokens all lie
//   within [L, L + W], W the longest row's target tokens, L as large as possible; so two pieces
//   differ by at most one sentence's tokens, in any row order.
// - Each piece is re-padded to its own longest source and target (at least one column), with its
//   own lengths, pair indices and target_tokens; padding is kPadId.
// - With fewer rows than parts, pieces [0, B) hold a row each and the rest are EMPTY: zero rows,
//   tensors [0, 1] and [0] (allocated), no index, target_tokens 0. A rank whose pieces are all
//   empty contributes nothing (loss 0, zero gradients: it skips forward and backward) but still
//   joins the all-reduce.
// - A piece's loss is a mean over its own tokens: the caller weights it by
//   piece.target_tokens / batch.target_tokens so that the pieces add up to the batch's mean.
// parts = 1 gives the batch itself (the same tensors). A pure function of (batch, parts); throws
// vitk::Error for parts < 1 or a batch whose tensors, lengths and indices do not agree.
std::vector<TokenBatch> split_batch(const TokenBatch& batch, int parts);

}  // namespace vitk::seq2seq

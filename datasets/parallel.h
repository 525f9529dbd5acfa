#pragma once
// Parallel text for translation: reading a corpus (a TSV file or two line-aligned files) with
// clear messages for what is wrong in it, and batching token sequences by size, sentences of
// similar length together, in an order fixed by a seed and the epoch.
#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor.h"

namespace vitk::datasets {

struct ParallelCorpus {
  std::vector<std::string> source, target;
  std::vector<int64_t> line;  // 1-based line of each pair in the file(s)
};

struct ParallelReport {
  int64_t read = 0;      // pairs (lines) read
  int64_t kept = 0;      // pairs returned
  int64_t empty = 0;     // skipped: a side empty or only whitespace
  int64_t too_long = 0;  // skipped: a side longer than max_bytes_per_side
};

// Reads `path_or_tsv` as source<TAB>target lines when `target_path` is empty, else the source
// from `path_or_tsv` and the target from `target_path`, line by line. CRLF line ends and a UTF-8
// byte order mark are accepted. Throws vitk::Error for a missing file, files of unequal length
// (naming both and their counts), invalid UTF-8 (file:line and byte offset in the line) and a
// TSV line without exactly one tab (file:line). Pairs with an empty side, or a side longer than
// `max_bytes_per_side` bytes (0: no limit), are skipped and counted in `report` (may be null).
ParallelCorpus read_parallel(const std::string& path_or_tsv, const std::string& target_path,
                             int64_t max_bytes_per_side, ParallelReport* report);

struct TokenBatch {
  Tensor source;      // i32 [B, Ts]: source ids, padded with Tokenizer::kPad (no BOS/EOS added)
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

}  // namespace vitk::datasets

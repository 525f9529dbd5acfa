// Batches of token ids by size (see batches.h).
#include "common/seq2seq/batches.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/seq2seq/config.h"

namespace vitk::seq2seq {

TokenBatcher::TokenBatcher(std::vector<std::vector<int>> src, std::vector<std::vector<int>> tgt,
                           int64_t max_tokens, uint64_t seed)
    : src_(std::move(src)), tgt_(std::move(tgt)), max_tokens_(max_tokens), seed_(seed) {
  if (src_.size() != tgt_.size()) {
    throw Error("token batcher: " + std::to_string(src_.size()) + " source sequences but " +
                std::to_string(tgt_.size()) + " target sequences");
  }
  if (max_tokens_ <= 0) {
    throw Error("token batcher: max tokens per batch must be positive, got " +
                std::to_string(max_tokens_));
  }
  for (size_t i = 0; i < src_.size(); ++i) {
    for (const auto* seq : {&src_[i], &tgt_[i]}) {
      for (int id : *seq) {
        if (id < 0) {
          throw Error("token batcher: pair " + std::to_string(i) + " has a negative id " +
                      std::to_string(id));
        }
      }
    }
  }
}

std::vector<TokenBatch> TokenBatcher::epoch(int64_t epoch) const {
  const size_t n = src_.size();
  std::vector<TokenBatch> batches;
  if (n == 0) return batches;
  std::seed_seq seq{static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32),
                    static_cast<uint32_t>(epoch), static_cast<uint32_t>(uint64_t(epoch) >> 32)};
  std::mt19937_64 rng(seq);

  auto src_len = [&](size_t i) { return static_cast<int64_t>(src_[i].size()); };
  auto tgt_len = [&](size_t i) { return static_cast<int64_t>(tgt_[i].size()) + 1; };  // +BOS/EOS
  auto width = [&](size_t i) { return std::max(src_len(i), tgt_len(i)); };

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), rng);

  // A pool holds about 100 batches' worth of pairs at the corpus's mean width.
  double mean_width = 0;
  for (size_t i = 0; i < n; ++i) mean_width += static_cast<double>(width(i));
  mean_width /= static_cast<double>(n);
  const double per_batch = std::max(1.0, static_cast<double>(max_tokens_) / mean_width);
  const size_t pool = static_cast<size_t>(std::max(1.0, 100.0 * per_batch));

  std::vector<std::vector<size_t>> groups;
  for (size_t begin = 0; begin < n; begin += pool) {
    const size_t end = std::min(n, begin + pool);
    std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(begin),
                     order.begin() + static_cast<std::ptrdiff_t>(end), [&](size_t a, size_t b) {
                       if (width(a) != width(b)) return width(a) < width(b);
                       if (tgt_len(a) != tgt_len(b)) return tgt_len(a) < tgt_len(b);
                       return src_len(a) < src_len(b);
                     });
    std::vector<size_t> current;
    int64_t ts = 0, tt = 0;
    for (size_t k = begin; k < end; ++k) {
      const size_t i = order[k];
      const int64_t new_ts = std::max(ts, src_len(i)), new_tt = std::max(tt, tgt_len(i));
      const int64_t b = static_cast<int64_t>(current.size()) + 1;
      if (!current.empty() && std::max(b * new_ts, b * new_tt) > max_tokens_) {
        groups.push_back(std::move(current));
        current.clear();
        ts = src_len(i);
        tt = tgt_len(i);
      } else {
        ts = new_ts;
        tt = new_tt;
      }
      current.push_back(i);
    }
    if (!current.empty()) groups.push_back(std::move(current));
  }
  std::shuffle(groups.begin(), groups.end(), rng);

  batches.reserve(groups.size());
  for (const auto& g : groups) {
    const int64_t b = static_cast<int64_t>(g.size());
    int64_t ts = 1, tt = 1;  // at least one column, so that an empty sequence has a tensor
    for (size_t i : g) {
      ts = std::max(ts, src_len(i));
      tt = std::max(tt, tgt_len(i));
    }
    TokenBatch batch;
    batch.source = Tensor({b, ts}, DType::i32);  // zero-filled: kPad is 0
    batch.target_in = Tensor({b, tt}, DType::i32);
    batch.target_out = Tensor({b, tt}, DType::i32);
    batch.source_lengths = Tensor({b}, DType::i32);
    batch.target_lengths = Tensor({b}, DType::i32);
    static_assert(kPadId == 0, "tensors are zero-filled as padding");
    int32_t* s = batch.source.i32();
    int32_t* ti = batch.target_in.i32();
    int32_t* to = batch.target_out.i32();
    for (int64_t r = 0; r < b; ++r) {
      const size_t i = g[static_cast<size_t>(r)];
      const auto& sv = src_[i];
      const auto& tv = tgt_[i];
      std::copy(sv.begin(), sv.end(), s + r * ts);
      ti[r * tt] = kBosId;
      std::copy(tv.begin(), tv.end(), ti + r * tt + 1);
      std::copy(tv.begin(), tv.end(), to + r * tt);
      to[r * tt + static_cast<int64_t>(tv.size())] = kEosId;
      batch.source_lengths.i32()[r] = static_cast<int32_t>(sv.size());
      batch.target_lengths.i32()[r] = static_cast<int32_t>(tv.size() + 1);
      batch.index.push_back(static_cast<int64_t>(i));
      batch.target_tokens += static_cast<int64_t>(tv.size()) + 1;
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace vitk::seq2seq

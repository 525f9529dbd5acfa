// Batches of token ids by size (see batches.h).
#include "common/seq2seq/batches.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/seq2seq/config.h"

namespace vitk::seq2seq {

namespace {

// A batch of `rows` sentences, source ts and target tt columns wide, all padding (kPadId).
TokenBatch padded_batch(int64_t rows, int64_t ts, int64_t tt) {
  static_assert(kPadId == 0, "tensors are zero-filled as padding");
  TokenBatch batch;
  batch.source = Tensor({rows, ts}, DType::i32);
  batch.target_in = Tensor({rows, tt}, DType::i32);
  batch.target_out = Tensor({rows, tt}, DType::i32);
  batch.source_lengths = Tensor({rows}, DType::i32);
  batch.target_lengths = Tensor({rows}, DType::i32);
  return batch;
}

}  // namespace

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
    TokenBatch batch = padded_batch(b, ts, tt);
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

namespace {

// Rows [begin, end) of a batch, re-padded to their own longest source and target.
TokenBatch rows_of(const TokenBatch& batch, int64_t begin, int64_t end) {
  const int64_t b = end - begin;
  const int64_t ts_in = batch.source.dim(1), tt_in = batch.target_in.dim(1);
  const int32_t* sl = batch.source_lengths.i32();
  const int32_t* tl = batch.target_lengths.i32();
  int64_t ts = 1, tt = 1;  // at least one column, as the batcher makes them
  for (int64_t r = begin; r < end; ++r) {
    ts = std::max<int64_t>(ts, sl[r]);
    tt = std::max<int64_t>(tt, tl[r]);
  }
  TokenBatch piece = padded_batch(b, ts, tt);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t k = r - begin;
    // A row's own tokens (target_in: BOS + ids, target_out: ids + EOS, both tl long); the rest
    // of the piece's row stays kPadId.
    std::copy_n(batch.source.i32() + r * ts_in, sl[r], piece.source.i32() + k * ts);
    std::copy_n(batch.target_in.i32() + r * tt_in, tl[r], piece.target_in.i32() + k * tt);
    std::copy_n(batch.target_out.i32() + r * tt_in, tl[r], piece.target_out.i32() + k * tt);
    piece.source_lengths.i32()[k] = sl[r];
    piece.target_lengths.i32()[k] = tl[r];
    piece.index.push_back(batch.index[static_cast<size_t>(r)]);
    piece.target_tokens += tl[r];
  }
  return piece;
}

// Cuts 0 = c_0 < c_1 < ... < c_parts = n of n >= parts rows of target tokens w (each in [1, W])
// into contiguous pieces whose sums all lie in one window [L, L + W], so that no two differ by
// more than one row's tokens, whatever the rows' order. With S the prefix sums:
// - The ends reachable with k pieces of sums in [L, L + W] are all the S_j in an interval
//   [a_k, b_k]: consecutive S differ by at most W, so the windows [v + L, v + L + W] from
//   consecutive reachable v overlap; a_k = min{S >= a_{k-1} + L}, b_k = max{S <= b_{k-1} + L + W}.
// - a_k(L) is the greedy pass "each piece the fewest rows reaching L"; take the largest L for
//   which it makes `parts` pieces. By induction b_k(L) >= a_k(L + 1), as
//   a_k(L + 1) <= a_{k-1}(L + 1) + L + W. The greedy pass at L + 1 runs out of rows at some
//   piece k, so b_{k-1}(L) > S_n - L - 1, b_k(L) = S_n: the window [L, L + W] holds a partition.
// Walking back from S_n, each cut is the reachable one nearest the proportional share.
std::vector<int64_t> balanced_cuts(const std::vector<int64_t>& w, int parts) {
  const int64_t n = static_cast<int64_t>(w.size());
  std::vector<int64_t> sum(w.size() + 1, 0);
  int64_t widest = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum[i + 1] = sum[i] + w[static_cast<size_t>(i)];
    widest = std::max(widest, w[static_cast<size_t>(i)]);
  }
  // First index whose prefix sum is >= v (n + 1: none), and last one whose prefix sum is <= v.
  const auto first_at_least = [&](int64_t v) {
    return static_cast<int64_t>(std::lower_bound(sum.begin(), sum.end(), v) - sum.begin());
  };
  const auto last_at_most = [&](int64_t v) {
    return static_cast<int64_t>(std::upper_bound(sum.begin(), sum.end(), v) - sum.begin()) - 1;
  };
  // near[k], far[k]: the first and last row index where k pieces can end (a_k, b_k above).
  std::vector<int64_t> near(static_cast<size_t>(parts) + 1, 0), far(near.size(), 0);
  // The greedy pass for pieces of at least `least` tokens; false if the rows run out.
  const auto greedy = [&](int64_t least) {
    for (int k = 1; k <= parts; ++k) {
      near[k] = first_at_least(sum[near[k - 1]] + least);
      if (near[k] > n) return false;
    }
    return true;
  };
  // The largest L that works: 1 does (a row per piece), more than S_n / parts cannot.
  int64_t least = 1;
  for (int64_t most = sum[n] / parts; least < most;) {
    const int64_t mid = most - (most - least) / 2;
    if (greedy(mid))
      least = mid;
    else
      most = mid - 1;
  }
  greedy(least);
  for (int k = 1; k <= parts; ++k) far[k] = last_at_most(sum[far[k - 1]] + least + widest);
  if (far[parts] != n) throw Error("split_batch: no balanced cut found (a bug)");
  std::vector<int64_t> cuts(static_cast<size_t>(parts) + 1, n);
  for (int k = parts; k >= 1; --k) {
    // The start of piece k: reachable with k - 1 pieces, and leaving piece k a sum in the window.
    const int64_t end = cuts[k];
    const int64_t first = std::max(near[k - 1], first_at_least(sum[end] - least - widest));
    const int64_t last = std::min(far[k - 1], last_at_most(sum[end] - least));
    if (first > last) throw Error("split_batch: no balanced cut found (a bug)");
    // Nearest (k - 1)/k of the way to the end: |k·S_i − (k − 1)·S_end| least, first of equals.
    const auto miss = [&](int64_t i) { return std::abs(k * sum[i] - (k - 1) * sum[end]); };
    int64_t best = std::clamp(first_at_least(((k - 1) * sum[end] + k - 1) / k), first, last);
    if (best > first && miss(best - 1) <= miss(best)) --best;
    cuts[k - 1] = best;
  }
  return cuts;
}

}  // namespace

std::vector<TokenBatch> split_batch(const TokenBatch& batch, int parts) {
  if (parts < 1)
    throw Error("split_batch: a batch is split into at least 1 part, not " + std::to_string(parts));
  const bool shaped = batch.source.rank() == 2 && batch.target_in.rank() == 2 &&
                      batch.source.dtype() == DType::i32 && batch.target_in.dtype() == DType::i32;
  const int64_t b = shaped ? batch.source.dim(0) : -1;
  const auto vector_of = [b](const Tensor& t) {
    return t.rank() == 1 && t.dim(0) == b && t.dtype() == DType::i32;
  };
  if (!shaped || batch.target_in.dim(0) != b ||
      batch.target_out.shape() != batch.target_in.shape() ||
      batch.target_out.dtype() != DType::i32 || !vector_of(batch.source_lengths) ||
      !vector_of(batch.target_lengths) || static_cast<int64_t>(batch.index.size()) != b)
    throw Error("split_batch: the batch's tensors do not agree: source " +
                shape_str(batch.source.shape()) + ", target_in " +
                shape_str(batch.target_in.shape()) + ", target_out " +
                shape_str(batch.target_out.shape()) + ", lengths " +
                shape_str(batch.source_lengths.shape()) + " and " +
                shape_str(batch.target_lengths.shape()) + ", " +
                std::to_string(batch.index.size()) + " indices");
  std::vector<int64_t> tokens(static_cast<size_t>(b));
  for (int64_t r = 0; r < b; ++r) {
    const int32_t sl = batch.source_lengths.i32()[r], tl = batch.target_lengths.i32()[r];
    if (sl < 0 || sl > batch.source.dim(1) || tl < 1 || tl > batch.target_in.dim(1))
      throw Error("split_batch: row " + std::to_string(r) + " has lengths " + std::to_string(sl) +
                  " and " + std::to_string(tl) + " in a batch padded to " +
                  std::to_string(batch.source.dim(1)) + " and " +
                  std::to_string(batch.target_in.dim(1)));
    tokens[static_cast<size_t>(r)] = tl;
  }
  if (parts == 1) return {batch};
  std::vector<TokenBatch> pieces;
  pieces.reserve(static_cast<size_t>(parts));
  if (b <= parts) {
    for (int64_t p = 0; p < parts; ++p)
      pieces.push_back(rows_of(batch, std::min(p, b), std::min(p + 1, b)));
    return pieces;
  }
  const std::vector<int64_t> cuts = balanced_cuts(tokens, parts);
  for (int p = 0; p < parts; ++p) pieces.push_back(rows_of(batch, cuts[p], cuts[p + 1]));
  return pieces;
}

}  // namespace vitk::seq2seq

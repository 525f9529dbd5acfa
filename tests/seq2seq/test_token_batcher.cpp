// The token batcher (common/seq2seq/batches.h): every pair once per epoch, correct padding, the
// token budget, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/seq2seq/batches.h"
#include "common/vocabulary.h"

namespace {

using vitk::seq2seq::TokenBatch;
using vitk::seq2seq::TokenBatcher;
using Tokenizer = vitk::Vocabulary;

struct Data {
  std::vector<std::vector<int>> src, tgt;
};

Data random_pairs(int n, unsigned seed) {
  std::mt19937 rng(seed);
  Data d;
  for (int i = 0; i < n; ++i) {
    std::vector<int> s(1 + rng() % 30), t(1 + rng() % 30);
    for (auto& x : s) x = 4 + static_cast<int>(rng() % 100);
    for (auto& x : t) x = 4 + static_cast<int>(rng() % 100);
    d.src.push_back(s);
    d.tgt.push_back(t);
  }
  return d;
}

void check_epoch(const Data& d, const std::vector<TokenBatch>& batches, int64_t max_tokens) {
  std::vector<int> seen(d.src.size(), 0);
  for (const auto& b : batches) {
    const int64_t rows = static_cast<int64_t>(b.index.size());
    ASSERT_GT(rows, 0);
    ASSERT_EQ(b.source.rank(), 2);
    ASSERT_EQ(b.source.dim(0), rows);
    ASSERT_EQ(b.target_in.shape(), b.target_out.shape());
    ASSERT_EQ(b.target_in.dim(0), rows);
    const int64_t ts = b.source.dim(1), tt = b.target_in.dim(1);
    // The budget, unless a single pair is alone in its batch.
    if (rows > 1) {
      EXPECT_LE(std::max(rows * ts, rows * tt), max_tokens);
    }
    int64_t target_tokens = 0;
    int64_t longest_s = 0, longest_t = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const auto i = static_cast<size_t>(b.index[static_cast<size_t>(r)]);
      ++seen[i];
      const auto& s = d.src[i];
      const auto& t = d.tgt[i];
      const int64_t ls = static_cast<int64_t>(s.size()), lt = static_cast<int64_t>(t.size());
      longest_s = std::max(longest_s, ls);
      longest_t = std::max(longest_t, lt + 1);
      EXPECT_EQ(b.source_lengths.i32()[r], ls);
      EXPECT_EQ(b.target_lengths.i32()[r], lt + 1);
      target_tokens += lt + 1;
      for (int64_t c = 0; c < ts; ++c) {
        EXPECT_EQ(b.source.i32()[r * ts + c], c < ls ? s[c] : Tokenizer::kPad);
      }
      for (int64_t c = 0; c < tt; ++c) {
        const int in = b.target_in.i32()[r * tt + c], out = b.target_out.i32()[r * tt + c];
        EXPECT_EQ(in, c == 0 ? Tokenizer::kBos : c <= lt ? t[c - 1] : Tokenizer::kPad);
        EXPECT_EQ(out, c < lt ? t[c] : c == lt ? Tokenizer::kEos : Tokenizer::kPad);
      }
    }
    // No needless padding column.
    EXPECT_EQ(ts, std::max<int64_t>(1, longest_s));
    EXPECT_EQ(tt, longest_t);
    EXPECT_EQ(b.target_tokens, target_tokens);
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "pair " << i;
}

TEST(TokenBatcher, EveryPairOncePaddedWithinBudget) {
  const Data d = random_pairs(500, 1);
  const TokenBatcher batcher(d.src, d.tgt, 256, 42);
  EXPECT_EQ(batcher.pairs(), 500);
  for (int64_t e = 0; e < 3; ++e) check_epoch(d, batcher.epoch(e), 256);
}

TEST(TokenBatcher, SimilarLengthsTogether) {
  // Sorting within pools keeps padding low: well under the padding of a random order.
  const Data d = random_pairs(2000, 2);
  const auto batches = TokenBatcher(d.src, d.tgt, 400, 3).epoch(0);
  int64_t real = 0, padded = 0;
  for (const auto& b : batches) {
    for (int64_t r = 0; r < b.source.dim(0); ++r) real += b.source_lengths.i32()[r];
    padded += b.source.numel();
  }
  EXPECT_GT(static_cast<double>(real) / static_cast<double>(padded), 0.8);
}

TEST(TokenBatcher, OverLongPairAlone) {
  Data d = random_pairs(50, 4);
  d.src[7] = std::vector<int>(300, 9);  // alone it is 300 tokens > 100
  d.tgt[13] = std::vector<int>(150, 9);
  const TokenBatcher batcher(d.src, d.tgt, 100, 5);
  const auto batches = batcher.epoch(0);
  check_epoch(d, batches, 100);
  for (const auto& b : batches) {
    for (int64_t i : b.index) {
      if (i == 7 || i == 13) {
        EXPECT_EQ(b.index.size(), 1u);
      }
    }
  }
}

TEST(TokenBatcher, DeterministicPerSeedAndEpoch) {
  const Data d = random_pairs(400, 6);
  auto order = [](const std::vector<TokenBatch>& bs) {
    std::vector<std::vector<int64_t>> out;
    for (const auto& b : bs) out.push_back(b.index);
    return out;
  };
  const TokenBatcher a(d.src, d.tgt, 300, 11), b(d.src, d.tgt, 300, 11), c(d.src, d.tgt, 300, 12);
  EXPECT_EQ(order(a.epoch(0)), order(b.epoch(0)));
  EXPECT_EQ(order(a.epoch(5)), order(a.epoch(5)));
  EXPECT_NE(order(a.epoch(0)), order(a.epoch(1)));
  EXPECT_NE(order(a.epoch(0)), order(c.epoch(0)));
}

TEST(TokenBatcher, EdgeCases) {
  EXPECT_TRUE(TokenBatcher({}, {}, 10, 1).epoch(0).empty());
  // An empty source sequence still has a one-column (padding) tensor.
  const Data d{{{}, {5, 6}}, {{7}, {}}};
  const auto batches = TokenBatcher(d.src, d.tgt, 1000, 1).epoch(0);
  ASSERT_EQ(batches.size(), 1u);
  check_epoch(d, batches, 1000);
  EXPECT_THROW(TokenBatcher({{4}}, {}, 10, 1), vitk::Error);
  EXPECT_THROW(TokenBatcher({{4}}, {{4}}, 0, 1), vitk::Error);
  EXPECT_THROW(TokenBatcher({{-1}}, {{4}}, 10, 1), vitk::Error);
}

}  // namespace

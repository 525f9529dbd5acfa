// split_batch: a translation batch cut into pieces for ranks × micro-batches. Every row once and
// in order, each piece re-padded to its own lengths with the rows' tokens unchanged, target
// tokens balanced to within one sentence in any row order (the smallest piece checked against
// brute force), empty pieces well-formed, one part the batch itself, bad arguments refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/seq2seq/batches.h"
#include "common/seq2seq/config.h"

using namespace vitk;
using namespace vitk::seq2seq;

namespace {

using Ids = std::vector<std::vector<int>>;

// A batch of the given pairs in the given order, laid out as TokenBatcher lays one out.
TokenBatch make_batch(const Ids& src, const Ids& tgt) {
  const int64_t b = static_cast<int64_t>(src.size());
  int64_t ts = 1, tt = 1;
  for (int64_t r = 0; r < b; ++r) {
    ts = std::max<int64_t>(ts, static_cast<int64_t>(src[r].size()));
    tt = std::max<int64_t>(tt, static_cast<int64_t>(tgt[r].size()) + 1);
  }
  TokenBatch batch;
  batch.source = Tensor({b, ts}, DType::i32);
  batch.target_in = Tensor({b, tt}, DType::i32);
  batch.target_out = Tensor({b, tt}, DType::i32);
  batch.source_lengths = Tensor({b}, DType::i32);
  batch.target_lengths = Tensor({b}, DType::i32);
  for (int64_t r = 0; r < b; ++r) {
    std::copy(src[r].begin(), src[r].end(), batch.source.i32() + r * ts);
    batch.target_in.i32()[r * tt] = kBosId;
    std::copy(tgt[r].begin(), tgt[r].end(), batch.target_in.i32() + r * tt + 1);
    std::copy(tgt[r].begin(), tgt[r].end(), batch.target_out.i32() + r * tt);
    batch.target_out.i32()[r * tt + static_cast<int64_t>(tgt[r].size())] = kEosId;
    batch.source_lengths.i32()[r] = static_cast<int32_t>(src[r].size());
    batch.target_lengths.i32()[r] = static_cast<int32_t>(tgt[r].size() + 1);
    batch.index.push_back(100 + r);
    batch.target_tokens += static_cast<int64_t>(tgt[r].size()) + 1;
  }
  return batch;
}

std::vector<int> ids(std::mt19937& rng, int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int& x : v) x = 4 + static_cast<int>(rng() % 90);
  return v;
}

// Realistic batches: TokenBatcher's, of pairs up to `longest` tokens.
std::vector<TokenBatch> batcher_batches(int pairs, int longest, int64_t max_tokens, unsigned seed) {
  std::mt19937 rng(seed);
  Ids src, tgt;
  for (int i = 0; i < pairs; ++i) {
    src.push_back(ids(rng, static_cast<int>(rng() % longest)));
    tgt.push_back(ids(rng, static_cast<int>(rng() % longest)));
  }
  return TokenBatcher(src, tgt, max_tokens, seed).epoch(0);
}

int64_t longest_target(const TokenBatch& b) {
  int64_t m = 0;
  for (int64_t r = 0; r < b.target_lengths.numel(); ++r)
    m = std::max<int64_t>(m, b.target_lengths.i32()[r]);
  return m;
}

// Row r of a [B, T] i32 tensor: the first `len` values equal `want`'s row r and the rest kPadId.
void expect_row(const Tensor& got, int64_t r, const Tensor& want, int64_t wr, int64_t len) {
  const int64_t t = got.dim(1), tw = want.dim(1);
  for (int64_t k = 0; k < t; ++k)
    EXPECT_EQ(got.i32()[r * t + k], k < len ? want.i32()[wr * tw + k] : kPadId)
        << "row " << r << " column " << k;
}

// Checks the pieces against the batch: every row once, in order, tokens and lengths unchanged,
// each piece padded to its own longest (at least 1), target_tokens per piece and in total.
void expect_pieces(const TokenBatch& batch, const std::vector<TokenBatch>& pieces, int parts) {
  ASSERT_EQ(static_cast<int>(pieces.size()), parts);
  const int64_t rows = static_cast<int64_t>(batch.index.size());
  int64_t row = 0, tokens = 0;
  for (const TokenBatch& p : pieces) {
    const int64_t b = static_cast<int64_t>(p.index.size());
    ASSERT_EQ(p.source.rank(), 2);
    ASSERT_EQ(p.source.dim(0), b);
    ASSERT_EQ(p.target_in.dim(0), b);
    ASSERT_EQ(p.target_out.shape(), p.target_in.shape());
    ASSERT_EQ(p.source_lengths.shape(), (Shape{b}));
    ASSERT_EQ(p.target_lengths.shape(), (Shape{b}));
    for (const Tensor* t :
         {&p.source, &p.target_in, &p.target_out, &p.source_lengths, &p.target_lengths}) {
      EXPECT_EQ(t->dtype(), DType::i32);
      EXPECT_FALSE(t->empty());  // allocated even with no rows
    }
    if (rows >= parts) {
      EXPECT_GT(b, 0) << "an empty piece although every part can have a row";
    }
    int64_t ts = 1, tt = 1, piece_tokens = 0;
    for (int64_t r = 0; r < b; ++r, ++row) {
      ASSERT_LT(row, rows);
      EXPECT_EQ(p.index[static_cast<size_t>(r)], batch.index[static_cast<size_t>(row)]);
      const int32_t sl = batch.source_lengths.i32()[row], tl = batch.target_lengths.i32()[row];
      EXPECT_EQ(p.source_lengths.i32()[r], sl);
      EXPECT_EQ(p.target_lengths.i32()[r], tl);
      expect_row(p.source, r, batch.source, row, sl);
      expect_row(p.target_in, r, batch.target_in, row, tl);
      expect_row(p.target_out, r, batch.target_out, row, tl);
      ts = std::max<int64_t>(ts, sl);
      tt = std::max<int64_t>(tt, tl);
      piece_tokens += tl;
    }
    EXPECT_EQ(p.source.dim(1), ts);
    EXPECT_EQ(p.target_in.dim(1), tt);
    EXPECT_EQ(p.target_tokens, piece_tokens);
    tokens += p.target_tokens;
  }
  EXPECT_EQ(row, rows);
  EXPECT_EQ(tokens, batch.target_tokens);
}

int64_t spread(const std::vector<TokenBatch>& pieces) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (const TokenBatch& p : pieces) {
    lo = std::min(lo, p.target_tokens);
    hi = std::max(hi, p.target_tokens);
  }
  return hi - lo;
}

TEST(TokenSplit, PiecesCoverEveryRowOnceInOrderWithTheirOwnPadding) {
  const std::vector<TokenBatch> batches = batcher_batches(600, 40, 700, 3);
  ASSERT_GT(batches.size(), 10u);
  for (const TokenBatch& batch : batches)
    for (int parts : {2, 3, 4, 8}) {
      SCOPED_TRACE(std::to_string(parts) + " parts of " + std::to_string(batch.index.size()));
      const std::vector<TokenBatch> pieces = split_batch(batch, parts);
      expect_pieces(batch, pieces, parts);
      // A pure function of (batch, parts).
      const std::vector<TokenBatch> again = split_batch(batch, parts);
      for (int p = 0; p < parts; ++p) EXPECT_EQ(again[p].index, pieces[p].index);
    }
}

TEST(TokenSplit, PiecesBalanceTargetTokensWithinOneSentence) {
  // The batcher's batches (sorted by length), from short-sentence batches of many rows to long
  // ones of a few.
  for (int longest : {6, 40, 120}) {
    const std::vector<TokenBatch> batches = batcher_batches(400, longest, 1024, 7 + longest);
    for (const TokenBatch& batch : batches)
      for (int parts : {2, 3, 4, 6, 8, 16}) {
        if (static_cast<int>(batch.index.size()) < parts) continue;
        const std::vector<TokenBatch> pieces = split_batch(batch, parts);
        EXPECT_LE(spread(pieces), longest_target(batch))
            << parts << " parts of " << batch.index.size() << " rows";
      }
  }
  // Equal sentences: equal pieces when the parts divide the rows.
  std::mt19937 rng(1);
  Ids src, tgt;
  for (int i = 0; i < 24; ++i) src.push_back(ids(rng, 5)), tgt.push_back(ids(rng, 9));
  for (int parts : {2, 3, 4, 6, 8, 12, 24}) {
    const std::vector<TokenBatch> pieces = split_batch(make_batch(src, tgt), parts);
    EXPECT_EQ(spread(pieces), 0) << parts;
  }
  // One long sentence among short ones gets a piece of its own.
  src.assign(7, ids(rng, 3));
  tgt.assign(6, ids(rng, 2));
  tgt.push_back(ids(rng, 40));
  const std::vector<TokenBatch> pieces = split_batch(make_batch(src, tgt), 2);
  EXPECT_EQ(pieces[1].index, std::vector<int64_t>{106});
  EXPECT_EQ(pieces[1].source.dim(1), 3);
  EXPECT_EQ(pieces[1].target_in.dim(1), 41);
  EXPECT_EQ(pieces[0].target_in.dim(1), 3);  // re-padded to its own longest
}

// In any row order (not only the batcher's sorted one), also with a few very long rows among
// short ones: pieces within one sentence of each other, and the smallest piece as large as any
// partition's smallest piece can be (brute force over every set of cuts).
TEST(TokenSplit, BalanceHoldsInAnyOrderAndTheSmallestPieceIsLargest) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const bool small = trial % 3 != 0;
    const int n = small ? 2 + static_cast<int>(rng() % 10) : 10 + static_cast<int>(rng() % 200);
    const int parts = 2 + static_cast<int>(rng() % (small ? n - 1 : 40));
    if (parts > n) continue;
    Ids src, tgt;
    std::vector<int64_t> w;
    for (int i = 0; i < n; ++i) {
      const int kind = static_cast<int>(rng() % 4);
      const int len = kind == 0   ? static_cast<int>(rng() % 100)
                      : kind == 1 ? 99
                                  : static_cast<int>(rng() % 4);
      src.push_back(ids(rng, static_cast<int>(rng() % 5)));
      tgt.push_back(ids(rng, len));
      w.push_back(len + 1);
    }
    const TokenBatch batch = make_batch(src, tgt);
    const std::vector<TokenBatch> pieces = split_batch(batch, parts);
    int64_t smallest = std::numeric_limits<int64_t>::max();
    for (const TokenBatch& p : pieces) {
      ASSERT_GT(p.index.size(), 0u);
      smallest = std::min(smallest, p.target_tokens);
    }
    ASSERT_LE(spread(pieces), longest_target(batch)) << n << " rows, " << parts << " parts";
    if (!small) continue;
    // Every choice of parts − 1 cuts among the n − 1 gaps.
    int64_t best = 0;
    std::vector<int> pick(static_cast<size_t>(n - 1), 0);
    std::fill(pick.end() - (parts - 1), pick.end(), 1);
    do {
      int64_t least = std::numeric_limits<int64_t>::max(), piece = 0;
      for (int i = 0; i < n; ++i) {
        piece += w[static_cast<size_t>(i)];
        if (i == n - 1 || pick[static_cast<size_t>(i)]) least = std::min(least, piece), piece = 0;
      }
      best = std::max(best, least);
    } while (std::next_permutation(pick.begin(), pick.end()));
    EXPECT_EQ(smallest, best) << n << " rows, " << parts << " parts, trial " << trial;
  }
}

TEST(TokenSplit, MorePartsThanRowsGivesEmptyPieces) {
  std::mt19937 rng(2);
  Ids src{ids(rng, 4), ids(rng, 7), ids(rng, 2)}, tgt{ids(rng, 5), ids(rng, 3), ids(rng, 8)};
  const TokenBatch batch = make_batch(src, tgt);
  const std::vector<TokenBatch> pieces = split_batch(batch, 5);
  expect_pieces(batch, pieces, 5);
  for (int p = 0; p < 3; ++p) EXPECT_EQ(pieces[p].index, std::vector<int64_t>{100 + p});
  for (int p = 3; p < 5; ++p) {
    const TokenBatch& e = pieces[p];
    EXPECT_EQ(e.source.shape(), (Shape{0, 1}));
    EXPECT_EQ(e.target_in.shape(), (Shape{0, 1}));
    EXPECT_EQ(e.target_out.shape(), (Shape{0, 1}));
    EXPECT_EQ(e.source_lengths.shape(), (Shape{0}));
    EXPECT_EQ(e.target_lengths.shape(), (Shape{0}));
    EXPECT_TRUE(e.index.empty());
    EXPECT_EQ(e.target_tokens, 0);
  }
  EXPECT_EQ(spread(pieces), longest_target(batch));
  // A batch of no rows splits into empty pieces; split again, they stay empty.
  const TokenBatch none = make_batch({}, {});
  const std::vector<TokenBatch> empties = split_batch(none, 3);
  expect_pieces(none, empties, 3);
  expect_pieces(empties[0], split_batch(empties[0], 2), 2);
}

TEST(TokenSplit, OnePartIsTheBatchItself) {
  for (const TokenBatch& batch : batcher_batches(100, 20, 300, 5)) {
    const std::vector<TokenBatch> one = split_batch(batch, 1);
    ASSERT_EQ(one.size(), 1u);
    const TokenBatch& p = one[0];
    const std::vector<std::pair<const Tensor*, const Tensor*>> tensors{
        {&p.source, &batch.source},
        {&p.target_in, &batch.target_in},
        {&p.target_out, &batch.target_out},
        {&p.source_lengths, &batch.source_lengths},
        {&p.target_lengths, &batch.target_lengths}};
    for (const auto& [a, b] : tensors) {
      ASSERT_EQ(a->shape(), b->shape());
      EXPECT_EQ(std::memcmp(a->data(), b->data(), a->nbytes()), 0);
    }
    EXPECT_EQ(p.index, batch.index);
    EXPECT_EQ(p.target_tokens, batch.target_tokens);
  }
}

TEST(TokenSplit, BadPartsAndBatchesAreRefused) {
  std::mt19937 rng(4);
  const TokenBatch batch = make_batch({ids(rng, 3), ids(rng, 4)}, {ids(rng, 2), ids(rng, 6)});
  for (int parts : {0, -1, -8}) {
    try {
      split_batch(batch, parts);
      ADD_FAILURE() << "no error for " << parts << " parts";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(parts)), std::string::npos) << e.what();
    }
  }
  TokenBatch short_index = batch;
  short_index.index.pop_back();
  EXPECT_THROW(split_batch(short_index, 2), Error);
  TokenBatch too_long = make_batch({ids(rng, 3), ids(rng, 4)}, {ids(rng, 2), ids(rng, 6)});
  too_long.target_lengths.i32()[0] = 99;
  EXPECT_THROW(split_batch(too_long, 2), Error);
}

}  // namespace

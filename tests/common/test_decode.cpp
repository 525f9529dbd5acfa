// The core's search (common/decode/search.h) on a model written here: a StepModel whose next-token
// logits are a fixed table indexed by the row's memory value and the previous token. Every
// expected result is worked out from the table by enumeration (greedy by following the arg-max,
// the best hypotheses by scoring every sequence the length limit allows), not taken from the
// search's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/decode/search.h"
#include "common/error.h"

using namespace vitk;
using namespace vitk::decode;

namespace {

constexpr int64_t kV = 6;  // pad, unk, BOS, EOS, and two words
constexpr int32_t kA = 4, kB = 5;
constexpr int kClasses = 3;  // memory values 0, 1, 2

// logits = table[m][previous token]: a Markov chain per memory value m. The row's m is the first
// value of its memory, kept in the state's memory cache so that it follows the searcher's
// reorders; the self-attention cache holds the tokens fed so far, so that position() advances.
class TableModel : public StepModel {
 public:
  std::vector<std::vector<std::vector<float>>> table;  // [kClasses][kV][kV]
  int64_t limit = 4;                                   // max_length()

  int64_t vocab_size() const override { return kV; }
  int64_t max_length() const override { return limit; }

  void start(nn::Context& ctx, const Tensor& memory, const Tensor& memory_lengths, int64_t capacity,
             nn::Decoder::State& state) override {
    EXPECT_FALSE(ctx.training);
    EXPECT_NE(ctx.arena, nullptr);
    EXPECT_LE(capacity, limit);
    const int64_t B = memory.dim(0), Tm = memory.dim(1);
    EXPECT_EQ(memory_lengths.numel(), B);
    state.self.assign(1, nn::KVCache{});
    state.memory.assign(1, nn::KVCache{});
    nn::KVCache& mc = state.memory[0];
    mc.k = Tensor({B, 1, Tm, 1});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tm; ++t) mc.k.f32()[b * Tm + t] = memory.f32()[(b * Tm + t) * 1];
    mc.v = mc.k.clone();
    mc.length = Tm;
    state.source_lengths = memory_lengths;
    state.capacity = capacity;
  }

  Tensor step(nn::Context& ctx, const Tensor& tokens, nn::Decoder::State& state) override {
    const int64_t B = state.batch(), position = state.position();
    if (tokens.numel() != B)
      throw Error("TableModel: " + std::to_string(tokens.numel()) + " tokens for " +
                  std::to_string(B) + " rows");
    if (position >= state.capacity) throw Error("TableModel: step past the capacity");
    nn::KVCache& sc = state.self[0];
    if (sc.length == 0) {  // as the real caches: made on the first step, for the current batch
      sc.k = Tensor({B, 1, state.capacity, 1});
      sc.v = Tensor({B, 1, state.capacity, 1});
    }
    const nn::KVCache& mc = state.memory[0];
    const int64_t Tm = mc.k.dim(2);
    Tensor logits = ctx.alloc({B, kV});
    for (int64_t b = 0; b < B; ++b) {
      const int m = static_cast<int>(mc.k.f32()[b * Tm]);
      const int32_t previous = tokens.i32()[b];
      const auto& row = table.at(static_cast<size_t>(m)).at(static_cast<size_t>(previous));
      std::copy(row.begin(), row.end(), logits.f32() + b * kV);
      sc.k.f32()[b * state.capacity + position] = static_cast<float>(previous);
    }
    ++sc.length;
    return logits;
  }
};

std::vector<float> log_of(std::vector<double> p) {
  std::vector<float> out;
  for (double x : p) out.push_back(static_cast<float>(std::log(x)));
  return out;
}

// m = 0 is a trap for greedy search: after BOS "a" (0.5) beats "b" (0.4), but "a" is followed
// by a flat distribution (EOS 0.32 at best) while "b" ends with EOS at 0.9, so "b EOS" (0.36)
// beats greedy's "a EOS" (0.16). m = 1 and m = 2 are random tables.
TableModel make_model() {
  TableModel model;
  model.table.resize(kClasses);
  auto& trap = model.table[0];
  trap.assign(kV, log_of({1 / 6., 1 / 6., 1 / 6., 1 / 6., 1 / 6., 1 / 6.}));
  trap[Vocabulary::kBos] = log_of({0.02, 0.02, 0.02, 0.04, 0.5, 0.4});
  trap[kA] = log_of({0.1 / 3, 0.1 / 3, 0.1 / 3, 0.32, 0.3, 0.28});
  trap[kB] = log_of({0.01, 0.01, 0.01, 0.9, 0.04, 0.03});
  std::mt19937 gen(5);
  std::normal_distribution<float> logit(0.f, 1.5f);
  for (int m = 1; m < kClasses; ++m) {
    model.table[static_cast<size_t>(m)].assign(kV, std::vector<float>(kV));
    for (auto& row : model.table[static_cast<size_t>(m)])
      for (float& x : row) x = logit(gen);
  }
  return model;
}

// log softmax(table[m][previous])[token], in double.
double log_p(const TableModel& model, int m, int32_t previous, int32_t token) {
  const auto& row = model.table[static_cast<size_t>(m)][static_cast<size_t>(previous)];
  double sum = 0;
  for (float x : row) sum += std::exp(static_cast<double>(x));
  return static_cast<double>(row[static_cast<size_t>(token)]) - std::log(sum);
}

// The hypothesis of `tokens` (finished: followed by EOS) under memory value m, scored with α.
Hypothesis scored(const TableModel& model, int m, std::vector<int32_t> tokens, bool finished,
                  float alpha) {
  Hypothesis h;
  int32_t previous = Vocabulary::kBos;
  for (int32_t t : tokens) {
    h.log_prob += log_p(model, m, previous, t);
    previous = t;
  }
  if (finished) h.log_prob += log_p(model, m, previous, Vocabulary::kEos);
  const int64_t length = static_cast<int64_t>(tokens.size()) + (finished ? 1 : 0);
  h.score = h.log_prob / std::pow((5.0 + static_cast<double>(length)) / 6.0, alpha);
  h.tokens = std::move(tokens);
  h.finished = finished;
  return h;
}

// Every hypothesis the limit allows (at most `limit` tokens, EOS included; unfinished ones have
// exactly `limit` tokens), best score first.
std::vector<Hypothesis> every_hypothesis(const TableModel& model, int m, int64_t limit,
                                         float alpha) {
  std::vector<Hypothesis> all;
  std::vector<int32_t> prefix;
  std::function<void()> grow = [&] {
    const int64_t n = static_cast<int64_t>(prefix.size());
    if (n < limit) all.push_back(scored(model, m, prefix, true, alpha));
    if (n == limit) {
      all.push_back(scored(model, m, prefix, false, alpha));
      return;
    }
    for (int32_t t = 0; t < kV; ++t) {
      if (t == Vocabulary::kEos) continue;
      prefix.push_back(t);
      grow();
      prefix.pop_back();
    }
  };
  grow();
  std::sort(all.begin(), all.end(),
            [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  return all;
}

// Greedy search by hand: the arg-max after each token until EOS or the limit.
Hypothesis greedy_by_hand(const TableModel& model, int m, int64_t limit, float alpha) {
  std::vector<int32_t> tokens;
  int32_t previous = Vocabulary::kBos;
  while (static_cast<int64_t>(tokens.size()) < limit) {
    const auto& row = model.table[static_cast<size_t>(m)][static_cast<size_t>(previous)];
    const int32_t best =
        static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    if (best == Vocabulary::kEos) return scored(model, m, tokens, true, alpha);
    tokens.push_back(best);
    previous = best;
  }
  return scored(model, m, tokens, false, alpha);
}

// Three inputs with memory values 0, 1, 2 and memory lengths 2, 1, 2 (of Tm = 2): with
// max_length_offset 1 their limits are 3, 2 and 3 tokens.
struct Batch {
  Tensor memory{Shape{3, 2, 1}}, lengths{Shape{3}, DType::i32};
  std::vector<int64_t> limits{3, 2, 3};
  Batch() {
    for (int64_t b = 0; b < 3; ++b) {
      memory.f32()[b * 2] = static_cast<float>(b);
      memory.f32()[b * 2 + 1] = 7.f;  // padding or not, the model reads position 0 only
      lengths.i32()[b] = b == 1 ? 1 : 2;
    }
  }
};

SearchOptions options(SearchMethod method, int beam = 2, float alpha = 0.6f) {
  SearchOptions o;
  o.method = method;
  o.beam_size = beam;
  o.length_penalty = alpha;
  o.max_length_offset = 1;
  return o;
}

std::vector<std::vector<Hypothesis>> run(TableModel& model, const SearchOptions& o) {
  const Batch batch;
  Searcher searcher(model, o);
  return searcher.search(batch.memory, batch.lengths);
}

constexpr double kTol = 1e-5;  // the search's float log-softmax against double here

}  // namespace

TEST(SearchStepModel, GreedyFollowsTheArgMaxWithinTheLimit) {
  TableModel model = make_model();
  const Batch batch;
  const auto found = run(model, options(SearchMethod::greedy));
  ASSERT_EQ(found.size(), 3u);
  for (int b = 0; b < 3; ++b) {
    const Hypothesis want = greedy_by_hand(model, b, batch.limits[static_cast<size_t>(b)], 0.6f);
    ASSERT_EQ(found[static_cast<size_t>(b)].size(), 1u);
    const Hypothesis& h = found[static_cast<size_t>(b)][0];
    EXPECT_EQ(h.tokens, want.tokens) << "input " << b;
    EXPECT_EQ(h.finished, want.finished) << "input " << b;
    EXPECT_NEAR(h.log_prob, want.log_prob, kTol) << "input " << b;
    EXPECT_NEAR(h.score, want.score, kTol) << "input " << b;
  }
  // The trap: greedy search ends with "a EOS".
  EXPECT_EQ(found[0][0].tokens, std::vector<int32_t>{kA});
}

TEST(SearchStepModel, BeamFindsTheBestSequenceAndNeverScoresBelowGreedy) {
  TableModel model = make_model();
  const Batch batch;
  for (float alpha : {0.f, 0.6f}) {
    const auto greedy = run(model, options(SearchMethod::greedy, 2, alpha));
    const auto beam = run(model, options(SearchMethod::beam, 2, alpha));
    for (int b = 0; b < 3; ++b) {
      const Hypothesis& h = beam[static_cast<size_t>(b)][0];
      EXPECT_GE(h.score, greedy[static_cast<size_t>(b)][0].score - 1e-12)
          << "input " << b << ", alpha " << alpha;
      const Hypothesis again = scored(model, b, h.tokens, h.finished, alpha);
      EXPECT_NEAR(h.score, again.score, kTol) << "input " << b << ", alpha " << alpha;
    }
    // On the trap, the best of every sequence is "b EOS", which greedy search misses and a beam
    // of two finds.
    const Hypothesis best = every_hypothesis(model, 0, batch.limits[0], alpha)[0];
    ASSERT_EQ(best.tokens, std::vector<int32_t>{kB});
    ASSERT_TRUE(best.finished);
    EXPECT_NE(greedy[0][0].tokens, best.tokens);
    EXPECT_EQ(beam[0][0].tokens, best.tokens) << "alpha " << alpha;
    EXPECT_TRUE(beam[0][0].finished);
    EXPECT_NEAR(beam[0][0].score, best.score, kTol);
    EXPECT_GT(beam[0][0].score, greedy[0][0].score + 0.1);
  }
}

TEST(SearchStepModel, NBestOfABeamWideEnoughIsTheTopOfEverySequence) {
  // With K = 160 no prefix is ever pruned (at most 5² prefixes × 6 tokens = 150 candidates per
  // step), so the n-best list must be the n best of every sequence the limit allows.
  TableModel model = make_model();
  const Batch batch;
  SearchOptions o = options(SearchMethod::beam, 160);
  o.nbest = 6;
  const auto found = run(model, o);
  for (int b = 0; b < 3; ++b) {
    const auto& list = found[static_cast<size_t>(b)];
    const auto all = every_hypothesis(model, b, batch.limits[static_cast<size_t>(b)], 0.6f);
    ASSERT_EQ(list.size(), 6u) << "input " << b;
    std::set<std::pair<std::vector<int32_t>, bool>> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      const Hypothesis& h = list[i];
      if (i > 0) {
        EXPECT_LE(h.score, list[i - 1].score) << "input " << b << ", rank " << i;
      }
      EXPECT_TRUE(seen.insert({h.tokens, h.finished}).second) << "input " << b << ": a duplicate";
      const Hypothesis again = scored(model, b, h.tokens, h.finished, 0.6f);
      EXPECT_NEAR(h.score, again.score, kTol) << "input " << b << ", rank " << i;
      EXPECT_NEAR(h.log_prob, again.log_prob, kTol) << "input " << b << ", rank " << i;
      // The i-th of the list is the i-th best of all, up to the float rounding of near ties.
      EXPECT_NEAR(h.score, all[i].score, kTol) << "input " << b << ", rank " << i;
      EXPECT_LE(static_cast<int64_t>(h.tokens.size()) + (h.finished ? 1 : 0),
                batch.limits[static_cast<size_t>(b)]);
    }
  }
}

TEST(SearchStepModel, SamplingAtTemperatureZeroIsGreedy) {
  TableModel model = make_model();
  const auto greedy = run(model, options(SearchMethod::greedy));
  SearchOptions o = options(SearchMethod::sample);
  o.temperature = 0.f;
  o.seed = 77;
  const auto sampled = run(model, o);
  for (int b = 0; b < 3; ++b) {
    EXPECT_EQ(sampled[static_cast<size_t>(b)][0].tokens, greedy[static_cast<size_t>(b)][0].tokens);
    EXPECT_EQ(sampled[static_cast<size_t>(b)][0].finished,
              greedy[static_cast<size_t>(b)][0].finished);
    EXPECT_EQ(sampled[static_cast<size_t>(b)][0].score, greedy[static_cast<size_t>(b)][0].score);
  }
}

TEST(SearchStepModel, LimitsAndBadMemoryAreRefused) {
  TableModel model = make_model();
  model.limit = 2;  // the model's own limit caps memory length + offset (3 for inputs 0 and 2)
  for (SearchMethod method : {SearchMethod::greedy, SearchMethod::beam}) {
    for (const auto& list : run(model, options(method)))
      EXPECT_LE(list[0].tokens.size() + (list[0].finished ? 1u : 0u), 2u);
  }
  Searcher searcher(model, options(SearchMethod::greedy));
  Batch batch;
  batch.lengths.i32()[2] = 3;  // more than the memory's 2 positions
  EXPECT_THROW(searcher.search(batch.memory, batch.lengths), Error);
  EXPECT_THROW(searcher.search(Tensor({3, 2}), Batch().lengths), Error);  // not [B, Tm, d]
}

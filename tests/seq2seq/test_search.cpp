// Decoding (common/decode/search.h, from source ids with common/seq2seq/search.h) on random tiny
// translation models: the length penalty's values; beam search never below greedy search under
// the same model and length penalty; beam size 1 equals greedy; scores that agree with forced
// decoding; n-best lists; batching that changes nothing; sampling that is reproducible and turns
// into greedy search as the temperature goes to 0; length limits and option errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/decode/search.h"
#include "common/error.h"
#include "common/seq2seq/search.h"
#include "util/op_test_util.h"

using namespace vitk;
using namespace vitk::decode;
using namespace vitk::seq2seq;
using namespace vitk::test;

namespace {

constexpr int64_t kVocab = 12;

// A random model whose next-token distributions are peaked enough for beam and greedy search to
// disagree now and then: the output weights are scaled up after fairseq's initialisation.
struct RandomModel {
  ParamStore store;
  std::unique_ptr<Transformer> model;
  RandomModel(uint64_t seed, bool pre_norm, float logit_scale = 2.f, float eos_boost = 1.f) {
    TransformerConfig c;
    c.vocab_size = kVocab;
    c.d_model = 16;
    c.heads = 2;
    c.d_ff = 32;
    c.layers = 1;
    c.decoder_layers = 2;
    c.pre_norm = pre_norm;
    c.tied_embeddings = false;
    c.max_length = 64;
    model = std::make_unique<Transformer>(store, c);
    store.finalize();
    ops::Rng rng(seed);
    model->init(rng);
    Tensor& w = store.get("output_projection.weight").value;
    for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] *= logit_scale;
    // Random models rarely end a sentence: move the decoder's last bias along EOS's output row,
    // which raises the EOS logit by eos_boost · |w_eos| everywhere.
    Tensor& bias = store.get(pre_norm ? "decoder.norm.bias" : "decoder.layers.1.norm3.bias").value;
    double norm = 0;
    for (int64_t j = 0; j < 16; ++j)
      norm += double(w.f32()[kEosId * 16 + j]) * w.f32()[kEosId * 16 + j];
    for (int64_t j = 0; j < 16; ++j)
      bias.f32()[j] += static_cast<float>(eos_boost * w.f32()[kEosId * 16 + j] / std::sqrt(norm));
  }
};

struct Sources {
  Tensor source, lengths;
};

// B random sources of 1 to 6 tokens (ids 4..kVocab−1) and EOS, padded with 0.
Sources random_sources(std::mt19937& gen, int64_t B) {
  std::uniform_int_distribution<int> len(1, 6), sym(4, kVocab - 1);
  Sources s{Tensor({B, 7}, DType::i32), Tensor({B}, DType::i32)};
  for (int64_t b = 0; b < B; ++b) {
    const int n = len(gen);
    for (int i = 0; i < n; ++i) s.source.i32()[b * 7 + i] = sym(gen);
    s.source.i32()[b * 7 + n] = kEosId;
    s.lengths.i32()[b] = n + 1;
  }
  return s;
}

// Sentence b of s, n times over: a batch for scoring n targets of one source.
Sources repeat_row(const Sources& s, int64_t b, int64_t n) {
  Sources r{Tensor({n, 7}, DType::i32), Tensor({n}, DType::i32)};
  for (int64_t i = 0; i < n; ++i) {
    std::copy(s.source.i32() + b * 7, s.source.i32() + (b + 1) * 7, r.source.i32() + i * 7);
    r.lengths.i32()[i] = s.lengths.i32()[b];
  }
  return r;
}

SearchOptions options(SearchMethod method, int beam = 4) {
  SearchOptions o;
  o.method = method;
  o.beam_size = beam;
  o.max_length_offset = 10;
  return o;
}

std::vector<std::vector<Hypothesis>> run(Transformer& model, const SearchOptions& o,
                                         const Sources& s) {
  Searcher searcher(model, o);
  return search_source(model, searcher, s.source, s.lengths);
}

}  // namespace

TEST(LengthPenalty, GnmtValues) {
  EXPECT_DOUBLE_EQ(length_penalty(1, 0.6f), 1.0);  // ((5 + 1) / 6)^α
  EXPECT_NEAR(length_penalty(7, 0.6f), std::pow(2.0, 0.6), 1e-7);
  EXPECT_NEAR(length_penalty(25, 1.f), 5.0, 1e-12);
  EXPECT_DOUBLE_EQ(length_penalty(40, 0.f), 1.0);
}

// The property beam search must have for a translation tool: its best hypothesis scores at least
// as well as greedy search's, scored by forced decoding under the same model and length penalty.
TEST(BeamSearch, NeverScoresBelowGreedy) {
  const OneThread one_thread;
  int differ = 0, compared = 0, finished = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    for (float alpha : {0.f, 0.6f, 1.f}) {
      RandomModel m(seed, seed % 2 == 0);
      std::mt19937 gen(static_cast<unsigned>(seed));
      const Sources s = random_sources(gen, 6);
      SearchOptions greedy_o = options(SearchMethod::greedy);
      greedy_o.length_penalty = alpha;
      SearchOptions beam_o = options(SearchMethod::beam, 3);
      beam_o.length_penalty = alpha;
      const auto greedy = run(*m.model, greedy_o, s);
      const auto beam = run(*m.model, beam_o, s);
      for (int64_t b = 0; b < 6; ++b) {
        const Hypothesis& g = greedy[b][0];
        const Hypothesis& h = beam[b][0];
        // Each scored alone by forced decoding; a hypothesis stopped by the length limit has no
        // EOS to score.
        const Sources one = repeat_row(s, b, 1);
        const auto forced_g =
            score_targets(*m.model, one.source, one.lengths, {g.tokens}, alpha, g.finished)[0];
        const auto forced_h =
            score_targets(*m.model, one.source, one.lengths, {h.tokens}, alpha, h.finished)[0];
        EXPECT_GE(forced_h.second, forced_g.second - 1e-5)
            << "seed " << seed << ", alpha " << alpha << ", sentence " << b;
        // The scores the search reports are those of forced decoding.
        EXPECT_NEAR(g.score, forced_g.second, 1e-4);
        EXPECT_NEAR(h.score, forced_h.second, 1e-4);
        EXPECT_NEAR(h.log_prob, forced_h.first, 1e-4);
        finished += g.finished && h.finished;
        ++compared;
        differ += g.tokens != h.tokens;
      }
    }
  }
  EXPECT_EQ(compared, 6 * 3 * 6);
  EXPECT_GT(finished, 10);
  EXPECT_GT(differ, 0) << "beam and greedy search never disagreed: the test proves nothing";
}

TEST(BeamSearch, BeamSizeOneIsGreedy) {
  for (uint64_t seed : {3, 4}) {
    RandomModel m(seed, seed == 4);
    std::mt19937 gen(static_cast<unsigned>(seed));
    const Sources s = random_sources(gen, 8);
    const auto greedy = run(*m.model, options(SearchMethod::greedy), s);
    const auto beam = run(*m.model, options(SearchMethod::beam, 1), s);
    for (size_t b = 0; b < 8; ++b) {
      ASSERT_EQ(beam[b].size(), 1u);
      EXPECT_EQ(beam[b][0].tokens, greedy[b][0].tokens) << "sentence " << b;
      EXPECT_EQ(beam[b][0].finished, greedy[b][0].finished);
      EXPECT_NEAR(beam[b][0].score, greedy[b][0].score, 1e-6);
    }
  }
}

TEST(BeamSearch, NBestListsAreDistinctSortedAndScoredByForcedDecoding) {
  RandomModel m(5, false, 1.f);
  std::mt19937 gen(5);
  const Sources s = random_sources(gen, 4);
  SearchOptions o = options(SearchMethod::beam, 5);
  o.nbest = 5;
  const auto result = run(*m.model, o, s);
  for (int64_t b = 0; b < 4; ++b) {
    const auto& list = result[b];
    ASSERT_EQ(list.size(), 5u) << "sentence " << b;
    std::set<std::vector<int32_t>> seen;
    std::vector<std::vector<int32_t>> targets;
    for (size_t i = 0; i < list.size(); ++i) {
      EXPECT_TRUE(seen.insert(list[i].tokens).second) << "a repeated hypothesis";
      if (i) {
        EXPECT_GE(list[i - 1].score, list[i].score);
      }
      targets.push_back(list[i].tokens);
    }
    const Sources five = repeat_row(s, b, 5);
    const auto forced =
        score_targets(*m.model, five.source, five.lengths, targets, o.length_penalty);
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].finished) {
        EXPECT_NEAR(list[i].score, forced[i].second, 1e-4);
      }
  }
}

// A batch decodes each sentence as it would alone: rows of finished sentences are dropped and the
// caches reordered without mixing sentences.
TEST(Search, BatchingChangesNothing) {
  RandomModel m(8, true);
  std::mt19937 gen(8);
  const Sources s = random_sources(gen, 7);
  for (const SearchOptions& o : {options(SearchMethod::greedy), options(SearchMethod::beam, 3),
                                 options(SearchMethod::beam, 2)}) {
    const auto batched = run(*m.model, o, s);
    for (int64_t b = 0; b < 7; ++b) {
      const auto alone = run(*m.model, o, repeat_row(s, b, 1));
      ASSERT_EQ(alone[0].size(), batched[b].size());
      for (size_t i = 0; i < alone[0].size(); ++i) {
        EXPECT_EQ(alone[0][i].tokens, batched[b][i].tokens)
            << search_method_name(o.method) << " " << o.beam_size << ", sentence " << b;
        EXPECT_NEAR(alone[0][i].score, batched[b][i].score, 1e-4);
      }
    }
  }
}

TEST(Sampling, ReproducibleWithASeedAndGreedyAsTheTemperatureGoesToZero) {
  RandomModel m(9, false, 1.f);
  std::mt19937 gen(9);
  const Sources s = random_sources(gen, 8);
  SearchOptions o = options(SearchMethod::sample);
  o.seed = 123;
  const auto a = run(*m.model, o, s);
  const auto b = run(*m.model, o, s);
  o.seed = 124;
  const auto c = run(*m.model, o, s);
  const auto greedy = run(*m.model, options(SearchMethod::greedy), s);
  int differ_seed = 0, differ_greedy = 0;
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(a[i][0].tokens, b[i][0].tokens);
    EXPECT_EQ(a[i][0].score, b[i][0].score);
    differ_seed += a[i][0].tokens != c[i][0].tokens;
    differ_greedy += a[i][0].tokens != greedy[i][0].tokens;
  }
  EXPECT_GT(differ_seed, 0);
  EXPECT_GT(differ_greedy, 0);

  // One Searcher draws new samples for the next batch (its stream goes on)...
  SearchOptions again = options(SearchMethod::sample);
  again.seed = 123;
  Searcher searcher(*m.model, again);
  const auto first = search_source(*m.model, searcher, s.source, s.lengths);
  const auto second = search_source(*m.model, searcher, s.source, s.lengths);
  int differ_next = 0;
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(first[i][0].tokens, a[i][0].tokens);
    differ_next += first[i][0].tokens != second[i][0].tokens;
  }
  EXPECT_GT(differ_next, 0);

  // ... and with the temperature at 0, near 0, or top-k = 1, sampling is greedy search; the score
  // is always under the model itself (not the tempered distribution).
  for (auto [temperature, top_k] : {std::pair<float, int>{0.f, 0}, {1e-4f, 0}, {1.f, 1}}) {
    SearchOptions cold = options(SearchMethod::sample);
    cold.temperature = temperature;
    cold.top_k = top_k;
    const auto r = run(*m.model, cold, s);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(r[i][0].tokens, greedy[i][0].tokens) << "T " << temperature << ", k " << top_k;
      EXPECT_NEAR(r[i][0].score, greedy[i][0].score, 1e-9);
    }
  }
}

TEST(Sampling, TopKDrawsOnlyAmongTheKMostLikely) {
  RandomModel m(10, true, 1.f);
  std::mt19937 gen(10);
  const Sources s = random_sources(gen, 16);
  SearchOptions o = options(SearchMethod::sample);
  o.top_k = 2;
  o.temperature = 3.f;  // flat, so that the restriction matters
  o.max_length = 1;     // one token per sentence: the first step's distribution
  const auto r = run(*m.model, o, s);
  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  nn::Decoder::State state;
  m.model->start(ctx, m.model->encode(ctx, s.source, s.lengths), s.lengths, 1, state);
  Tensor bos({16}, DType::i32);
  for (int i = 0; i < 16; ++i) bos.i32()[i] = kBosId;
  const Tensor logits = m.model->step(ctx, bos, state);  // [16, V]
  for (int64_t b = 0; b < 16; ++b) {
    const float* row = logits.f32() + b * kVocab;
    const int32_t token = r[b][0].finished ? kEosId : r[b][0].tokens.at(0);
    int above = 0;
    for (int64_t v = 0; v < kVocab; ++v) above += row[v] > row[token];
    EXPECT_LT(above, 2) << "sentence " << b << " drew token " << token;
  }
}

TEST(Search, LengthLimits) {
  // Random models rarely say EOS within a few tokens: most outputs stop at the limit, unfinished.
  RandomModel m(11, false);
  std::mt19937 gen(11);
  const Sources s = random_sources(gen, 3);
  int unfinished = 0;
  for (SearchMethod method : {SearchMethod::greedy, SearchMethod::beam, SearchMethod::sample}) {
    SearchOptions o = options(method, 2);
    o.max_length_offset = 0;  // at most the source length
    const auto r = run(*m.model, o, s);
    for (int64_t b = 0; b < 3; ++b) {
      const Hypothesis& h = r[b][0];
      const int64_t len = static_cast<int64_t>(h.tokens.size()) + (h.finished ? 1 : 0);
      EXPECT_LE(len, s.lengths.i32()[b]) << search_method_name(method);
      if (!h.finished) {
        EXPECT_EQ(len, s.lengths.i32()[b]);
      }
      unfinished += !h.finished;
    }
    o.max_length = 2;
    for (const auto& list : run(*m.model, o, s))
      EXPECT_LE(list[0].tokens.size() + (list[0].finished ? 1u : 0u), 2u);
  }
  EXPECT_GT(unfinished, 0);
}

TEST(Search, BadOptionsAreNamed) {
  RandomModel m(12, false);
  auto message = [&](SearchOptions o) {
    try {
      Searcher searcher(*m.model, o);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  SearchOptions o = options(SearchMethod::beam, 2);
  o.nbest = 3;
  EXPECT_NE(message(o).find("n-best 3"), std::string::npos);
  o = options(SearchMethod::greedy);
  o.nbest = 2;
  EXPECT_NE(message(o).find("n-best"), std::string::npos);
  o = options(SearchMethod::beam, 0);
  EXPECT_NE(message(o).find("beam size"), std::string::npos);
  o = options(SearchMethod::sample);
  o.temperature = -1;
  EXPECT_NE(message(o).find("temperature"), std::string::npos);
  o = options(SearchMethod::greedy);
  o.eos = kVocab;
  EXPECT_NE(message(o).find("EOS"), std::string::npos);
  EXPECT_EQ(parse_search_method("beam"), SearchMethod::beam);
  EXPECT_THROW(parse_search_method("viterbi"), UsageError);
}

// The translation model (common/seq2seq/model.h): configuration text, parameter names, the
// forward against the composition it stands for, the backward against central finite differences
// (tied and untied embeddings, pre- and post-norm, with dropout), incremental decoding against
// the full forward (also after the caches were reordered as beam search does), and the copy and
// reverse tasks learned to 100% exact match by a tiny model trained here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/decode/search.h"
#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/nn/model_info.h"
#include "common/optim/optim.h"
#include "common/seq2seq/model.h"
#include "common/seq2seq/search.h"
#include "util/fixture_io.h"
#include "util/op_test_util.h"
#include "util/parity.h"
#include "util/test_util.h"

using namespace vitk;
using namespace vitk::seq2seq;
using namespace vitk::test;

namespace {

TransformerConfig tiny_config(bool pre_norm, bool tied) {
  TransformerConfig c;
  c.vocab_size = 9;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 12;
  c.layers = 2;
  c.decoder_layers = 2;
  c.dropout = 0.f;
  c.activation = ops::Activation::gelu;  // smooth, for the finite differences
  c.pre_norm = pre_norm;
  c.tied_embeddings = tied;
  c.max_length = 16;
  return c;
}

Tensor ids2d(int64_t rows, int64_t cols, const std::vector<int32_t>& v) {
  Tensor t({rows, cols}, DType::i32);
  std::copy(v.begin(), v.end(), t.i32());
  return t;
}

// A batch of two sentences with unequal lengths: source lengths 5 and 3, target lengths 4 and 2;
// padding is id 0.
struct Batch {
  Tensor source = ids2d(2, 5, {4, 5, 6, 7, 3, 8, 4, 3, 0, 0});
  Tensor source_lengths = ids_tensor({5, 3});
  Tensor target_in = ids2d(2, 4, {2, 6, 5, 4, 2, 7, 0, 0});
  Tensor target_out = ids2d(2, 4, {6, 5, 4, 3, 7, 3, 0, 0});
  Tensor target_lengths = ids_tensor({4, 2});
};

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

// ---- Configuration ----

TEST(Seq2SeqConfig, TextRoundTripAndErrors) {
  TransformerConfig c = tiny_config(true, false);
  c.dropout = 0.1f;
  c.attention_dropout = 0.05f;
  c.activation = ops::Activation::relu;
  const auto map = to_config_map(c);
  EXPECT_EQ(map.at("type"), "transformer");
  EXPECT_EQ(map.at("layers"), "2");
  EXPECT_EQ(map.at("tied_embeddings"), "false");
  const TransformerConfig back = from_config_map(map, "ckpt.h5");
  EXPECT_EQ(to_config_map(back), map);
  EXPECT_EQ(back.dropout, 0.1f);

  auto error_of = [](std::map<std::string, std::string> m) {
    try {
      from_config_map(m, "ckpt.h5");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto bad = map;
  bad["colour"] = "red";
  EXPECT_NE(error_of(bad).find("unknown model setting 'colour'"), std::string::npos);
  bad = map;
  bad["heads"] = "three";
  EXPECT_NE(error_of(bad).find("'heads'"), std::string::npos);
  bad = map;
  bad["heads"] = "3";  // does not divide d_model 8
  EXPECT_NE(error_of(bad).find("ckpt.h5"), std::string::npos);
  bad = map;
  bad["type"] = "vit";
  EXPECT_NE(error_of(bad).find("'vit'"), std::string::npos);
  bad = map;
  bad["vocab_size"] = "4";
  EXPECT_NE(error_of(bad).find("vocab_size"), std::string::npos);
  // The preset keys `vitk info` reads are the same.
  EXPECT_EQ(from_config_map({{"layers", "3"}, {"decoder_layers", "1"}}, "x").layers, 3);
}

// ---- Parameters ----

TEST(Seq2SeqModel, ParameterNamesFollowFairseq) {
  {
    ParamStore store;
    Transformer model(store, tiny_config(false, true));
    const auto names = names_of(store);
    EXPECT_EQ(names.front(), "embed_tokens.weight");
    EXPECT_TRUE(has(names, "encoder.layers.1.attn.qkv.weight"));
    EXPECT_TRUE(has(names, "decoder.layers.0.cross_attn.kv.weight"));
    EXPECT_FALSE(has(names, "output_projection.weight"));  // tied: one matrix
    EXPECT_FALSE(has(names, "encoder.norm.weight"));       // post-norm: no final norms
    EXPECT_EQ(store.get("embed_tokens.weight").shape, (Shape{9, 8}));
  }
  {
    ParamStore store;
    Transformer model(store, tiny_config(true, false));
    const auto names = names_of(store);
    for (const char* n : {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                          "output_projection.weight", "encoder.norm.weight", "decoder.norm.bias"})
      EXPECT_TRUE(has(names, n)) << n;
    EXPECT_FALSE(has(names, "embed_tokens.weight"));
  }
  TransformerConfig bad = tiny_config(true, true);
  bad.d_model = 7;
  ParamStore store;
  EXPECT_THROW(Transformer(store, bad), UsageError);
}

// `vitk info` counts parameters from a preset's [model] section; the model built from the same
// settings has exactly that many (transformer-small's shape, both arrangements).
TEST(Seq2SeqModel, ParameterCountMatchesVitkInfo) {
  for (bool pre_norm : {false, true}) {
    TransformerConfig c;
    c.vocab_size = 8000;
    c.d_model = 256;
    c.heads = 4;
    c.d_ff = 1024;
    c.layers = c.decoder_layers = 3;
    c.pre_norm = pre_norm;
    c.tied_embeddings = !pre_norm;
    ParamStore store;
    Transformer model(store, c);
    EXPECT_EQ(store.numel(), seq2seq::model_size(c, 128).total_params) << "pre_norm " << pre_norm;
    if (!pre_norm) {
      EXPECT_EQ(store.numel(), 7577600);  // configs/transformer-small.ini
    }
  }
}

TEST(Seq2SeqModel, InitFollowsFairseq) {
  ParamStore store;
  TransformerConfig c = tiny_config(true, false);
  c.vocab_size = 400;
  c.d_model = 64;
  c.heads = 4;
  c.d_ff = 128;
  Transformer model(store, c);
  store.finalize();
  ops::Rng rng(3);
  model.init(rng);
  // Embeddings N(0, 1/d) with a zero pad row: √d · embedding has unit variance.
  const Tensor& e = store.get("encoder.embed_tokens.weight").value;
  double sum2 = 0;
  for (int64_t i = 64; i < e.numel(); ++i) sum2 += double(e.f32()[i]) * e.f32()[i];
  EXPECT_NEAR(sum2 / double(e.numel() - 64) * 64, 1.0, 0.05);
  for (int64_t j = 0; j < 64; ++j) EXPECT_EQ(e.f32()[j], 0.f);
  // Xavier bounds: fc1 [128, 64] ±√(6/192); qkv as three [64, 64] blocks with gain 1/√2.
  auto max_abs = [](const Tensor& t) {
    float m = 0;
    for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.f32()[i]));
    return m;
  };
  const float fc1 = max_abs(store.get("encoder.layers.0.mlp.fc1.weight").value);
  EXPECT_LE(fc1, std::sqrt(6.f / 192.f));
  EXPECT_GT(fc1, 0.95f * std::sqrt(6.f / 192.f));
  const float qkv = max_abs(store.get("decoder.layers.1.self_attn.qkv.weight").value);
  EXPECT_LE(qkv, std::sqrt(3.f / 128.f));
  EXPECT_GT(qkv, 0.95f * std::sqrt(3.f / 128.f));
  EXPECT_EQ(max_abs(store.get("encoder.layers.0.mlp.fc1.bias").value), 0.f);
  EXPECT_EQ(store.get("decoder.norm.weight").value.f32()[5], 1.f);
}

// A checkpoint holds the settings as attributes: the model rebuilt from them loads the weights and
// computes the same logits (the pattern mt-train and translate follow).
TEST(Seq2SeqModel, CheckpointRoundTrip) {
  const TransformerConfig c = tiny_config(true, false);
  ParamStore store;
  Transformer model(store, c);
  store.finalize();
  ops::Rng rng(41);
  model.init(rng);
  const std::string path = ::testing::TempDir() + "seq2seq_roundtrip.h5";
  io::CheckpointMeta meta;
  meta.config = to_config_map(c);
  io::save_checkpoint(path, store, meta);

  const io::CheckpointMeta read = io::read_checkpoint_meta(path);
  const TransformerConfig back = from_config_map(read.config, path);
  ParamStore store2;
  Transformer model2(store2, back);
  store2.finalize();
  io::load_checkpoint(path, store2);
  Batch b;
  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  const Tensor a = model.forward(ctx, b.source, b.source_lengths, b.target_in, b.target_lengths);
  const Tensor z = model2.forward(ctx, b.source, b.source_lengths, b.target_in, b.target_lengths);
  EXPECT_TRUE(bitwise_equal(a, z));
  std::remove(path.c_str());
}

// ---- Forward ----

// The logits are the composition of the documented pieces: √d-scaled embeddings plus the
// sinusoids, the encoder with source padding, the decoder with a causal mask, and the output
// projection.
TEST(Seq2SeqModel, ForwardIsTheDocumentedComposition) {
  for (bool tied : {true, false}) {
    ParamStore store;
    const TransformerConfig c = tiny_config(false, tied);
    Transformer model(store, c);
    store.finalize();
    ops::Rng rng(5);
    model.init(rng);
    Batch b;
    Arena arena;
    nn::Context ctx{false, &arena, nullptr};
    const Tensor logits =
        model.forward(ctx, b.source, b.source_lengths, b.target_in, b.target_lengths).clone();
    ASSERT_EQ(logits.shape(), (Shape{2, 4, 9}));

    const Tensor pe = nn::sinusoidal_positions(16, 8);
    auto embed = [&](const Tensor& ids, const Tensor& table) {
      const int64_t B = ids.dim(0), T = ids.dim(1);
      Tensor x({B, T, 8});
      for (int64_t i = 0; i < B * T; ++i)
        for (int64_t j = 0; j < 8; ++j)
          x.f32()[i * 8 + j] =
              std::sqrt(8.f) * table.f32()[ids.i32()[i] * 8 + j] + pe.f32()[(i % T) * 8 + j];
      return x;
    };
    const Tensor& src_table =
        store.get(tied ? "embed_tokens.weight" : "encoder.embed_tokens.weight").value;
    const Tensor& tgt_table =
        store.get(tied ? "embed_tokens.weight" : "decoder.embed_tokens.weight").value;
    const Tensor& out_w =
        store.get(tied ? "embed_tokens.weight" : "output_projection.weight").value;
    Tensor memory =
        model.encoder().forward(ctx, embed(b.source, src_table), {b.source_lengths, false});
    Tensor h = model.decoder().forward(ctx, embed(b.target_in, tgt_table), memory, {Tensor(), true},
                                       {b.source_lengths, false});
    std::vector<double> want;
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t v = 0; v < 9; ++v) {
        double s = 0;
        for (int64_t j = 0; j < 8; ++j) s += double(h.f32()[r * 8 + j]) * out_w.f32()[v * 8 + j];
        want.push_back(s);
      }
    // Rows past a target length are padding: compare the real positions only.
    Tensor got = logits.reshaped({8, 9});
    for (int64_t r : {0, 1, 2, 3, 4, 5}) {
      std::vector<double> w(want.begin() + r * 9, want.begin() + (r + 1) * 9);
      EXPECT_TRUE(all_close(got.rows(r, r + 1), w, 1e-5, 1e-5)) << "tied " << tied << " row " << r;
    }
  }
}

TEST(Seq2SeqModel, BadInputsAreNamed) {
  ParamStore store;
  Transformer model(store, tiny_config(false, true));
  store.finalize();
  ops::Rng rng(5);
  model.init(rng);
  Batch b;
  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  auto message = [&](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              model.forward(ctx, b.source, ids_tensor({6, 3}), b.target_in, b.target_lengths);
            }).find("source_lengths[0] = 6"),
            std::string::npos);
  EXPECT_NE(message([&] {
              model.forward(ctx, b.source, b.source_lengths, b.target_in, ids_tensor({1}));
            }).find("target_lengths"),
            std::string::npos);
  Tensor long_source({1, 17}, DType::i32);
  EXPECT_NE(message([&] { model.encode(ctx, long_source, ids_tensor({17})); }).find("max_length"),
            std::string::npos);
  Tensor bad_id = b.source.clone();
  bad_id.i32()[3] = 9;
  EXPECT_NE(message([&] { model.encode(ctx, bad_id, b.source_lengths); }).find("id 9"),
            std::string::npos);
  EXPECT_NE(message([&] {
              model.backward(ctx, Tensor({2, 4, 9}));
            }).find("training forward"),
            std::string::npos);
  nn::Decoder::State state;
  EXPECT_NE(message([&] { model.step(ctx, ids_tensor({2}), state); }).find("before start"),
            std::string::npos);
}

// ---- Backward ----

struct GradCase {
  bool pre_norm, tied;
  float dropout;
};

void PrintTo(const GradCase& g, std::ostream* os) {
  *os << (g.pre_norm ? "pre-norm" : "post-norm") << (g.tied ? ", tied" : ", untied") << ", dropout "
      << g.dropout;
}

class Seq2SeqGradientTest : public ::testing::TestWithParam<GradCase> {};

// L = label-smoothed cross-entropy over the non-pad target tokens. Every parameter, including the
// embedding matrix used three times when tied, must match central differences of L.
TEST_P(Seq2SeqGradientTest, BackwardMatchesFiniteDifferences) {
  const OneThread one_thread;
  const GradCase g = GetParam();
  TransformerConfig c = tiny_config(g.pre_norm, g.tied);
  c.dropout = g.dropout;
  c.attention_dropout = g.dropout;
  ParamStore store;
  Transformer model(store, c);
  store.finalize();
  ops::Rng init_rng(11);
  model.init(init_rng);
  // Norm gains and biases away from 1 and 0, so that their gradients are not degenerate.
  std::mt19937 gen(12);
  std::uniform_real_distribution<float> jitter(-0.3f, 0.3f);
  for (auto& p : store.params())
    if (p.shape.size() == 1)
      for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] += jitter(gen);
  Batch b;
  constexpr float kSmoothing = 0.1f;
  constexpr uint64_t kDropoutSeed = 99;

  Arena arena;
  ops::Rng rng(kDropoutSeed);
  nn::Context ctx{true, &arena, &rng};
  store.zero_grad();
  const Tensor logits =
      model.forward(ctx, b.source, b.source_lengths, b.target_in, b.target_lengths);
  Tensor dlogits;
  const auto stats = sequence_loss(ctx, logits, b.target_out, kSmoothing, &dlogits);
  EXPECT_EQ(stats.count, 6);  // 4 + 2 target tokens
  model.backward(ctx, dlogits);

  Arena fd_arena;
  ops::Rng fd_rng;
  auto loss = [&]() {
    fd_arena.reset();
    fd_rng.set_state(kDropoutSeed, 0);  // the same dropout masks at every evaluation
    nn::Context fctx{true, &fd_arena, &fd_rng};
    const Tensor l = model.forward(fctx, b.source, b.source_lengths, b.target_in, b.target_lengths);
    return sequence_loss(fctx, l, b.target_out, kSmoothing).loss;
  };
  FdOptions opt;
  opt.atol = 1e-3;
  opt.rtol = 2e-2;
  for (auto& p : store.params()) {
    const Tensor analytic = p.grad.clone();
    EXPECT_GT(ops::l2_norm(analytic), 0.0) << p.name << " gets no gradient";
    EXPECT_GRAD_OK(check_gradient(p.name, p.value, analytic, loss, opt));
  }
}

INSTANTIATE_TEST_SUITE_P(Seq2Seq, Seq2SeqGradientTest,
                         ::testing::Values(GradCase{false, true, 0.f}, GradCase{true, true, 0.f},
                                           GradCase{false, false, 0.f},
                                           GradCase{true, false, 0.2f}),
                         [](const auto& p) {
                           return std::string(p.param.pre_norm ? "PreNorm" : "PostNorm") +
                                  (p.param.tied ? "Tied" : "Untied") +
                                  (p.param.dropout > 0 ? "Dropout" : "");
                         });

// The tied matrix gets the sum of what its three uses would get apart: compare with an untied
// model holding three copies of it.
TEST(Seq2SeqModel, TiedGradientIsTheSumOfItsThreeUses) {
  ParamStore tied_store, untied_store;
  Transformer tied(tied_store, tiny_config(true, true));
  Transformer untied(untied_store, tiny_config(true, false));
  tied_store.finalize();
  untied_store.finalize();
  ops::Rng rng(21);
  tied.init(rng);
  for (auto& p : untied_store.params()) {
    const bool table =
        p.name.find("embed_tokens") != std::string::npos || p.name == "output_projection.weight";
    p.value.copy_from(tied_store.get(table ? "embed_tokens.weight" : p.name).value);
  }
  Batch b;
  auto run = [&](Transformer& model, ParamStore& store) {
    Arena arena;
    nn::Context ctx{true, &arena, nullptr};
    store.zero_grad();
    const Tensor logits =
        model.forward(ctx, b.source, b.source_lengths, b.target_in, b.target_lengths);
    Tensor dlogits;
    sequence_loss(ctx, logits, b.target_out, 0.f, &dlogits);
    model.backward(ctx, dlogits);
  };
  run(tied, tied_store);
  run(untied, untied_store);
  std::vector<double> sum(static_cast<size_t>(9 * 8), 0.0);
  for (const char* n :
       {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "output_projection.weight"}) {
    const Tensor& g = untied_store.get(n).grad;
    EXPECT_GT(ops::l2_norm(g), 0.0) << n;
    for (int64_t i = 0; i < g.numel(); ++i) sum[static_cast<size_t>(i)] += g.f32()[i];
  }
  EXPECT_TRUE(all_close(tied_store.get("embed_tokens.weight").grad, sum, 1e-6, 1e-5));
}

// ---- Incremental decoding ----

class Seq2SeqDecodingTest : public ::testing::TestWithParam<bool> {};

// Logits of model.step() at every position equal those of the full forward over the same prefix,
// also after the decoding state was expanded into beams and permuted within them.
TEST_P(Seq2SeqDecodingTest, StepsEqualTheFullForwardAlsoAfterReordering) {
  TransformerConfig c = tiny_config(GetParam(), GetParam());
  c.dropout = 0.3f;  // must be off in inference
  ParamStore store;
  Transformer model(store, c);
  store.finalize();
  ops::Rng init(31);
  model.init(init);
  Batch b;
  std::mt19937 gen(32);
  std::uniform_int_distribution<int32_t> token(3, 8);
  constexpr int64_t kSteps = 6;

  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  nn::Decoder::State state;
  model.start(ctx, model.encode(ctx, b.source, b.source_lengths), b.source_lengths, kSteps, state);
  struct Row {
    int64_t sentence;
    std::vector<int32_t> inputs;
    std::vector<std::vector<float>> logits;
  };
  std::vector<Row> rows{{0, {}, {}}, {1, {}, {}}};
  auto run_steps = [&](int n) {
    for (int s = 0; s < n; ++s) {
      arena.reset();  // the caches must not live in the arena
      const int64_t B = static_cast<int64_t>(rows.size());
      Tensor tokens({B}, DType::i32);
      for (int64_t i = 0; i < B; ++i)
        tokens.i32()[i] = rows[i].inputs.empty() ? kBosId : token(gen);
      Tensor logits = model.step(ctx, tokens, state);  // [B, V]
      ASSERT_EQ(logits.shape(), (Shape{B, 9}));
      for (int64_t i = 0; i < B; ++i) {
        rows[i].inputs.push_back(tokens.i32()[i]);
        rows[i].logits.emplace_back(logits.f32() + i * 9, logits.f32() + (i + 1) * 9);
      }
    }
  };
  auto gather = [&](const std::vector<int64_t>& order, bool memory) {
    state.reorder(order, memory);
    std::vector<Row> next;
    for (int64_t r : order) next.push_back(rows[r]);
    rows = next;
  };
  run_steps(2);
  gather({0, 0, 0, 1, 1, 1}, true);
  run_steps(2);
  gather({2, 2, 0, 4, 3, 3}, false);
  run_steps(1);
  gather({2, 0, 4}, true);  // one beam per sentence left, and a sentence dropped
  run_steps(1);

  // The reference: each row's inputs through the full forward with its sentence's source.
  const int64_t B = static_cast<int64_t>(rows.size());
  Tensor source({B, 5}, DType::i32), lengths({B}, DType::i32);
  Tensor target({B, kSteps}, DType::i32), target_lengths({B}, DType::i32);
  for (int64_t i = 0; i < B; ++i) {
    const int64_t s = rows[i].sentence;
    std::copy(b.source.i32() + s * 5, b.source.i32() + (s + 1) * 5, source.i32() + i * 5);
    lengths.i32()[i] = b.source_lengths.i32()[s];
    std::copy(rows[i].inputs.begin(), rows[i].inputs.end(), target.i32() + i * kSteps);
    target_lengths.i32()[i] = kSteps;
  }
  arena.reset();
  const Tensor full = model.forward(ctx, source, lengths, target, target_lengths);  // [B, T, V]
  for (int64_t i = 0; i < B; ++i)
    for (int64_t t = 0; t < kSteps; ++t) {
      std::vector<double> want(full.f32() + (i * kSteps + t) * 9,
                               full.f32() + (i * kSteps + t + 1) * 9);
      EXPECT_TRUE(all_close(from_vector({9}, rows[i].logits[t]), want, 1e-5, 1e-5))
          << "row " << i << ", position " << t;
    }
  EXPECT_THROW(model.step(ctx, ids_tensor({4, 4, 4}), state), Error);  // capacity reached
}

INSTANTIATE_TEST_SUITE_P(Seq2Seq, Seq2SeqDecodingTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "PreNormTied" : "PostNormUntied"; });

// ---- Parity with PyTorch ----

namespace {

// The translation model stored in a parity fixture (tests/parity/make_seq2seq_fixture.py).
TransformerConfig seq2seq_config_of(const FixtureFile& f) {
  std::map<std::string, std::string> settings;
  for (const char* key :
       {"vocab_size", "d_model", "heads", "d_ff", "layers", "decoder_layers", "activation",
        "pre_norm", "tied_embeddings", "max_length", "dropout", "attention_dropout"})
    settings[key] = f.attr_string(key);
  return from_config_map(settings, f.path());
}

}  // namespace

class Seq2SeqParity : public ::testing::TestWithParam<std::tuple<std::string, ops::Precision>> {};

// tests/parity/make_seq2seq_fixture.py: PyTorch's nn.TransformerEncoder/Decoder with √d-scaled
// embeddings, sinusoids and a (tied) output layer, label-smoothed cross-entropy over the non-pad
// tokens. In f32, logits, loss and every parameter's gradient must match the float64 reference;
// with bf16 products the logits must be within bf16's bound (util/parity.h) and further from
// the reference than f32's tolerance (skipped on CPUs without AVX512_BF16).
TEST_P(Seq2SeqParity, MatchesPyTorch) {
  const auto& [name, precision] = GetParam();
  SKIP_UNLESS_SUPPORTED(precision);
  const OneThread one_thread;
  const test::FixtureFile f(std::string(VITK_SOURCE_DIR) + "/tests/fixtures/seq2seq/" + name +
                            ".h5");
  const TransformerConfig c = seq2seq_config_of(f);
  ParamStore store;
  Transformer model(store, c);
  store.finalize();
  ASSERT_NO_FATAL_FAILURE(test::load_fixture_params(f, store));
  const Tensor source = f.read_i32("input/source"),
               source_lengths = f.read_i32("input/source_lengths");
  const Tensor target_in = f.read_i32("input/target_in"),
               target_out = f.read_i32("input/target_out");
  const Tensor target_lengths = f.read_i32("input/target_lengths");

  Arena arena;
  nn::Context ctx{true, &arena, nullptr};
  ctx.precision = precision;
  store.zero_grad();
  const Tensor logits = model.forward(ctx, source, source_lengths, target_in, target_lengths);
  const Tensor want_logits = f.read_f32("output/logits");
  if (precision != ops::Precision::f32) {
    const int products =
        6 * static_cast<int>(c.layers) + 11 * static_cast<int>(c.decoder_layers) + 1;
    const test::OutputDiff d = test::output_diff(logits, want_logits);
    const double bound = 2 * test::kBf16Roundoff * products * d.scale;
    std::printf("[ bf16 ] %s logits: max |diff| %.3g (bound %.3g), relative L2 %.3g\n",
                name.c_str(), d.max_abs, bound, d.rel_l2);
    EXPECT_LE(d.max_abs, bound);
    EXPECT_FALSE(all_close(logits, want_logits, 2e-5, 1e-5)) << "were the products rounded?";
    return;
  }
  EXPECT_TRUE(all_close(logits, want_logits, 2e-5, 1e-5));
  Tensor dlogits;
  const auto stats = sequence_loss(ctx, logits, target_out,
                                   static_cast<float>(f.attr_float("label_smoothing")), &dlogits);
  EXPECT_NEAR(stats.loss, f.read_f32("output/loss").f32()[0], 1e-5);
  model.backward(ctx, dlogits);
  for (auto& p : store.params())
    EXPECT_TRUE(all_close(p.grad, f.read_f32("grad/param/" + p.name), 1e-6, 1e-4)) << p.name;
}

INSTANTIATE_TEST_SUITE_P(Seq2Seq, Seq2SeqParity,
                         ::testing::Combine(::testing::Values("01_post_relu_tied",
                                                              "02_pre_gelu_untied"),
                                            ::testing::ValuesIn(test::kPrecisions)),
                         [](const auto& p) {
                           // f32 keeps the name the case had before precisions: Case<fixture>.
                           const ops::Precision precision = std::get<1>(p.param);
                           return "Case" + std::get<0>(p.param) +
                                  (precision == ops::Precision::f32
                                       ? ""
                                       : std::string("_") + ops::precision_name(precision));
                         });

// ---- Learning the copy and the reverse task ----

namespace {

// Sequences of 1 to kMaxLen symbols from ids 4..(4 + kSymbols − 1); the source ends in EOS.
constexpr int kSymbols = 10, kMaxLen = 8;

struct TaskBatch {
  Tensor source, source_lengths, target_in, target_out, target_lengths;
  std::vector<std::vector<int32_t>> targets;
};

TaskBatch task_batch(std::mt19937& gen, int64_t B, bool reverse) {
  std::uniform_int_distribution<int> len(1, kMaxLen), sym(4, 4 + kSymbols - 1);
  TaskBatch t;
  t.source = Tensor({B, kMaxLen + 1}, DType::i32);
  t.target_in = Tensor({B, kMaxLen + 1}, DType::i32);
  t.target_out = Tensor({B, kMaxLen + 1}, DType::i32);
  t.source_lengths = Tensor({B}, DType::i32);
  t.target_lengths = Tensor({B}, DType::i32);
  for (int64_t b = 0; b < B; ++b) {
    const int n = len(gen);
    std::vector<int32_t> x(static_cast<size_t>(n));
    for (auto& v : x) v = sym(gen);
    std::vector<int32_t> y = x;
    if (reverse) std::reverse(y.begin(), y.end());
    const int64_t row = b * (kMaxLen + 1);
    for (int i = 0; i < n; ++i) t.source.i32()[row + i] = x[static_cast<size_t>(i)];
    t.source.i32()[row + n] = kEosId;
    t.target_in.i32()[row] = kBosId;
    for (int i = 0; i < n; ++i) {
      t.target_in.i32()[row + 1 + i] = y[static_cast<size_t>(i)];
      t.target_out.i32()[row + i] = y[static_cast<size_t>(i)];
    }
    t.target_out.i32()[row + n] = kEosId;
    t.source_lengths.i32()[b] = n + 1;
    t.target_lengths.i32()[b] = n + 1;
    t.targets.push_back(y);
  }
  return t;
}

// Exact matches of greedy search over `count` fresh sequences.
int exact_matches(Transformer& model, bool reverse, int count, uint64_t seed) {
  std::mt19937 gen(static_cast<unsigned>(seed));
  TaskBatch t = task_batch(gen, count, reverse);
  decode::SearchOptions o;
  o.method = decode::SearchMethod::greedy;
  decode::Searcher searcher(model, o);
  const auto result = search_source(model, searcher, t.source, t.source_lengths);
  int ok = 0;
  for (int b = 0; b < count; ++b)
    ok += result[static_cast<size_t>(b)][0].finished &&
          result[static_cast<size_t>(b)][0].tokens == t.targets[static_cast<size_t>(b)];
  return ok;
}

// Trains with Adam (β 0.9, 0.98, ε 1e-9) and the paper's inverse-square-root schedule until
// greedy search gets every one of 300 fresh sequences right at three evaluations in a row (250
// steps apart), or the step budget runs out; then returns the exact matches on 1000 other fresh
// sequences.
int train_task(bool reverse, bool pre_norm, bool tied) {
  const OneThread one_thread;
  TransformerConfig c;
  c.vocab_size = 4 + kSymbols;
  c.d_model = 32;
  c.heads = 4;
  c.d_ff = 64;
  c.layers = 2;
  c.decoder_layers = 2;
  c.dropout = 0.f;
  c.pre_norm = pre_norm;
  c.tied_embeddings = tied;
  c.max_length = 64;
  ParamStore store;
  Transformer model(store, c);
  store.finalize();
  ops::Rng rng(7);
  model.init(rng);
  optim::AdamWOptions adam;
  adam.beta1 = 0.9;
  adam.beta2 = 0.98;
  adam.eps = 1e-9;
  adam.weight_decay = 0;
  optim::AdamW opt(store, adam);
  optim::InverseSqrt schedule(c.d_model, /*warmup_steps=*/200, /*factor=*/1.f);
  std::mt19937 gen(reverse ? 2 : 1);
  Arena arena;
  int perfect_in_a_row = 0;
  for (int64_t step = 0; step < 5000 && perfect_in_a_row < 3; ++step) {
    TaskBatch t = task_batch(gen, 32, reverse);
    arena.reset();
    nn::Context ctx{true, &arena, &rng};
    const Tensor logits =
        model.forward(ctx, t.source, t.source_lengths, t.target_in, t.target_lengths);
    Tensor dlogits;
    sequence_loss(ctx, logits, t.target_out, 0.f, &dlogits);
    store.zero_grad();
    model.backward(ctx, dlogits);
    opt.step(schedule.lr(step));
    if ((step + 1) % 250 == 0) {
      const int matches = exact_matches(model, reverse, 300, 1000 + static_cast<uint64_t>(step));
      perfect_in_a_row = matches == 300 ? perfect_in_a_row + 1 : 0;
      if (perfect_in_a_row == 3)
        std::printf("  %s: every sequence right at three evaluations in a row, after %lld steps\n",
                    reverse ? "reverse" : "copy", static_cast<long long>(step + 1));
    }
  }
  return exact_matches(model, reverse, 1000, 77);
}

}  // namespace

TEST(Seq2SeqTask, CopyIsLearnedExactly) {
  EXPECT_EQ(train_task(/*reverse=*/false, /*pre_norm=*/false, /*tied=*/true), 1000);
}

TEST(Seq2SeqTask, ReverseIsLearnedExactly) {
  EXPECT_EQ(train_task(/*reverse=*/true, /*pre_norm=*/true, /*tied=*/false), 1000);
}

// ---- Training in each precision ----

namespace {

// The translation model on the copy task from one start, in a precision: the losses of `steps`
// steps.
std::vector<double> copy_losses(ops::Precision precision, int steps) {
  seq2seq::TransformerConfig c;
  c.vocab_size = 14;
  c.d_model = 64;
  c.heads = 1;
  c.d_ff = 128;
  c.layers = 2;
  c.decoder_layers = 2;
  c.dropout = 0.f;
  c.max_length = 32;
  ParamStore store;
  seq2seq::Transformer model(store, c);
  store.finalize();
  ops::Rng rng(7);
  model.init(rng);
  optim::AdamWOptions o;
  o.beta2 = 0.98;
  o.eps = 1e-9;
  o.weight_decay = 0;
  optim::AdamW adam(store, o);
  std::mt19937 gen(1);
  Arena arena;
  std::vector<double> losses;
  const int64_t B = 32, T = 9;
  for (int s = 0; s < steps; ++s) {
    Tensor src({B, T}, DType::i32), tin({B, T}, DType::i32), tout({B, T}, DType::i32);
    Tensor sl({B}, DType::i32), tl({B}, DType::i32);
    for (int64_t b = 0; b < B; ++b) {
      const int n = 1 + static_cast<int>(gen() % 8);
      tin.i32()[b * T] = seq2seq::kBosId;
      for (int i = 0; i < n; ++i) {
        const int32_t v = 4 + static_cast<int32_t>(gen() % 10);
        src.i32()[b * T + i] = v;
        tin.i32()[b * T + i + 1] = v;
        tout.i32()[b * T + i] = v;
      }
      src.i32()[b * T + n] = seq2seq::kEosId;
      tout.i32()[b * T + n] = seq2seq::kEosId;
      sl.i32()[b] = tl.i32()[b] = n + 1;
    }
    arena.reset();
    nn::Context ctx{true, &arena, &rng};
    ctx.precision = precision;
    const Tensor logits = model.forward(ctx, src, sl, tin, tl);
    Tensor dlogits;
    losses.push_back(seq2seq::sequence_loss(ctx, logits, tout, 0.f, &dlogits).loss);
    store.zero_grad();
    model.backward(ctx, dlogits);
    adam.step(1e-3f);
  }
  return losses;
}

}  // namespace

class Seq2SeqTraining : public ::testing::TestWithParam<ops::Precision> {};

// The copy task's loss falls in each precision, and with bf16 products as in f32.
TEST_P(Seq2SeqTraining, TheCopyTaskLossFallsAsInF32) {
  const ops::Precision precision = GetParam();
  SKIP_UNLESS_SUPPORTED(precision);
  const OneThread one_thread;
  const int steps = 300;
  auto tail = [&](const std::vector<double>& l) {
    double s = 0;
    for (int i = steps - 20; i < steps; ++i) s += l[static_cast<size_t>(i)];
    return s / 20;
  };
  const std::vector<double> losses = copy_losses(precision, steps);
  EXPECT_LT(tail(losses), 0.25 * losses[0]);
  if (precision == ops::Precision::f32) return;
  const std::vector<double> f32 = copy_losses(ops::Precision::f32, steps);
  std::printf("[ %s ] copy task loss: start %.4f / %.4f, last 20 steps %.4f / %.4f (f32 / %s)\n",
              ops::precision_name(precision), f32[0], losses[0], tail(f32), tail(losses),
              ops::precision_name(precision));
  EXPECT_LT(tail(losses), 1.5 * tail(f32) + 0.05);
}

INSTANTIATE_TEST_SUITE_P(Precisions, Seq2SeqTraining, ::testing::ValuesIn(test::kPrecisions),
                         test::precision_case_name);

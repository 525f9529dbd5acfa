// The text classifier (common/seq2seq/text_model.h): the backward of both poolings against central
// finite differences (pre- and post-norm, with dropout), padding leaving a sentence's logits
// alone, the pooled attention, a frozen encoder, the errors for bad input, and parity with
// PyTorch (tests/parity/make_text_classifier_fixture.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "common/seq2seq/config.h"
#include "common/seq2seq/text_model.h"
#include "util/fixture_io.h"
#include "util/op_test_util.h"
#include "util/parity.h"
#include "util/test_util.h"

using namespace vitk;
using namespace vitk::seq2seq;
using namespace vitk::test;

namespace {

TextClassifierConfig tiny_text_config(TextPool pool, bool pre_norm) {
  TextClassifierConfig c;
  c.vocab_size = 12;
  c.num_classes = 3;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.layers = 1;
  c.dropout = 0.f;
  c.activation = ops::Activation::gelu;  // smooth, for the finite differences
  c.pre_norm = pre_norm;
  c.max_length = 16;
  c.pool = pool;
  return c;
}

Tensor ids2d(int64_t rows, int64_t cols, const std::vector<int32_t>& v) {
  Tensor t({rows, cols}, DType::i32);
  std::copy(v.begin(), v.end(), t.i32());
  return t;
}

// Three sentences of 5, 2 and 4 positions (EOS = 3 included), padded with 0 to T = 5.
struct TextBatch {
  Tensor ids = ids2d(3, 5, {4, 5, 6, 7, kEosId, 8, kEosId, 0, 0, 0, 9, 10, 11, kEosId, 0});
  Tensor lengths = ids_tensor({5, 2, 4});
  Tensor labels = ids_tensor({2, 0, 1});
};

// A model of `c` initialised from `seed`, its norm gains and biases moved away from 1 and 0 so that
// their gradients are not degenerate.
struct TinyText {
  ParamStore store;
  TextClassifier model;
  TinyText(const TextClassifierConfig& c, uint64_t seed) : model(store, c) {
    store.finalize();
    ops::Rng rng(seed);
    model.init(rng);
    std::mt19937 gen(static_cast<unsigned>(seed) + 1);
    std::uniform_real_distribution<float> jitter(-0.3f, 0.3f);
    for (auto& p : store.params())
      if (p.shape.size() == 1)
        for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] += jitter(gen);
    store.mark_changed();
  }
};

std::string pool_case_name(const ::testing::TestParamInfo<TextPool>& p) {
  return p.param == TextPool::cls ? "Cls" : "Mean";
}

}  // namespace

// ---- Backward ----

struct TextGradCase {
  TextPool pool;
  bool pre_norm;
  float dropout;
};

void PrintTo(const TextGradCase& g, std::ostream* os) {
  *os << text_pool_name(g.pool) << (g.pre_norm ? ", pre-norm" : ", post-norm") << ", dropout "
      << g.dropout;
}

class TextClassifierGradientTest : public ::testing::TestWithParam<TextGradCase> {};

// L = text_loss with label smoothing 0.1 over a padded batch of three sentences. Every element of
// every parameter (the embedding, the class token, the encoder, the head) must match central
// differences of L; with dropout the same masks are drawn at every evaluation.
TEST_P(TextClassifierGradientTest, BackwardMatchesFiniteDifferences) {
  const OneThread one_thread;
  const TextGradCase g = GetParam();
  TextClassifierConfig c = tiny_text_config(g.pool, g.pre_norm);
  c.dropout = g.dropout;
  c.attention_dropout = g.dropout;
  TinyText t(c, 11);
  TextBatch b;
  constexpr float kSmoothing = 0.1f;
  constexpr uint64_t kDropoutSeed = 99;

  Arena arena;
  ops::Rng rng(kDropoutSeed);
  nn::Context ctx{true, &arena, &rng};
  t.store.zero_grad();
  const Tensor logits = t.model.forward(ctx, b.ids, b.lengths);
  ASSERT_EQ(logits.shape(), (Shape{3, 3}));
  Tensor dlogits;
  const auto stats = text_loss(ctx, logits, b.labels, kSmoothing, &dlogits);
  EXPECT_EQ(stats.count, 3);
  t.model.backward(ctx, dlogits);

  Arena fd_arena;
  ops::Rng fd_rng;
  auto loss = [&]() {
    fd_arena.reset();
    fd_rng.set_state(kDropoutSeed, 0);  // the same dropout masks at every evaluation
    nn::Context fctx{true, &fd_arena, &fd_rng};
    const Tensor l = t.model.forward(fctx, b.ids, b.lengths);
    return text_loss(fctx, l, b.labels, kSmoothing).loss;
  };
  EXPECT_NEAR(loss(), stats.loss, 1e-7);  // the replayed masks are the training forward's
  FdOptions opt;  // the translation model's (tests/seq2seq/test_seq2seq.cpp)
  opt.atol = 1e-3;
  opt.rtol = 2e-2;
  for (auto& p : t.store.params()) {
    const Tensor analytic = p.grad.clone();
    EXPECT_GT(ops::l2_norm(analytic), 0.0) << p.name << " gets no gradient";
    EXPECT_GRAD_OK(check_gradient(p.name, p.value, analytic, loss, opt));
  }
  // The pad id's embedding row is never read: no gradient.
  const Tensor& dembed = t.store.get("encoder.embed_tokens.weight").grad;
  for (int64_t j = 0; j < c.d_model; ++j) EXPECT_EQ(dembed.f32()[kPadId * c.d_model + j], 0.f);
}

INSTANTIATE_TEST_SUITE_P(Text, TextClassifierGradientTest,
                         ::testing::Values(TextGradCase{TextPool::mean, false, 0.f},
                                           TextGradCase{TextPool::cls, false, 0.f},
                                           TextGradCase{TextPool::mean, true, 0.f},
                                           TextGradCase{TextPool::cls, true, 0.f},
                                           TextGradCase{TextPool::mean, true, 0.2f},
                                           TextGradCase{TextPool::cls, false, 0.2f}),
                         [](const auto& p) {
                           return std::string(p.param.pool == TextPool::cls ? "Cls" : "Mean") +
                                  (p.param.pre_norm ? "PreNorm" : "PostNorm") +
                                  (p.param.dropout > 0 ? "Dropout" : "");
                         });

class TextClassifierPoolTest : public ::testing::TestWithParam<TextPool> {};

// With train_encoder false, backward fills the head's gradients (as a full backward does) and
// leaves the embedding, the class token and the encoder at zero. encoder_params() is exactly the
// part before the head.
TEST_P(TextClassifierPoolTest, FrozenEncoderFillsOnlyTheHeadsGradients) {
  const OneThread one_thread;
  TinyText t(tiny_text_config(GetParam(), GetParam() == TextPool::cls), 5);
  TextBatch b;
  Arena arena;
  nn::Context ctx{true, &arena, nullptr};
  auto step = [&] {
    arena.reset();
    t.store.zero_grad();
    const Tensor logits = t.model.forward(ctx, b.ids, b.lengths);
    Tensor dlogits;
    text_loss(ctx, logits, b.labels, 0.1f, &dlogits);
    t.model.backward(ctx, dlogits);
  };
  step();
  const Tensor head_w = t.store.get("head.weight").grad.clone();
  const Tensor head_b = t.store.get("head.bias").grad.clone();
  t.model.train_encoder = false;
  step();
  EXPECT_TRUE(bitwise_equal(t.store.get("head.weight").grad, head_w));
  EXPECT_TRUE(bitwise_equal(t.store.get("head.bias").grad, head_b));
  const auto [first, end] = t.model.encoder_params();
  const auto& params = t.store.params();
  EXPECT_EQ(first, 0u);
  EXPECT_EQ(end, params.size() - 2);
  for (size_t i = 0; i < params.size(); ++i) {
    const bool head = params[i].name.rfind("head.", 0) == 0;
    EXPECT_EQ(head, i >= end) << params[i].name;
    if (head)
      EXPECT_GT(ops::l2_norm(params[i].grad), 0.0) << params[i].name;
    else
      EXPECT_EQ(ops::l2_norm(params[i].grad), 0.0) << params[i].name << " got a gradient";
  }
}

// ---- Forward ----

// A sentence's logits are the same alone, in a padded batch, in a batch padded further, and with
// other ids in its padding (dropout, set here, is off in inference).
TEST_P(TextClassifierPoolTest, PaddingDoesNotChangeLogits) {
  const OneThread one_thread;
  TextClassifierConfig c = tiny_text_config(GetParam(), false);
  c.dropout = 0.3f;
  c.layers = 2;
  TinyText t(c, 7);
  TextBatch b;
  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  const Tensor batch = t.model.forward(ctx, b.ids, b.lengths).clone();  // [3, C]

  Tensor other_padding = b.ids.clone();
  Tensor wider({3, 9}, DType::i32);  // T = 9, padded with 0
  for (int64_t s = 0; s < 3; ++s) {
    for (int64_t i = b.lengths.i32()[s]; i < 5; ++i) other_padding.i32()[s * 5 + i] = 6;
    std::copy(b.ids.i32() + s * 5, b.ids.i32() + (s + 1) * 5, wider.i32() + s * 9);
  }
  EXPECT_TRUE(all_close(t.model.forward(ctx, other_padding, b.lengths), batch, 1e-6, 1e-6))
      << "the ids in the padding matter";
  EXPECT_TRUE(all_close(t.model.forward(ctx, wider, b.lengths), batch, 1e-5, 1e-5))
      << "the amount of padding matters";
  for (int64_t s = 0; s < 3; ++s) {
    const int32_t n = b.lengths.i32()[s];
    const Tensor alone =
        ids2d(1, n, std::vector<int32_t>(b.ids.i32() + s * 5, b.ids.i32() + s * 5 + n));
    const Tensor got = t.model.forward(ctx, alone, ids_tensor({n}));
    EXPECT_TRUE(all_close(got, batch.rows(s, s + 1), 1e-5, 1e-5)) << "sentence " << s;
  }
}

// After an inference forward with keep_attention, each row of pooled_attention() is a
// distribution over the sentence's positions (the class token's included) and zero on padding.
TEST_P(TextClassifierPoolTest, PooledAttentionIsADistributionOverTheSentence) {
  const OneThread one_thread;
  TextClassifierConfig c = tiny_text_config(GetParam(), true);
  c.layers = 2;
  TinyText t(c, 9);
  TextBatch b;
  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  EXPECT_TRUE(contains(error_of([&] { t.model.pooled_attention(); }), "keep_attention"));
  t.model.keep_attention = true;
  t.model.forward(ctx, b.ids, b.lengths);
  const Tensor a = t.model.pooled_attention().clone();
  const int64_t o = t.model.first_token(), Tp = 5 + o;
  EXPECT_EQ(o, GetParam() == TextPool::cls ? 1 : 0);
  ASSERT_EQ(a.shape(), (Shape{3, Tp}));
  for (int64_t s = 0; s < 3; ++s) {
    const int64_t n = b.lengths.i32()[s] + o;
    double sum = 0;
    for (int64_t k = 0; k < Tp; ++k) {
      const float w = a.f32()[s * Tp + k];
      if (k < n) {
        EXPECT_GE(w, 0.f) << "sentence " << s << ", position " << k;
        sum += w;
      } else {
        EXPECT_EQ(w, 0.f) << "sentence " << s << ", padding position " << k;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "sentence " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Text, TextClassifierPoolTest,
                         ::testing::Values(TextPool::mean, TextPool::cls), pool_case_name);

// Bad ids, lengths, dlogits and labels: a vitk::Error naming the problem.
TEST(TextClassifier, BadInputsAreNamed) {
  TinyText mean(tiny_text_config(TextPool::mean, false), 3);
  TinyText cls(tiny_text_config(TextPool::cls, true), 3);
  TextBatch b;
  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  nn::Context train{true, &arena, nullptr};
  for (TinyText* t : {&mean, &cls}) {
    TextClassifier& m = t->model;
    const std::string which = text_pool_name(m.config().pool);
    auto forward_error = [&](const Tensor& ids, const Tensor& lengths) {
      return error_of([&] { m.forward(ctx, ids, lengths); });
    };
    EXPECT_TRUE(contains(forward_error(Tensor({3, 5}), b.lengths), "should be i32 [B, T]"))
        << which;
    EXPECT_TRUE(
        contains(forward_error(ids_tensor({4, 5, 3}), ids_tensor({3})), "should be i32 [B, T]"))
        << which;
    EXPECT_TRUE(
        contains(forward_error(b.ids, ids_tensor({5, 0, 4})), "lengths[1] = 0 is outside [1, 5]"))
        << which;
    EXPECT_TRUE(
        contains(forward_error(b.ids, ids_tensor({5, 2, 6})), "lengths[2] = 6 is outside [1, 5]"))
        << which;
    EXPECT_TRUE(contains(forward_error(b.ids, ids_tensor({5, 2})), "should be i32 [3]")) << which;
    // max_length 16 counts the class token: 16 positions fit without one, 15 with.
    const int64_t fits = 16 - m.first_token();
    Tensor longest({1, fits}, DType::i32), too_long({1, fits + 1}, DType::i32);
    std::fill(longest.i32(), longest.i32() + fits, 4);
    std::fill(too_long.i32(), too_long.i32() + fits + 1, 4);
    EXPECT_EQ(forward_error(longest, ids_tensor({static_cast<int32_t>(fits)})), "no exception")
        << which;
    const std::string long_error =
        forward_error(too_long, ids_tensor({static_cast<int32_t>(fits + 1)}));
    EXPECT_TRUE(contains(long_error, std::to_string(fits + 1) + " positions")) << long_error;
    EXPECT_TRUE(contains(long_error, "model.max_length")) << long_error;
    Tensor bad_id = b.ids.clone();
    bad_id.i32()[2] = 12;
    EXPECT_TRUE(contains(forward_error(bad_id, b.lengths), "id 12")) << which;

    // backward needs the last forward to have been a training one that succeeded.
    EXPECT_TRUE(contains(error_of([&] { m.backward(ctx, Tensor({3, 3})); }), "training forward"));
    m.forward(train, b.ids, b.lengths);
    EXPECT_TRUE(contains(error_of([&] { m.backward(train, Tensor({3, 4})); }), "dlogits [3, 4]"));
    EXPECT_THROW(m.forward(train, b.ids, ids_tensor({5, 0, 4})), Error);
    EXPECT_TRUE(contains(error_of([&] {
                           m.backward(train, Tensor({3, 3}));
                         }),
                         "training forward"))
        << which;
  }
  const Tensor logits({3, 3});
  EXPECT_TRUE(contains(error_of([&] {
                         text_loss(ctx, logits, ids_tensor({1, 2}), 0.1f);
                       }),
                       "labels [2] do not fit the logits [3, 3]"));
  EXPECT_TRUE(contains(error_of([&] { text_loss(ctx, logits, b.labels, 1.f); }),
                       "label smoothing must be in [0, 1)"));
}

// ---- Parity with PyTorch ----

namespace {

// The text classifier stored in a parity fixture (tests/parity/make_text_classifier_fixture.py).
TextClassifierConfig text_config_of(const FixtureFile& f) {
  std::map<std::string, std::string> settings;
  for (const char* key :
       {"vocab_size", "num_classes", "d_model", "heads", "d_ff", "layers", "activation", "pool",
        "pre_norm", "max_length", "dropout", "attention_dropout"})
    settings[key] = f.attr_string(key);
  return text_config_from_map(settings, f.path());
}

}  // namespace

class TextClassifierParity
    : public ::testing::TestWithParam<std::tuple<std::string, ops::Precision>> {};

// tests/parity/make_text_classifier_fixture.py: PyTorch's nn.TransformerEncoder over √d-scaled
// embeddings plus the sinusoids (a class token in front for pool "cls"), mean or class-token
// pooling, an nn.Linear head and label-smoothed cross-entropy. In f32, logits, loss and every
// parameter's gradient must match the float64 reference within the translation model's
// tolerances; with bf16 products the logits must be within bf16's bound (util/parity.h) and further
// from the reference than f32's tolerance (skipped on CPUs without AVX512_BF16).
TEST_P(TextClassifierParity, MatchesPyTorch) {
  const auto& [name, precision] = GetParam();
  SKIP_UNLESS_SUPPORTED(precision);
  const OneThread one_thread;
  const FixtureFile f(std::string(VITK_SOURCE_DIR) + "/tests/fixtures/text/" + name + ".h5");
  const TextClassifierConfig c = text_config_of(f);
  ParamStore store;
  TextClassifier model(store, c);
  store.finalize();
  ASSERT_NO_FATAL_FAILURE(load_fixture_params(f, store));
  const Tensor ids = f.read_i32("input/ids"), lengths = f.read_i32("input/lengths");
  const Tensor labels = f.read_i32("input/labels");

  Arena arena;
  nn::Context ctx{true, &arena, nullptr};
  ctx.precision = precision;
  store.zero_grad();
  const Tensor logits = model.forward(ctx, ids, lengths);
  const Tensor want_logits = f.read_f32("output/logits");
  const OutputDiff d = output_diff(logits, want_logits);
  if (precision != ops::Precision::f32) {
    const int products = 6 * c.layers + 1;
    const double bound = 2 * kBf16Roundoff * products * d.scale;
    std::printf("[ bf16 ] %s logits: max |diff| %.3g (bound %.3g), relative L2 %.3g\n",
                name.c_str(), d.max_abs, bound, d.rel_l2);
    EXPECT_LE(d.max_abs, bound);
    EXPECT_FALSE(all_close(logits, want_logits, 2e-5, 1e-5)) << "were the products rounded?";
    return;
  }
  EXPECT_TRUE(all_close(logits, want_logits, 2e-5, 1e-5));
  Tensor dlogits;
  const auto stats =
      text_loss(ctx, logits, labels, static_cast<float>(f.attr_float("label_smoothing")), &dlogits);
  const double want_loss = f.read_f32("output/loss").f32()[0];
  EXPECT_NEAR(stats.loss, want_loss, 1e-5);
  model.backward(ctx, dlogits);
  double grad_max_abs = 0;
  std::string worst;
  for (auto& p : store.params()) {
    const Tensor want = f.read_f32("grad/param/" + p.name);
    EXPECT_TRUE(all_close(p.grad, want, 1e-6, 1e-4)) << p.name;
    const OutputDiff g = output_diff(p.grad, want);
    if (g.max_abs >= grad_max_abs) grad_max_abs = g.max_abs, worst = p.name;
  }
  std::printf("[ f32 ] %s: max |logit diff| %.3g, |loss diff| %.3g, max |grad diff| %.3g (%s)\n",
              name.c_str(), d.max_abs, std::fabs(stats.loss - want_loss), grad_max_abs,
              worst.c_str());
}

INSTANTIATE_TEST_SUITE_P(Text, TextClassifierParity,
                         ::testing::Combine(::testing::Values("01_post_relu_mean",
                                                              "02_pre_gelu_cls"),
                                            ::testing::ValuesIn(kPrecisions)),
                         [](const auto& p) {
                           const ops::Precision precision = std::get<1>(p.param);
                           return "Case" + std::get<0>(p.param) +
                                  (precision == ops::Precision::f32
                                       ? ""
                                       : std::string("_") + ops::precision_name(precision));
                         });

// The captioning model (vit/caption/model.h): parity with PyTorch
// (tests/parity/make_caption_fixture.py: the ViT's features as the memory of nn.TransformerDecoder,
// cross-entropy plus the doubly stochastic attention penalty), incremental decoding against the
// teacher-forced forward, a frozen encoder, and the configuration as text.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "common/params.h"
#include "common/vocabulary.h"
#include "datasets/captions.h"
#include "util/fixture_io.h"
#include "util/op_test_util.h"
#include "util/parity.h"
#include "util/scene_data.h"
#include "util/test_util.h"
#include "vit/caption/captioner.h"
#include "vit/caption/model.h"
#include "vit/caption/scenes/losses.h"

using namespace vitk;
using caption::scenes::article_loss;  // the scenes' loss terms, on the model's loss hooks
using caption::scenes::guided_attention;

namespace {

std::string caption_fixture(const std::string& name) {
  return std::string(VITK_SOURCE_DIR) + "/tests/fixtures/caption/" + name + ".h5";
}

caption::CaptionConfig config_of(const test::FixtureFile& f) {
  std::map<std::string, std::string> m{{"type", "caption"}};
  for (const char* key :
       {"image_size", "patch_size", "channels", "d_model", "heads", "d_ff", "layers", "pool",
        "norm_eps", "stem_channels", "pos_conv_blocks", "vocab_size", "max_length",
        "decoder_layers", "decoder_heads", "decoder_d_ff", "decoder_dropout", "tie_embeddings",
        "memory_class_token"})
    m[key] = f.attr_string(key);
  if (f.has_attr("memory_positions")) m["memory_positions"] = f.attr_string("memory_positions");
  m["mean"] = m["std"] = m["channels"] == "1" ? "0.5" : "0.5,0.5,0.5";  // not read by the model
  return caption::caption_config_from_map(m, f.path());
}

// A small model with random weights, for the tests that need no fixture.
struct SmallCaptioner {
  ParamStore store;
  caption::CaptionConfig config;
  std::unique_ptr<caption::CaptionModel> model;
  explicit SmallCaptioner(bool class_token = true, bool tied = true, bool positions = false) {
    config.encoder.image_height = config.encoder.image_width = 8;
    config.encoder.patch_size = 4;
    config.encoder.channels = 1;
    config.encoder.num_classes = 0;
    config.encoder.d_model = 16;
    config.encoder.heads = 2;
    config.encoder.d_ff = 32;
    config.encoder.layers = 1;
    config.encoder.preprocess.mean = {0.5f};
    config.encoder.preprocess.std = {0.5f};
    config.vocab_size = 9;
    config.max_length = 6;
    config.decoder_heads = 2;
    config.decoder_dropout = 0.f;
    config.memory_class_token = class_token;
    config.memory_positions = positions;
    config.tie_embeddings = tied;
    model = std::make_unique<caption::CaptionModel>(store, config);
    store.finalize();
    ops::Rng rng(5);
    model->init(rng);
  }
};

Tensor random_images(int64_t B, std::mt19937& gen) {
  Tensor t({B, 1, 8, 8});
  std::normal_distribution<float> n;
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = n(gen);
  return t;
}

// Teacher forcing for two captions, "5 6" and "7" (BOS 2, EOS 3): in and out [2, 3], lengths.
struct TwoCaptions {
  Tensor in{{2, 3}, DType::i32}, out{{2, 3}, DType::i32}, lengths{{2}, DType::i32};
  TwoCaptions() {
    const int32_t i[] = {2, 5, 6, 2, 7, 0}, o[] = {5, 6, 3, 7, 3, 0};
    std::copy(i, i + 6, in.i32());
    std::copy(o, o + 6, out.i32());
    lengths.i32()[0] = 3, lengths.i32()[1] = 2;
  }
};

// Parameter p's gradient in `grads` (a copy of its store's gradients), for check_gradient.
std::vector<double> gradient_of(const Parameter& p, const Tensor& grads) {
  std::vector<double> g(static_cast<size_t>(p.numel()));
  for (int64_t j = 0; j < p.numel(); ++j) g[static_cast<size_t>(j)] = grads.f32()[p.offset + j];
  return g;
}

}  // namespace

class CaptionParity : public ::testing::TestWithParam<std::tuple<std::string, ops::Precision>> {};

// Logits, cross-entropy, penalty and every gradient (the parameters' and the images') against
// the float64 reference; with bf16 products the logits within bf16's bound and further from the
// reference than f32's tolerance (skipped on CPUs without AVX512_BF16).
TEST_P(CaptionParity, MatchesPyTorch) {
  const auto& [name, precision] = GetParam();
  SKIP_UNLESS_SUPPORTED(precision);
  const test::OneThread one_thread;
  const test::FixtureFile f(caption_fixture(name));
  const caption::CaptionConfig c = config_of(f);
  ParamStore store;
  caption::CaptionModel model(store, c);
  store.finalize();
  ASSERT_NO_FATAL_FAILURE(test::load_fixture_params(f, store));
  const Tensor images = f.read_f32("input/images");
  const Tensor target_in = f.read_i32("input/target_in"),
               target_out = f.read_i32("input/target_out");
  const Tensor target_lengths = f.read_i32("input/target_lengths");
  const float lambda = static_cast<float>(f.attr_float("penalty"));
  const int64_t B = images.dim(0);

  Arena arena;
  nn::Context ctx{true, &arena, nullptr};
  ctx.precision = precision;
  store.zero_grad();
  model.keep_attention_weights = true;
  const Tensor logits = model.forward(ctx, images, target_in, target_lengths);
  const Tensor want_logits = f.read_f32("output/logits");
  if (precision != ops::Precision::f32) {
    const int products = 6 * c.encoder.layers + 11 * c.decoder_layers + 2;
    const test::OutputDiff d = test::output_diff(logits, want_logits);
    EXPECT_LE(d.max_abs, 2 * test::kBf16Roundoff * products * d.scale);
    EXPECT_FALSE(test::all_close(logits, want_logits, 2e-5, 1e-5)) << "were the products rounded?";
    return;
  }
  EXPECT_TRUE(test::all_close(logits, want_logits, 2e-5, 1e-5));
  Tensor dlogits = ctx.alloc_uninit(logits.shape());
  const ops::CrossEntropyStats ce = ops::cross_entropy_forward_backward(
      logits, target_out, static_cast<float>(f.attr_float("label_smoothing")), Vocabulary::kPad,
      1.f, dlogits);
  EXPECT_NEAR(ce.loss, f.read_f32("output/loss").f32()[0], 1e-5);
  const double penalty = model.attention_penalty(lambda, 1.f / static_cast<float>(B)) / B;
  EXPECT_NEAR(penalty, f.read_f32("output/penalty").f32()[0], 1e-5);
  model.backward(ctx, dlogits);
  for (auto& p : store.params())
    EXPECT_TRUE(test::all_close(p.grad, f.read_f32("grad/param/" + p.name), 1e-6, 1e-4)) << p.name;
}

INSTANTIATE_TEST_SUITE_P(Caption, CaptionParity,
                         ::testing::Combine(::testing::Values("01_rgb_tied_class_token",
                                                              "02_gray_stem_untied_patches",
                                                              "03_positions_class_token"),
                                            ::testing::ValuesIn(test::kPrecisions)),
                         [](const auto& p) {
                           const ops::Precision precision = std::get<1>(p.param);
                           return "Case" + std::get<0>(p.param) +
                                  (precision == ops::Precision::f32
                                       ? ""
                                       : std::string("_") + ops::precision_name(precision));
                         });

// Decoding one token at a time on the cached decoder gives the teacher-forced logits of every
// position, with and without the class token in the memory, with and without its positions.
TEST(CaptionModel, StepsEqualTheTeacherForcedForward) {
  for (int variant = 0; variant < 3; ++variant) {
    const bool class_token = variant != 1, positions = variant == 2;
    SCOPED_TRACE(std::string(class_token ? "class token" : "patches only") +
                 (positions ? ", positions" : ""));
    SmallCaptioner s(class_token, /*tied=*/class_token, positions);
    std::mt19937 gen(3);
    const int64_t B = 2, T = 5;
    const Tensor images = random_images(B, gen);
    Tensor target_in({B, T}, DType::i32), lengths({B}, DType::i32);
    for (int64_t i = 0; i < B * T; ++i) target_in.i32()[i] = i % T == 0 ? 2 : 4 + (i * 7) % 5;
    lengths.i32()[0] = lengths.i32()[1] = static_cast<int32_t>(T);
    Arena arena;
    nn::Context ctx{false, &arena, nullptr};
    const Tensor full = s.model->forward(ctx, images, target_in, lengths).clone();  // [B, T, V]
    const Tensor memory = s.model->encode(ctx, images);
    EXPECT_EQ(memory.dim(1), s.config.memory_tokens());
    Tensor memory_lengths({B}, DType::i32);
    memory_lengths.i32()[0] = memory_lengths.i32()[1] = static_cast<int32_t>(memory.dim(1));
    nn::Decoder::State state;
    s.model->start(ctx, memory, memory_lengths, T, state);
    const int64_t V = s.config.vocab_size;
    for (int64_t t = 0; t < T; ++t) {
      Tensor tokens({B}, DType::i32);
      for (int64_t b = 0; b < B; ++b) tokens.i32()[b] = target_in.i32()[b * T + t];
      const Tensor logits = s.model->step(ctx, tokens, state);  // [B, V]
      for (int64_t b = 0; b < B; ++b)
        for (int64_t v = 0; v < V; ++v)
          EXPECT_NEAR(logits.f32()[b * V + v], full.f32()[(b * T + t) * V + v], 1e-4)
              << "b " << b << " t " << t << " v " << v;
    }
  }
}

// caption_log_probs (what `--references likeliest` ranks by) equals the log-softmax of the
// teacher-forced forward summed over each caption's tokens and EOS, however many captions an
// image has and in whatever order; captions too long for the model, unknown rows and tokens
// outside the vocabulary are errors.
TEST(CaptionModel, CaptionLogProbsAreTheTeacherForcedForwards) {
  SmallCaptioner s(/*class_token=*/false, /*tied=*/false);
  std::mt19937 gen(8);
  const Tensor images = random_images(2, gen);
  const std::vector<std::vector<int32_t>> captions = {{4, 5, 6}, {7}, {}, {8, 4, 4, 5, 6}, {5, 5}};
  const std::vector<int64_t> image_of = {1, 0, 0, 1, 0};
  std::vector<const std::vector<int32_t>*> rows;
  for (const auto& c : captions) rows.push_back(&c);
  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  const std::vector<double> got = caption::caption_log_probs(*s.model, ctx, images, rows, image_of);
  ASSERT_EQ(got.size(), captions.size());
  const int64_t V = s.config.vocab_size;
  for (size_t k = 0; k < captions.size(); ++k) {
    const int64_t n = static_cast<int64_t>(captions[k].size()), T = n + 1;
    Tensor in({1, T}, DType::i32), lengths({1}, DType::i32);
    in.i32()[0] = Vocabulary::kBos;
    for (int64_t t = 0; t < n; ++t) in.i32()[t + 1] = captions[k][static_cast<size_t>(t)];
    lengths.i32()[0] = static_cast<int32_t>(T);
    const Tensor image = images.rows(image_of[k], image_of[k] + 1);
    const Tensor logits = s.model->forward(ctx, image, in, lengths);  // [1, T, V]
    double want = 0;
    for (int64_t t = 0; t < T; ++t) {
      const float* z = logits.f32() + t * V;
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v]));
      const int32_t target = t < n ? captions[k][static_cast<size_t>(t)] : Vocabulary::kEos;
      want += static_cast<double>(z[target]) - std::log(sum);
    }
    EXPECT_NEAR(got[k], want, 1e-4) << "caption " << k;
    EXPECT_LT(got[k], 0.0);
  }

  const std::vector<int32_t> too_long(static_cast<size_t>(s.config.max_length), 4);
  EXPECT_THROW(caption::caption_log_probs(*s.model, ctx, images, {&too_long}, {0}), Error);
  EXPECT_THROW(caption::caption_log_probs(*s.model, ctx, images, {rows[0]}, {2}), Error);
  const std::vector<int32_t> unknown = {4, static_cast<int32_t>(s.config.vocab_size)};
  EXPECT_THROW(caption::caption_log_probs(*s.model, ctx, images, {&unknown}, {0}), Error);
  EXPECT_THROW(caption::caption_log_probs(*s.model, ctx, images, {rows[0]}, {}), Error);
}

// A frozen encoder (train_encoder false) gets no gradient and the decoder the same one as with
// a training encoder; the cross-attention weights of the forced forward sum to one per row.
TEST(CaptionModel, AFrozenEncoderGetsNoGradientAndTheDecoderTheSame) {
  SmallCaptioner s;
  std::mt19937 gen(4);
  const Tensor images = random_images(2, gen);
  const TwoCaptions c;
  const Tensor &target_in = c.in, &target_out = c.out, &lengths = c.lengths;
  auto grads = [&](bool train_encoder) {
    s.model->train_encoder = train_encoder;
    s.store.zero_grad();
    Arena arena;
    nn::Context ctx{true, &arena, nullptr};
    const Tensor logits = s.model->forward(ctx, images, target_in, lengths);
    Tensor dlogits = ctx.alloc_uninit(logits.shape());
    ops::cross_entropy_forward_backward(logits, target_out, 0.f, 0, 1.f, dlogits);
    s.model->backward(ctx, dlogits);
    return s.store.grads().clone();
  };
  const Tensor trained = grads(true), frozen = grads(false);
  const auto [first, end] = s.model->encoder_params();
  int64_t nonzero_encoder = 0;
  for (size_t i = 0; i < s.store.params().size(); ++i) {
    const Parameter& p = s.store.params()[i];
    const bool encoder = i >= first && i < end;
    for (int64_t j = 0; j < p.numel(); ++j) {
      const float a = trained.f32()[p.offset + j], b = frozen.f32()[p.offset + j];
      if (encoder) {
        EXPECT_EQ(b, 0.f) << p.name;
        nonzero_encoder += a != 0.f;
      } else {
        EXPECT_FLOAT_EQ(a, b) << p.name;
      }
    }
  }
  EXPECT_GT(nonzero_encoder, 0) << "a training encoder does get gradients";

  Tensor first_image({1, 1, 8, 8});
  std::copy_n(images.f32(), 64, first_image.f32());
  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  const Tensor w = s.model->cross_attention(ctx, first_image, {5, 6}, /*with_eos=*/true);
  ASSERT_EQ(w.shape(), (Shape{3, s.config.memory_tokens()}));
  for (int64_t t = 0; t < 3; ++t) {
    double sum = 0;
    for (int64_t i = 0; i < w.dim(1); ++i) sum += w.f32()[t * w.dim(1) + i];
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << t;
  }
  EXPECT_THROW(s.model->cross_attention(ctx, first_image, {5}, true, /*layer=*/2), UsageError);
}

// The configuration reads back from its text exactly, and a bad value names the key.
TEST(CaptionConfig, RoundTripsThroughTextAndNamesBadKeys) {
  SmallCaptioner s(/*class_token=*/false, /*tied=*/false);
  const auto map = caption::to_config_map(s.config);
  EXPECT_EQ(map.at("type"), "caption");
  EXPECT_EQ(map.count("num_classes"), 0u);
  const caption::CaptionConfig back = caption::caption_config_from_map(map, "x.h5");
  EXPECT_EQ(caption::to_config_map(back), map);
  auto bad = map;
  bad["decoder_heads"] = "3";
  EXPECT_THROW(
      {
        try {
          caption::caption_config_from_map(bad, "x.h5");
        } catch (const Error& e) {
          EXPECT_TRUE(test::contains(e.what(), "x.h5")) << e.what();
          EXPECT_TRUE(test::contains(e.what(), "decoder_heads")) << e.what();
          throw;
        }
      },
      Error);
  bad = map;
  bad["tie_embeddings"] = "yes";
  EXPECT_THROW(caption::caption_config_from_map(bad, "x.h5"), Error);
  bad = map;
  bad["type"] = "vit";
  EXPECT_THROW(caption::caption_config_from_map(bad, "x.h5"), Error);
  bad = map;  // the sine-cosine code needs d_model in quarters
  bad["memory_positions"] = "true";
  bad["d_model"] = "18";
  EXPECT_THROW(
      {
        try {
          caption::caption_config_from_map(bad, "x.h5");
        } catch (const Error& e) {
          EXPECT_TRUE(test::contains(e.what(), "memory_positions")) << e.what();
          throw;
        }
      },
      Error);
  bad["d_model"] = "16";
  EXPECT_TRUE(caption::caption_config_from_map(bad, "x.h5").memory_positions);
}

// Guided attention: its value is −λ · log of the attention mass (the last layer's, mean over the
// heads) in each guide's memory rows, read against the model's own cross_attention(), and its
// gradient, alone and added to the doubly stochastic penalty's, is the finite differences' in
// the decoder and in the encoder.
TEST(CaptionModel, GuidedAttentionIsMinusTheLogOfItsMassWithTheFiniteDifferencesGradient) {
  SmallCaptioner s;  // memory: the class token and 4 patches
  std::mt19937 gen(11);
  const Tensor images = random_images(2, gen);
  const TwoCaptions c;
  const Tensor &target_in = c.in, &lengths = c.lengths;
  const std::vector<caption::scenes::AttentionGuide> guides = {
      {0, 1, {1, 2}}, {0, 2, {4}}, {1, 0, {3}}, {1, 1, {0, 4}}};
  const float lambda = 0.7f;
  s.model->keep_attention_weights = true;
  auto run = [&](bool penalty, bool backward) {
    Arena arena;
    nn::Context ctx{true, &arena, nullptr};
    const Tensor logits = s.model->forward(ctx, images, target_in, lengths);
    double loss = guided_attention(s.model->loss_hooks(), guides, lambda, 1.f);
    if (penalty) loss += s.model->attention_penalty(0.3f, 1.f);
    if (backward) s.model->backward(ctx, ctx.alloc(logits.shape()));  // no caption loss
    return loss;
  };

  // The reference: each image's weights from an inference forward (no dropout in this model).
  double want = 0;
  {
    Arena arena;
    nn::Context ctx{false, &arena, nullptr};
    const std::vector<std::vector<int32_t>> tokens = {{5, 6}, {7}};
    for (int64_t b = 0; b < 2; ++b) {
      Tensor image({1, 1, 8, 8});
      std::copy_n(images.f32() + b * 64, 64, image.f32());
      const Tensor w = s.model->cross_attention(ctx, image, tokens[static_cast<size_t>(b)], true);
      for (const auto& g : guides) {
        if (g.row != b) continue;
        double mass = 0;
        for (const int32_t i : g.memory) mass += w.f32()[g.position * w.dim(1) + i];
        ASSERT_GT(mass, 0.0);
        want -= lambda * std::log(mass);
      }
    }
  }
  EXPECT_NEAR(run(false, false), want, 1e-5 * std::fabs(want));

  for (const bool penalty : {false, true}) {
    SCOPED_TRACE(penalty ? "with the penalty" : "alone");
    s.store.zero_grad();
    run(penalty, true);
    const Tensor grads = s.store.grads().clone();
    const auto [first, end] = s.model->encoder_params();
    int checked = 0;
    for (size_t i = 0; i < s.store.params().size(); ++i) {
      Parameter& p = s.store.params()[i];
      const bool cross = p.name.find("cross_attn.q.weight") != std::string::npos;
      if (!(cross || i == first)) continue;
      const std::vector<double> analytic = gradient_of(p, grads);
      test::FdOptions fd;
      fd.h = 1e-3;
      fd.atol = 1e-3;
      EXPECT_GRAD_OK(test::check_gradient(
          p.name, p.value, analytic, [&] { return run(penalty, false); }, fd));
      ++checked;
    }
    EXPECT_GE(checked, 2) << "the last cross-attention's queries and an encoder tensor";
  }
  // A guide outside the captions is an error, not a read past the weights.
  Arena arena;
  nn::Context ctx{true, &arena, nullptr};
  s.model->forward(ctx, images, target_in, lengths);
  EXPECT_THROW(guided_attention(s.model->loss_hooks(), {{1, 2, {0}}}, lambda, 1.f),
               Error);  // row 1 has 2
  EXPECT_THROW(guided_attention(s.model->loss_hooks(), {{0, 0, {5}}}, lambda, 1.f),
               Error);  // 5 memory rows
}

namespace {

// The logits the article loss reads, in double: W · the mean of each guide's memory rows of the
// model's own encode().
std::vector<std::vector<double>> cell_logits(
    SmallCaptioner& s, const Parameter& W, const Tensor& images,
    const std::vector<caption::scenes::AttentionGuide>& guides) {
  Arena arena;
  nn::Context ctx{false, &arena, nullptr};
  const Tensor memory = s.model->encode(ctx, images);  // [B, Tm, d]
  const int64_t Tm = memory.dim(1), d = memory.dim(2), V = W.shape[0];
  std::vector<std::vector<double>> out;
  for (const auto& g : guides) {
    std::vector<double> mean(static_cast<size_t>(d), 0.0), z;
    for (const int32_t i : g.memory)
      for (int64_t k = 0; k < d; ++k)
        mean[static_cast<size_t>(k)] +=
            memory.f32()[(g.row * Tm + i) * d + k] / static_cast<double>(g.memory.size());
    for (int64_t v = 0; v < V; ++v) {
      double dot = 0;
      for (int64_t k = 0; k < d; ++k)
        dot += W.value.f32()[v * d + k] * mean[static_cast<size_t>(k)];
      z.push_back(dot);
    }
    out.push_back(z);
  }
  return out;
}

// log softmax(z / tau)[i], in double.
double log_softmax_at(const std::vector<double>& z, size_t i, double tau = 1.0) {
  double sum = 0;
  for (const double x : z) sum += std::exp(x / tau);
  return z[i] / tau - std::log(sum);
}

}  // namespace

// The article loss: its value is λ · −log softmax(W · the mean of the guide's memory rows) at the
// guide's token, read against the model's own encode() and output matrix, and its gradient is the
// finite differences' in W and in the encoder, tied or not; a later forward drops it.
TEST(CaptionModel,
     ArticleLossIsTheOutputLayersCrossEntropyOnACellWithTheFiniteDifferencesGradient) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    SmallCaptioner s(true, tied);  // memory: the class token and 4 patches, 9 tokens
    std::mt19937 gen(12);
    const Tensor images = random_images(2, gen);
    const TwoCaptions c;
    const Tensor &target_in = c.in, &lengths = c.lengths;
    const std::vector<caption::scenes::AttentionGuide> guides = {
        {0, 1, {1, 2}, 5}, {0, 2, {4}, 8}, {1, 0, {0, 3, 4}, 7}, {1, 0, {3}, 4}};
    const float lambda = 0.6f;
    auto run = [&](bool backward) {
      Arena arena;
      nn::Context ctx{true, &arena, nullptr};
      const Tensor logits = s.model->forward(ctx, images, target_in, lengths);
      const double loss = article_loss(s.model->loss_hooks(), guides, lambda, 1.f);
      if (backward) s.model->backward(ctx, ctx.alloc(logits.shape()));  // no caption loss
      return loss;
    };

    const Parameter& W =
        *s.store.find(tied ? "decoder.embed_tokens.weight" : "output_projection.weight");
    double want = 0;
    const std::vector<std::vector<double>> z = cell_logits(s, W, images, guides);
    for (size_t j = 0; j < guides.size(); ++j)
      want -= lambda * log_softmax_at(z[j], static_cast<size_t>(guides[j].token));
    ASSERT_GT(want, 0.0);
    EXPECT_NEAR(run(false), want, 1e-5 * want);

    s.store.zero_grad();
    run(true);
    const Tensor grads = s.store.grads().clone();
    const auto [first, end] = s.model->encoder_params();
    int checked = 0;
    for (size_t i = 0; i < s.store.params().size(); ++i) {
      Parameter& p = s.store.params()[i];
      if (!(&p == &W || i == first || p.name == "norm.weight")) continue;
      const std::vector<double> analytic = gradient_of(p, grads);
      test::FdOptions fd;
      fd.h = 1e-3;
      fd.atol = 1e-3;
      EXPECT_GRAD_OK(test::check_gradient(
          p.name, p.value, analytic, [&] { return run(false); }, fd));
      ++checked;
    }
    EXPECT_EQ(checked, 3) << "the output matrix, the first encoder tensor and the final norm";

    // A forward after it starts afresh: with no loss, every gradient is zero.
    {
      Arena arena;
      nn::Context ctx{true, &arena, nullptr};
      s.model->forward(ctx, images, target_in, lengths);
      article_loss(s.model->loss_hooks(), guides, lambda, 1.f);
      s.store.zero_grad();
      const Tensor logits = s.model->forward(ctx, images, target_in, lengths);
      s.model->backward(ctx, ctx.alloc(logits.shape()));
      double most = 0;
      for (int64_t j = 0; j < s.store.grads().numel(); ++j)
        most = std::max(most, static_cast<double>(std::fabs(s.store.grads().f32()[j])));
      EXPECT_EQ(most, 0.0);
    }
    // A guide outside the batch, the vocabulary or the memory is an error.
    Arena arena;
    nn::Context ctx{true, &arena, nullptr};
    s.model->forward(ctx, images, target_in, lengths);
    EXPECT_THROW(article_loss(s.model->loss_hooks(), {{2, 0, {0}, 5}}, lambda, 1.f),
                 Error);  // 2 rows
    EXPECT_THROW(article_loss(s.model->loss_hooks(), {{0, 0, {0}, 9}}, lambda, 1.f),
                 Error);  // 9 tokens
    EXPECT_THROW(article_loss(s.model->loss_hooks(), {{0, 0, {5}, 5}}, lambda, 1.f),
                 Error);  // 5 memory rows
    EXPECT_THROW(article_loss(s.model->loss_hooks(), {{0, 0, {}, 5}}, lambda, 1.f),
                 Error);  // no cell
  }
}

// Distillation onto the article loss: with a teacher's logits per guide, each guide's term is
// (1 − α) · −log p[token] + α · τ² · KL(softmax(t/τ) ‖ softmax(z/τ) at the teacher's tokens), or,
// hard, α · −log p[the teacher's top token]; read against the model's own logits, with the finite
// differences' gradient. α = 0 is the plain loss, and a guide without the teacher's logits, a
// token outside the vocabulary or α outside [0, 1] is an error.
TEST(CaptionModel, DistilledArticleLossIsTheTeachersShareWithTheFiniteDifferencesGradient) {
  SmallCaptioner s(true, true);  // 9 tokens: the teacher's 3 classes are tokens 4, 6 and 8
  std::mt19937 gen(13);
  const Tensor images = random_images(2, gen);
  const TwoCaptions c;
  const std::vector<float> t = {2.f, -1.f, 0.5f, -0.3f, 0.2f, 1.7f, 3.f, 3.f, -2.f};  // 3 x 3
  std::vector<caption::scenes::AttentionGuide> guides = {{0, 1, {1, 2}, 4, t.data()},
                                                         {1, 0, {0, 3, 4}, 6, t.data() + 3},
                                                         {1, 0, {3}, 8, t.data() + 6}};
  const float lambda = 0.7f;
  const Parameter& W = *s.store.find("decoder.embed_tokens.weight");
  const std::vector<std::vector<double>> z = cell_logits(s, W, images, guides);
  for (const bool hard : {false, true}) {
    SCOPED_TRACE(hard ? "hard" : "soft");
    caption::scenes::ArticleTeacher teacher;
    teacher.tokens = {4, 6, 8};
    teacher.alpha = 0.4f;
    teacher.tau = 2.f;
    teacher.hard = hard;
    auto run = [&](bool backward, const caption::scenes::ArticleTeacher* with) {
      Arena arena;
      nn::Context ctx{true, &arena, nullptr};
      const Tensor logits = s.model->forward(ctx, images, c.in, c.lengths);
      const double loss = article_loss(s.model->loss_hooks(), guides, lambda, 1.f, with);
      if (backward) s.model->backward(ctx, ctx.alloc(logits.shape()));
      return loss;
    };
    double want = 0;
    const double a = teacher.alpha, tau = teacher.tau;
    for (size_t j = 0; j < guides.size(); ++j) {
      const float* tj = guides[j].teacher;
      want -= lambda * (1 - a) * log_softmax_at(z[j], static_cast<size_t>(guides[j].token));
      if (hard) {
        const size_t top = static_cast<size_t>(std::max_element(tj, tj + 3) - tj);  // first max
        want -= lambda * a * log_softmax_at(z[j], static_cast<size_t>(teacher.tokens[top]));
      } else {
        double sum = 0;
        for (int k = 0; k < 3; ++k) sum += std::exp(tj[k] / tau);
        for (size_t k = 0; k < 3; ++k) {
          const double q = std::exp(tj[k] / tau) / sum;
          want += lambda * a * tau * tau * q *
                  (std::log(q) - log_softmax_at(z[j], static_cast<size_t>(teacher.tokens[k]), tau));
        }
      }
    }
    EXPECT_NEAR(run(false, &teacher), want, 1e-5 * std::fabs(want));
    s.store.zero_grad();
    run(true, &teacher);
    const Tensor grads = s.store.grads().clone();
    const auto [first, end] = s.model->encoder_params();
    int checked = 0;
    for (size_t i = 0; i < s.store.params().size(); ++i) {
      Parameter& p = s.store.params()[i];
      if (!(&p == &W || i == first)) continue;
      test::FdOptions fd;
      fd.h = 1e-3;
      fd.atol = 1e-3;
      EXPECT_GRAD_OK(test::check_gradient(
          p.name, p.value, gradient_of(p, grads), [&] { return run(false, &teacher); }, fd));
      ++checked;
    }
    EXPECT_EQ(checked, 2) << "the output matrix and the first encoder tensor";
    // α = 0: the plain loss.
    teacher.alpha = 0.f;
    EXPECT_NEAR(run(false, &teacher), run(false, nullptr), 1e-5 * run(false, nullptr));
  }
  Arena arena;
  nn::Context ctx{true, &arena, nullptr};
  s.model->forward(ctx, images, c.in, c.lengths);
  caption::scenes::ArticleTeacher teacher;
  teacher.tokens = {4, 6, 8};
  guides[1].teacher = nullptr;
  EXPECT_THROW(article_loss(s.model->loss_hooks(), guides, lambda, 1.f, &teacher),
               Error);  // no logits
  guides[1].teacher = t.data() + 3;
  teacher.tokens = {4, 6, 9};
  EXPECT_THROW(article_loss(s.model->loss_hooks(), guides, lambda, 1.f, &teacher),
               Error);  // 9 tokens
  teacher.tokens = {4, 6, 8};
  teacher.alpha = 1.5f;
  EXPECT_THROW(article_loss(s.model->loss_hooks(), guides, lambda, 1.f, &teacher), Error);
}

namespace {

// Each word of a caption one piece ("▁bag"), so that a noun's row is its word's index.
class WordVocabulary : public Vocabulary {
 public:
  explicit WordVocabulary(std::vector<std::string> words) : words_(std::move(words)) {}
  int size() const override { return static_cast<int>(words_.size()) + 4; }
  std::vector<int> encode(const std::string& text) const override {
    std::vector<int> ids;
    std::istringstream in(text);
    for (std::string w; in >> w;) {
      const auto at = std::find(words_.begin(), words_.end(), w);
      ids.push_back(at == words_.end() ? kUnk : static_cast<int>(at - words_.begin()) + 4);
    }
    return ids;
  }
  std::string decode(const std::vector<int>& ids) const override {
    std::string text;
    for (int id : ids)
      if (id >= 4) text += (text.empty() ? "" : " ") + words_[static_cast<size_t>(id - 4)];
    return text;
  }
  std::vector<std::string> pieces(const std::vector<int>& ids) const override {
    std::vector<std::string> out;
    for (int id : ids)
      out.push_back("\xe2\x96\x81" + (id >= 4 ? words_[static_cast<size_t>(id - 4)] : "?"));
    return out;
  }
  const std::string& bytes() const override { return bytes_; }

 private:
  std::vector<std::string> words_;
  std::string bytes_;
};

}  // namespace

// caption-eval's figures and their breakdown, from hand-made captions and attention rows: exact
// scene match, the articles, the relations by kind, and attention-in-cell by the noun's place.
TEST(CaptionScores, BreakExactMatchAndAttentionDown) {
  caption::CaptionConfig config;
  config.encoder.image_height = config.encoder.image_width = 84;
  config.encoder.patch_size = 14;  // a 6x6 grid; a 42-pixel cell holds 3x3 patches
  config.memory_class_token = false;
  const WordVocabulary vocabulary({"a", "bag", "ankle", "boot", "coat", "dress", "to", "the",
                                   "left", "right", "of", "above", "below", "and", "it"});
  // bag | ankle boot
  // coat | (empty), and in the last scene a dress there
  datasets::CaptionSet set;
  const std::vector<std::string> captions = {
      "a bag to the left of a ankle boot and a coat below it",   // exact
      "a bag to the right of a ankle boot and a coat below it",  // a false left/right
      "a coat above a bag",                                      // the boot left out, a false above
      "a bag to the left of a ankle boot and a dress below it and a coat to the left of it",
  };
  std::vector<caption::CaptionResult> results;
  for (size_t i = 0; i < captions.size(); ++i) {
    datasets::CaptionedImage image;
    image.captions = {captions[0]};
    image.objects = {vitk::testing::scene_object("bag", 0, 0),
                     vitk::testing::scene_object("ankle boot", 0, 1),
                     vitk::testing::scene_object("coat", 1, 0)};
    if (i == 3) image.objects.push_back(vitk::testing::scene_object("dress", 1, 1));
    set.images.push_back(image);
    caption::CaptionResult r;
    r.image = static_cast<int64_t>(i);
    r.read = true;
    r.texts = {captions[i]};
    const std::vector<int> ids = vocabulary.encode(captions[i]);
    r.hypotheses.push_back({std::vector<int32_t>(ids.begin(), ids.end())});
    // Every row looks at the patch in the top left corner, unless told otherwise below.
    r.attention = Tensor({static_cast<int64_t>(ids.size()) + 1, 36});
    for (int64_t t = 0; t < r.attention.dim(0); ++t) r.attention.f32()[t * 36] = 1.f;
    results.push_back(std::move(r));
  }
  auto look = [&](size_t image, int64_t row, int64_t patch) {
    float* w = results[image].attention.f32() + row * 36;
    std::fill(w, w + 36, 0.f);
    w[patch] = 1.f;
  };
  // The nouns' rows (their last word's): bag 1, boot 8, coat 11. Patch 0 is in the bag's cell,
  // patch 3 (row 0, column 3) in the boot's, patch 18 (row 3, column 0) in the coat's.
  look(0, 8, 3);
  look(0, 11, 18);
  look(1, 1, 3);  // the first noun, the bag, looks at the boot
  look(1, 8, 3);
  look(1, 11, 18);
  look(2, 1, 18);  // "a coat above a bag": the coat's row 1, the bag's 4 (left at the corner)
  // The four-article caption: boot 8, dress 11 (patch 21, row 3, column 3), and the coat's row 16
  // left at the corner, in the bag's cell.
  look(3, 8, 3);
  look(3, 11, 21);
  const caption::CaptionScores s = caption::score_captions(config, vocabulary, set, results);
  EXPECT_EQ(s.images, 4);
  EXPECT_EQ(s.scenes, 4);
  EXPECT_EQ(s.exact, 2);
  EXPECT_EQ(s.articles, 3);
  EXPECT_EQ(s.horizontal, 4);
  EXPECT_EQ(s.horizontal_true, 3);
  EXPECT_EQ(s.vertical, 4);
  EXPECT_EQ(s.vertical_true, 3);
  EXPECT_EQ(s.nouns, 12);
  EXPECT_EQ(s.in_cell, 10);
  EXPECT_EQ(s.nouns_at, (std::array<int64_t, 4>{4, 4, 3, 1}));
  EXPECT_EQ(s.in_cell_at, (std::array<int64_t, 4>{3, 4, 3, 0}));
  EXPECT_DOUBLE_EQ(s.exact_percent(), 50.0);
  EXPECT_NEAR(s.in_cell_percent(), 100.0 * 10 / 12, 1e-9);
  EXPECT_EQ(s.bleu.hyp_len, 14 + 14 + 5 + 22);  // every caption scored, word by word
}

// What attention-in-cell and --guided-attention read: the token that writes each article noun
// (the first piece of its last word) with the article it names, and the memory rows of a cell.
TEST(CaptionScores, NamedCellsGiveEachNounsTokenAndArticleAndTheCellsPatches) {
  const WordVocabulary vocabulary(
      {"a", "bag", "ankle", "boot", "coat", "to", "the", "left", "of", "below", "and", "it"});
  const std::vector<datasets::SceneObject> objects = {
      vitk::testing::scene_object("bag", 0, 0), vitk::testing::scene_object("ankle boot", 0, 1)};
  const std::string caption = "a bag to the left of a ankle boot and a coat below it";
  const std::vector<int> ids = vocabulary.encode(caption);
  const std::vector<int32_t> tokens(ids.begin(), ids.end());
  const std::vector<caption::NamedCell> named =
      caption::named_cells(vocabulary, tokens, caption, objects);
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].object, &objects[0]);
  EXPECT_EQ(named[0].token, 1);  // "bag"
  EXPECT_EQ(named[1].object, &objects[1]);
  EXPECT_EQ(named[1].token, 8);         // "boot" of "ankle boot"
  EXPECT_EQ(named[2].object, nullptr);  // no coat in the scene
  EXPECT_EQ(named[2].token, 11);
  // Cut after "ankle": the boot has no token.
  const std::vector<int32_t> cut(tokens.begin(), tokens.begin() + 8);
  const std::vector<caption::NamedCell> short_named =
      caption::named_cells(vocabulary, cut, caption, objects);
  ASSERT_EQ(short_named.size(), 3u);
  EXPECT_EQ(short_named[0].token, 1);
  EXPECT_EQ(short_named[1].token, -1);

  caption::CaptionConfig config;
  config.encoder.image_height = config.encoder.image_width = 84;
  config.encoder.patch_size = 14;  // 6x6 patches; a 42-pixel cell holds 3x3 of them
  config.memory_class_token = false;
  EXPECT_EQ(caption::patches_in(config, objects[1].cell),
            (std::vector<int32_t>{3, 4, 5, 9, 10, 11, 15, 16, 17}));
  config.memory_class_token = true;  // row 0 is the class token
  EXPECT_EQ(caption::patches_in(config, {0, 28, 28, 28}), (std::vector<int32_t>{13, 14, 19, 20}));
}

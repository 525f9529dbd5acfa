// The values behind the pictures: attention rollout (vit/maps), the maps of a tiny ViT, the
// weights the fused attention kernel keeps, position-embedding similarity, attention masks
// (common/nn/mask) and translation alignments (common/seq2seq/alignment), each checked against
// its definition computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <opencv2/core.hpp>

#include "common/error.h"
#include "common/nn/mask.h"
#include "common/seq2seq/alignment.h"
#include "op_test_util.h"
#include "vit/maps.h"
#include "vit/pictures.h"

namespace {

using namespace vitk;

Tensor identity(int64_t T) {
  Tensor m({T, T});
  for (int64_t i = 0; i < T; ++i) m.f32()[i * T + i] = 1.f;
  return m;
}

// A random row-stochastic [T, T] matrix (what a softmax gives).
Tensor random_attention(int64_t T, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  Tensor m({T, T});
  for (int64_t i = 0; i < T; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < T; ++j) sum += m.f32()[i * T + j] = std::exp(4.f * u(gen));
    for (int64_t j = 0; j < T; ++j) m.f32()[i * T + j] /= static_cast<float>(sum);
  }
  return m;
}

double row_sum(const Tensor& m, int64_t i) {
  double s = 0;
  for (int64_t j = 0; j < m.dim(1); ++j) s += m.f32()[i * m.dim(1) + j];
  return s;
}

vit::VitConfig tiny_vit(const std::string& pool) {
  vit::VitConfig c;
  c.image_height = c.image_width = 16;
  c.patch_size = 4;  // a 4x4 grid: 16 patches, 17 tokens
  c.channels = 1;
  c.num_classes = 3;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.layers = 3;
  c.pool = pool;
  c.preprocess.mean = {0.5f};
  c.preprocess.std = {0.5f};
  return c;
}

// ---- Rollout ----

TEST(AttentionMaps, RolloutOfIdentityAttentionKeepsEveryTokenToItself) {
  // Every token attending only to itself, plus the residual's identity: A' = I in every layer, so
  // R = I. What the classifier reads is then uniform over the patches: all 0 from the class
  // token (its row rests entirely on itself), 1/N each from the mean of the N patch rows.
  const vit::VitConfig token = tiny_vit("token"), avg = tiny_vit("avg");
  const int64_t T = token.tokens(), N = token.patches();
  const Tensor r = vit::attention_rollout({identity(T), identity(T), identity(T)});
  EXPECT_TRUE(test::bitwise_equal(r, identity(T)));
  const Tensor from_cls = vit::patch_map(r, token), from_mean = vit::patch_map(r, avg);
  ASSERT_EQ(from_cls.shape(), (Shape{4, 4}));
  for (int64_t p = 0; p < N; ++p) {
    EXPECT_EQ(from_cls.f32()[p], 0.f);
    EXPECT_NEAR(from_mean.f32()[p], 1.0 / N, 1e-7);
  }
  EXPECT_EQ(vit::class_token_share(r, token), 1.0);
  EXPECT_EQ(vit::class_token_share(r, avg), 0.0);
}

TEST(AttentionMaps, RolloutOfUniformAttentionFollowsItsClosedForm) {
  // Every query spreading evenly, A = U (all 1/T): A' = (U + I)/2, and since U·U = U,
  // R = (A')^L = 0.5^L·I + (1 − 0.5^L)·U.
  const int64_t T = 17, L = 3;
  Tensor u({T, T});
  u.fill(1.f / T);
  const Tensor r = vit::attention_rollout(std::vector<Tensor>(L, u));
  const double keep = std::pow(0.5, L), spread = (1 - keep) / T;
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j < T; ++j)
      EXPECT_NEAR(r.f32()[i * T + j], (i == j ? keep : 0.0) + spread, 1e-6) << i << " " << j;
    EXPECT_NEAR(row_sum(r, i), 1.0, 1e-6);
  }
  const Tensor map = vit::patch_map(r, tiny_vit("token"));
  for (int64_t p = 0; p < map.numel(); ++p) EXPECT_NEAR(map.f32()[p], spread, 1e-6);
}

TEST(AttentionMaps, RolloutIsTheProductOfTheResidualMatrices) {
  std::mt19937 gen(3);
  const int64_t T = 6;
  std::vector<Tensor> layers;
  for (int l = 0; l < 4; ++l) layers.push_back(random_attention(T, gen));
  // R = A'_4 A'_3 A'_2 A'_1 with A' = (A + I)/2 (rows already sum to 1), by plain loops.
  std::vector<double> want(T * T, 0.0);
  for (int64_t i = 0; i < T; ++i) want[i * T + i] = 1;
  for (const Tensor& a : layers) {
    std::vector<double> next(T * T, 0.0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        for (int64_t k = 0; k < T; ++k)
          next[i * T + j] += 0.5 * (a.f32()[i * T + k] + (i == k)) * want[k * T + j];
    want = next;
  }
  const Tensor r = vit::attention_rollout(layers);
  EXPECT_TRUE(test::all_close(r, want, 1e-6, 1e-6));
  for (int64_t i = 0; i < T; ++i) EXPECT_NEAR(row_sum(r, i), 1.0, 1e-6);
  // Rows that do not sum to 1 (heads fused by their maximum) are renormalised first.
  std::vector<Tensor> doubled;
  for (const Tensor& a : layers) {
    Tensor d = a.clone();
    for (int64_t k = 0; k < d.numel(); ++k) d.f32()[k] *= 3.f;
    doubled.push_back(d);
  }
  const Tensor r3 = vit::attention_rollout(doubled);
  for (int64_t i = 0; i < T; ++i) EXPECT_NEAR(row_sum(r3, i), 1.0, 1e-6);
}

TEST(AttentionMaps, HeadsFuseByMeanOrMaximum) {
  const Tensor w = test::from_vector({2, 2, 2}, {0.2f, 0.8f, 0.5f, 0.5f, 0.6f, 0.4f, 0.1f, 0.9f});
  const Tensor mean = vit::fuse_heads(w, vit::HeadFusion::mean);
  const Tensor max = vit::fuse_heads(w, vit::HeadFusion::max);
  EXPECT_TRUE(test::all_close(mean, {0.4, 0.6, 0.3, 0.7}, 1e-7, 0));
  EXPECT_TRUE(test::all_close(max, {0.6, 0.8, 0.5, 0.9}, 1e-7, 0));
  EXPECT_EQ(vit::parse_head_fusion("max"), vit::HeadFusion::max);
  EXPECT_THROW(vit::parse_head_fusion("median"), UsageError);
}

// ---- A tiny ViT ----

struct TinyVit {
  vit::VitConfig config;
  ParamStore params;
  std::unique_ptr<vit::VisionTransformer> model;
  explicit TinyVit(const std::string& pool) : config(tiny_vit(pool)) {
    model = std::make_unique<vit::VisionTransformer>(params, config);
    params.finalize();
    ops::Rng rng(11);
    model->init(rng);
    // Larger attention projections than timm's 0.02 so that the weights are far from uniform.
    for (Parameter& p : params.params())
      if (p.name.find("attn.qkv.weight") != std::string::npos)
        for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] *= 40.f;
  }
};

TEST(AttentionMaps, ImageAttentionOfATinyVitIsTheRolloutOfItsKeptWeights) {
  for (const std::string pool : {"token", "avg"}) {
    SCOPED_TRACE(pool);
    TinyVit m(pool);
    std::mt19937 gen(5);
    const Tensor images = test::random_tensor({2, 1, 16, 16}, gen);
    Arena arena;
    nn::Context ctx;
    ctx.arena = &arena;
    m.model->forward(ctx, images);
    EXPECT_THROW(vit::image_attention(*m.model, 1, vit::HeadFusion::mean), Error);  // not kept
    vit::keep_attention(*m.model, true);
    m.model->forward(ctx, images);
    const vit::ImageAttention a = vit::image_attention(*m.model, 1, vit::HeadFusion::mean);
    EXPECT_EQ(a.layers, 3);
    // The same from the kept weights of image 1, by the definitions.
    std::vector<Tensor> fused;
    for (auto& block : m.model->blocks()) {
      const Tensor& w = block.attention().weights();  // [2, H, T, T]
      ASSERT_EQ(w.shape(), (Shape{2, 2, 17, 17}));
      const Tensor one = w.rows(1, 2).reshaped({2, 17, 17});
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 17; ++i)
          EXPECT_NEAR(row_sum(one.rows(h, h + 1).reshaped({17, 17}), i), 1.0, 1e-5);
      fused.push_back(vit::fuse_heads(one, vit::HeadFusion::mean));
    }
    const Tensor r = vit::attention_rollout(fused);
    EXPECT_TRUE(test::bitwise_equal(a.rollout, vit::patch_map(r, m.config)));
    // What the picture shows and the class token's share make up the whole row.
    double total = a.rollout_class_share;
    for (int64_t p = 0; p < a.rollout.numel(); ++p) total += a.rollout.f32()[p];
    EXPECT_NEAR(total, 1.0, 1e-5);
    ASSERT_EQ(a.last_heads.size(), 2u);
    // The heads of image 0 differ from those of image 1: the row is picked, not mixed.
    const vit::ImageAttention a0 = vit::image_attention(*m.model, 0, vit::HeadFusion::mean);
    EXPECT_FALSE(test::bitwise_equal(a0.last_heads[0], a.last_heads[0]));
    EXPECT_THROW(vit::image_attention(*m.model, 2, vit::HeadFusion::mean), Error);

    // The picture: the 16x16 input upscaled to 224 (14x), the rollout beside it, the heads below.
    const cv::Mat image = vit::input_image(images.f32() + 256, m.config);
    EXPECT_EQ(image.cols, 224);
    EXPECT_EQ(image.rows, 224);
    const cv::Mat picture =
        vit::attention_picture(a, images.f32() + 256, m.config, vit::HeadFusion::mean, {"t"});
    EXPECT_GT(picture.cols, 2 * 224);
    EXPECT_GT(picture.rows, 224 + 96);
  }
}

TEST(AttentionMaps, InputImageUndoesTheNormalisation) {
  const vit::VitConfig c = tiny_vit("avg");  // mean 0.5, std 0.5
  std::vector<float> input(256, -1.f);       // black
  input[0] = 1.f;                            // white
  input[17] = 0.f;                           // mid grey
  const cv::Mat image = vit::input_image(input.data(), c, 16);
  ASSERT_EQ(image.size(), cv::Size(16, 16));
  EXPECT_EQ(image.at<cv::Vec3b>(0, 0), cv::Vec3b(255, 255, 255));
  EXPECT_EQ(image.at<cv::Vec3b>(1, 1), cv::Vec3b(128, 128, 128));  // 0.5 · 255 = 127.5
  EXPECT_EQ(image.at<cv::Vec3b>(0, 1), cv::Vec3b(0, 0, 0));
}

TEST(AttentionMaps, FusedKernelKeepsTheWeightsTheMaskedPathComputes) {
  // d_head 64: without a mask the forward takes the fused AVX-512 kernel where the build and CPU
  // have it; a mask that hides nothing forces the plain path. Both must keep the same weights.
  ParamStore params;
  nn::LayerConfig lc;
  lc.d_model = 128;
  lc.heads = 2;
  lc.d_ff = 64;
  lc.pre_norm = true;
  nn::EncoderLayer layer(params, "layer", lc);
  params.finalize();
  nn::init_defaults(params);
  std::mt19937 gen(9);
  for (Parameter& p : params.params())
    if (p.shape.size() == 2) p.value.copy_from(test::random_tensor(p.shape, gen, -0.3f, 0.3f));
  const int64_t B = 2, T = 7;
  const Tensor x = test::random_tensor({B, T, 128}, gen);
  layer.attention().keep_weights = true;
  Arena arena;
  nn::Context ctx;
  ctx.arena = &arena;
  layer.forward(ctx, x, nn::AttentionMask{});
  const Tensor fused = layer.attention().weights().clone();
  layer.forward(ctx, x, nn::AttentionMask{test::ids_tensor({7, 7}), false});
  const Tensor plain = layer.attention().weights().clone();
  ASSERT_EQ(fused.shape(), (Shape{B, 2, T, T}));
  EXPECT_TRUE(test::all_close(fused, test::to_double(plain), 1e-5, 1e-5));
  for (int64_t r = 0; r < B * 2 * T; ++r) {
    double s = 0;
    for (int64_t j = 0; j < T; ++j) s += fused.f32()[r * T + j];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

TEST(AttentionMaps, PositionSimilarityIsTheCosineOfTheEmbeddings) {
  const vit::VitConfig c = tiny_vit("token");
  std::mt19937 gen(2);
  Tensor pos = test::random_tensor({1, 17, 16}, gen);
  for (int64_t k = 0; k < 16; ++k) pos.f32()[(1 + 5) * 16 + k] = -2.f * pos.f32()[(1 + 3) * 16 + k];
  const Tensor s = vit::position_similarity(pos, c);
  ASSERT_EQ(s.shape(), (Shape{16, 16}));
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_NEAR(s.f32()[i * 16 + i], 1.0, 1e-6);
    for (int64_t j = 0; j < 16; ++j) EXPECT_EQ(s.f32()[i * 16 + j], s.f32()[j * 16 + i]);
  }
  EXPECT_NEAR(s.f32()[3 * 16 + 5], -1.0, 1e-6);  // opposite directions
  // One pair by hand; the class token's row (0) is not a patch.
  double dot = 0, a = 0, b = 0;
  for (int64_t k = 0; k < 16; ++k) {
    const double u = pos.f32()[(1 + 2) * 16 + k], v = pos.f32()[(1 + 9) * 16 + k];
    dot += u * v, a += u * u, b += v * v;
  }
  EXPECT_NEAR(s.f32()[2 * 16 + 9], dot / std::sqrt(a * b), 1e-6);
  const cv::Mat picture = vit::position_similarity_picture(s, c, {"title"});
  EXPECT_GT(picture.cols, 4 * 4 * 8);
}

// ---- Masks ----

TEST(AttentionMaps, CausalMaskIsLowerTriangularAndPaddingHidesKeys) {
  const int64_t T = 8;
  nn::AttentionMask causal{Tensor(), true};
  const Tensor m = nn::mask_matrix(causal, 0, T, T);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) EXPECT_EQ(m.f32()[i * T + j], j <= i ? 1.f : 0.f);
  nn::AttentionMask both{test::ids_tensor({3, 6}), true};
  const Tensor p = nn::mask_matrix(both, 1, T, T);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      EXPECT_EQ(p.f32()[i * T + j], j <= i && j < 6 ? 1.f : 0.f) << i << " " << j;
  EXPECT_THROW(nn::mask_matrix(both, 2, T, T), Error);

  // The layer's own weights are zero exactly where the matrix says hidden.
  ParamStore params;
  nn::AttentionConfig ac;
  ac.d_model = 8;
  ac.heads = 2;
  nn::MultiHeadAttention attention(params, "a", ac);
  params.finalize();
  std::mt19937 gen(4);
  for (Parameter& q : params.params()) q.value.copy_from(test::random_tensor(q.shape, gen));
  attention.keep_weights = true;
  Arena arena;
  nn::Context ctx;
  ctx.arena = &arena;
  attention.forward(ctx, test::random_tensor({2, T, 8}, gen), Tensor(), both);
  const Tensor& w = attention.weights();  // [2, 2, T, T]
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        EXPECT_EQ(w.f32()[((1 * 2 + h) * T + i) * T + j] > 0.f, p.f32()[i * T + j] > 0.f);
}

// ---- Translation alignment ----

struct TinyTranslator {
  ParamStore params;
  std::unique_ptr<seq2seq::Transformer> model;
  TinyTranslator() {
    seq2seq::TransformerConfig c;
    c.vocab_size = 12;
    c.d_model = 16;
    c.heads = 2;
    c.d_ff = 32;
    c.layers = 1;
    c.decoder_layers = 2;
    c.dropout = 0;
    c.max_length = 32;
    model = std::make_unique<seq2seq::Transformer>(params, c);
    params.finalize();
    ops::Rng rng(8);
    model->init(rng);
  }
};

TEST(Alignment, RowsSumToOneAndMatchWhatIncrementalDecodingAttended) {
  TinyTranslator t;
  const std::vector<int> source = {5, 6, 7, 9, seq2seq::kEosId};
  const std::vector<int32_t> target = {4, 8, 10};
  const int64_t Ts = 5, rows = 4, H = 2;
  for (int head : {-1, 0, 1}) {
    SCOPED_TRACE(head);
    seq2seq::AlignmentOptions o;
    o.head = head;  // the last layer
    const Tensor a = seq2seq::cross_attention(*t.model, source, target, true, o);
    ASSERT_EQ(a.shape(), (Shape{rows, Ts}));
    for (int64_t i = 0; i < rows; ++i) EXPECT_NEAR(row_sum(a, i), 1.0, 1e-5);

    // Decode step by step on the cached decoder, as search does, and keep each step's weights.
    Tensor src({1, Ts}, DType::i32), len({1}, DType::i32);
    for (int64_t j = 0; j < Ts; ++j) src.i32()[j] = source[j];
    len.i32()[0] = static_cast<int32_t>(Ts);
    Arena arena;
    nn::Context ctx;
    ctx.arena = &arena;
    nn::Decoder::State state;
    const Tensor memory = t.model->encode(ctx, src, len);
    t.model->start(ctx, memory, len, rows, state);
    nn::MultiHeadAttention& cross = t.model->decoder().layers()[1].cross_attention();
    cross.keep_weights = true;
    const std::vector<int32_t> fed = {seq2seq::kBosId, 4, 8, 10};
    for (int64_t step = 0; step < rows; ++step) {
      Tensor token({1}, DType::i32);
      token.i32()[0] = fed[step];
      t.model->step(ctx, token, state);
      const Tensor& w = cross.weights();  // [1, H, 1, Ts]
      ASSERT_EQ(w.shape(), (Shape{1, H, 1, Ts}));
      for (int64_t j = 0; j < Ts; ++j) {
        const double want =
            head < 0 ? 0.5 * (w.f32()[j] + w.f32()[Ts + j]) : w.f32()[head * Ts + j];
        EXPECT_NEAR(a.f32()[step * Ts + j], want, 2e-5) << "row " << step << " col " << j;
      }
    }
    cross.keep_weights = false;
  }
  // The alignment leaves keep_weights as it found it.
  EXPECT_FALSE(t.model->decoder().layers()[1].cross_attention().keep_weights);
  // Without the EOS row (a hypothesis cut by the length limit).
  const Tensor cut = seq2seq::cross_attention(*t.model, source, target, false, {});
  EXPECT_EQ(cut.shape(), (Shape{3, Ts}));
}

TEST(Alignment, LayerAndHeadMustExist) {
  TinyTranslator t;
  seq2seq::AlignmentOptions o;
  o.layer = 2;
  EXPECT_THROW(seq2seq::cross_attention(*t.model, {5, 3}, {4}, true, o), UsageError);
  o.layer = 0;
  o.head = 2;
  EXPECT_THROW(seq2seq::describe(*t.model, o), UsageError);
  o.head = 1;
  EXPECT_EQ(seq2seq::describe(*t.model, o), "decoder layer 0 of 2, head 1 of 2");
  EXPECT_EQ(seq2seq::describe(*t.model, {}), "decoder layer 1 of 2 (the last), mean of 2 heads");
  const Tensor first = seq2seq::cross_attention(*t.model, {5, 6, 3}, {4}, true, o);
  EXPECT_EQ(first.shape(), (Shape{2, 3}));
}

}  // namespace

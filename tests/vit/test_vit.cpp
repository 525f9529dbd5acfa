// The Vision Transformer (vit/vit.h): patch extraction against a naive loop, timm's parameter
// names, central finite differences of L = Σ w·logits w.r.t. the images and every parameter (both
// pools, rectangular images, with and without dropout and stochastic depth), configuration and
// shape errors, the statistics of init(), and an eval forward that is deterministic and does not
// depend on the rest of the batch; the convolutional stem: window extraction against its
// definition, folding as its adjoint, names, finite differences, init, configuration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "common/optim/optim.h"
#include "util/op_test_util.h"
#include "util/test_util.h"
#include "vit/vit.h"

using namespace vitk;
using namespace vitk::test;
using vit::VisionTransformer;
using vit::VitConfig;

namespace {

// A model small enough for finite differences: 2 layers, d 8, a 3×2 or 2×3 patch grid.
VitConfig tiny_config(const std::string& pool, int64_t channels, int64_t height, int64_t width,
                      int64_t patch) {
  VitConfig c;
  c.image_height = height;
  c.image_width = width;
  c.patch_size = patch;
  c.channels = channels;
  c.num_classes = 3;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.layers = 2;
  c.pool = pool;
  c.preprocess.mean.assign(static_cast<size_t>(channels), 0.5f);
  c.preprocess.std.assign(static_cast<size_t>(channels), 0.25f);
  return c;
}

std::vector<double> naive_patches(const Tensor& images, int64_t P) {
  const int64_t B = images.dim(0), C = images.dim(1), H = images.dim(2), W = images.dim(3);
  const int64_t Hp = H / P, Wp = W / P;
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t gy = 0; gy < Hp; ++gy)
      for (int64_t gx = 0; gx < Wp; ++gx)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < P; ++i)
            for (int64_t j = 0; j < P; ++j)
              out.push_back(images.f32()[((b * C + c) * H + gy * P + i) * W + gx * P + j]);
  return out;
}

// ---- Patches ----

struct PatchCase {
  int64_t B, C, H, W, P;
};

// For readable test names under ctest (gtest would print the bytes).
void PrintTo(const PatchCase& k, std::ostream* os) {
  *os << "B " << k.B << ", C " << k.C << ", " << k.H << "x" << k.W << ", P " << k.P;
}

class PatchTest : public ::testing::TestWithParam<PatchCase> {};

TEST_P(PatchTest, ExtractMatchesANaiveLoopAndFoldInvertsIt) {
  const PatchCase k = GetParam();
  std::mt19937 gen(1);
  Tensor images = random_tensor({k.B, k.C, k.H, k.W}, gen);
  const int64_t N = (k.H / k.P) * (k.W / k.P);
  Tensor patches = garbage_tensor({k.B, N, k.C * k.P * k.P});
  vit::extract_patches(images, k.P, patches);
  EXPECT_TRUE(all_close(patches, naive_patches(images, k.P), 0, 0));
  Tensor back = garbage_tensor(images.shape());
  vit::fold_patches(patches, k.P, back);
  EXPECT_TRUE(bitwise_equal(back, images));
}

INSTANTIATE_TEST_SUITE_P(Shapes, PatchTest,
                         ::testing::Values(PatchCase{2, 1, 6, 10, 2}, PatchCase{3, 3, 8, 4, 4},
                                           PatchCase{1, 3, 6, 9, 3}, PatchCase{2, 1, 5, 5, 1},
                                           PatchCase{1, 3, 4, 4, 4}),
                         [](const auto& p) {
                           const PatchCase& k = p.param;
                           return "C" + std::to_string(k.C) + "_" + std::to_string(k.H) + "x" +
                                  std::to_string(k.W) + "_P" + std::to_string(k.P);
                         });

TEST(PatchErrorsTest, ShapesThatDoNotFitThrow) {
  Tensor images({1, 3, 8, 6});
  Tensor wrong({1, 6, 48});  // P = 4 would give [1, 2·1, 48], and 4 does not divide 6
  EXPECT_THROW(vit::extract_patches(images, 4, wrong), Error);
  Tensor patches({1, 12, 12});  // P = 2: 4·3 patches of 3·2·2
  EXPECT_NO_THROW(vit::extract_patches(images, 2, patches));
  Tensor bad({1, 12, 13});
  EXPECT_THROW(vit::extract_patches(images, 2, bad), Error);
  EXPECT_THROW(vit::fold_patches(bad, 2, images), Error);
  Tensor rank3({3, 8, 6});
  EXPECT_THROW(vit::extract_patches(rank3, 2, patches), Error);
}

// ---- Names ----

TEST(VitNamesTest, TimmNamesShapesAndDecay) {
  for (const std::string pool : {"token", "avg"}) {
    VitConfig c = tiny_config(pool, 3, 6, 4, 2);
    c.layers = 1;
    ParamStore store;
    VisionTransformer model(store, c);
    const std::string b = "blocks.0.", last = pool == "token" ? "norm" : "fc_norm";
    EXPECT_EQ(names_of(store), (std::vector<std::string>{"cls_token",
                                                         "pos_embed",
                                                         "patch_embed.proj.weight",
                                                         "patch_embed.proj.bias",
                                                         b + "norm1.weight",
                                                         b + "norm1.bias",
                                                         b + "attn.qkv.weight",
                                                         b + "attn.qkv.bias",
                                                         b + "attn.proj.weight",
                                                         b + "attn.proj.bias",
                                                         b + "norm2.weight",
                                                         b + "norm2.bias",
                                                         b + "mlp.fc1.weight",
                                                         b + "mlp.fc1.bias",
                                                         b + "mlp.fc2.weight",
                                                         b + "mlp.fc2.bias",
                                                         last + ".weight",
                                                         last + ".bias",
                                                         "head.weight",
                                                         "head.bias"}))
        << pool;
    EXPECT_EQ(store.get("cls_token").shape, (Shape{1, 1, 8}));
    EXPECT_EQ(store.get("pos_embed").shape, (Shape{1, 7, 8}));  // 3×2 patches + class token
    EXPECT_EQ(store.get("patch_embed.proj.weight").shape, (Shape{8, 3, 2, 2}));
    EXPECT_EQ(store.get("head.weight").shape, (Shape{3, 8}));
    for (const auto& p : store.params()) {
      const bool decays = p.shape.size() >= 2 && p.name != "pos_embed" && p.name != "cls_token";
      EXPECT_EQ(p.decay, decays) << p.name;
    }
    EXPECT_EQ(model.blocks().size(), 1u);
  }
}

// ---- Gradients ----

struct GradientRun {
  uint64_t seed = 7;    // generator state restarted for every evaluation: the same masks
  bool nonzero = true;  // every parameter must get some gradient
  FdOptions options = {};
};

// Central finite differences of L = Σ w·logits w.r.t. the images and every parameter.
void expect_gradients(VisionTransformer& model, ParamStore& store, Tensor& images,
                      const GradientRun& run) {
  std::mt19937 gen(99);
  Arena arena;
  ops::Rng rng(run.seed);
  nn::Context ctx{true, &arena, &rng};
  store.zero_grad();
  const Tensor logits = model.forward(ctx, images);
  const Tensor w = random_tensor(logits.shape(), gen);  // dL/dlogits
  Tensor dimages;
  model.backward(ctx, w, &dimages);
  ASSERT_EQ(dimages.shape(), images.shape());

  Arena fd_arena;
  ops::Rng fd_rng;
  auto loss = [&]() {
    fd_arena.reset();
    fd_rng.set_state(run.seed, 0);
    nn::Context fctx{true, &fd_arena, &fd_rng};
    return weighted_sum(model.forward(fctx, images), w);
  };
  EXPECT_GRAD_OK(check_gradient("images", images, dimages.clone(), loss, run.options));
  for (auto& p : store.params()) {
    const Tensor analytic = p.grad.clone();
    if (run.nonzero) {
      EXPECT_GT(ops::l2_norm(analytic), 0.0) << p.name << " gets no gradient";
    }
    EXPECT_GRAD_OK(check_gradient(p.name, p.value, analytic, loss, run.options));
  }
}

class VitGradientTest : public ::testing::TestWithParam<const char*> {};  // pool

// Token pooling on 3-channel 6×4 images (3×2 patches of 2), average pooling on 1-channel 4×6.
VitConfig gradient_config(const std::string& pool) {
  return pool == "token" ? tiny_config(pool, 3, 6, 4, 2) : tiny_config(pool, 1, 4, 6, 2);
}

// A model of config `c` with randomize()d parameters (generator seeded with `seed`) on two random
// images, checked by expect_gradients.
void expect_model_gradients(const VitConfig& c, unsigned seed, const GradientRun& run) {
  ParamStore store;
  VisionTransformer model(store, c);
  store.finalize();
  std::mt19937 gen(seed);
  randomize(store, gen);
  Tensor images = random_tensor({2, c.channels, c.image_height, c.image_width}, gen);
  expect_gradients(model, store, images, run);
}

TEST_P(VitGradientTest, BackwardMatchesFiniteDifferences) {
  expect_model_gradients(gradient_config(GetParam()), 2, GradientRun{});
}

// Dropout after the positions, in the MLP, on the residual branches and on the attention
// weights, and stochastic depth (0 in block 0, 0.5 in block 1): with the generator restarted for
// every evaluation, the masks are part of a fixed function.
TEST_P(VitGradientTest, BackwardThroughDropoutAndDropPathMatchesFiniteDifferences) {
  VitConfig c = gradient_config(GetParam());
  c.dropout = 0.2f;
  c.attention_dropout = 0.1f;
  c.drop_path = 0.5f;
  ParamStore store;
  VisionTransformer model(store, c);
  store.finalize();
  std::mt19937 gen(3);
  randomize(store, gen);
  Tensor images = random_tensor({4, c.channels, c.image_height, c.image_width}, gen);

  // The masks must change the function, or this would repeat the test above.
  Arena arena;
  ops::Rng rng(7);
  nn::Context train{true, &arena, &rng}, eval{false, &arena, nullptr};
  const Tensor y_train = model.forward(train, images).clone();
  const Tensor y_eval = model.forward(eval, images);
  EXPECT_FALSE(all_close(y_train, y_eval, 0.05, 0));

  GradientRun run;
  run.nonzero = false;  // a branch dropped for every sample has an exactly zero gradient
  expect_gradients(model, store, images, run);
}

INSTANTIATE_TEST_SUITE_P(Pools, VitGradientTest, ::testing::Values("token", "avg"),
                         [](const auto& p) { return std::string(p.param); });

// Also with a convolutional stem, which skips its first stage's data product without d(images).
TEST(VitGradientTest, GradientsAccumulateAndInputGradientIsOptional) {
  VitConfig with_stem = tiny_config("avg", 1, 8, 8, 4);
  with_stem.stem_channels = {6, 4};
  for (const VitConfig& c : {tiny_config("avg", 3, 4, 4, 2), with_stem}) {
    SCOPED_TRACE(c.stem_channels.empty() ? "without a stem" : "with a stem");
    ParamStore store;
    VisionTransformer model(store, c);
    store.finalize();
    std::mt19937 gen(4);
    randomize(store, gen);
    Tensor images = random_tensor({3, c.channels, c.image_height, c.image_width}, gen);
    const Tensor dlogits = random_tensor({3, 3}, gen);
    Arena arena;
    nn::Context ctx{true, &arena, nullptr};
    store.zero_grad();
    model.forward(ctx, images);
    Tensor dimages;
    model.backward(ctx, dlogits, &dimages);
    const Tensor once = store.grads().clone(), dimages_once = dimages.clone();
    model.backward(ctx, dlogits);  // the same forward, again, without d(images)
    std::vector<double> doubled = to_double(once);
    for (auto& v : doubled) v *= 2;
    EXPECT_TRUE(all_close(store.grads(), doubled, 1e-6, 1e-6));
    EXPECT_GT(ops::l2_norm(once), 0.0);
    model.backward(ctx, dlogits, &dimages);
    EXPECT_TRUE(bitwise_equal(dimages, dimages_once));  // input gradients are overwritten
  }
}

// ---- Errors ----

// The UsageError's message names the option.
void expect_usage_error(const VitConfig& c, const std::string& option) {
  ParamStore store;
  try {
    VisionTransformer model(store, c);
    ADD_FAILURE() << "no error for a bad " << option;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
  }
}

// A checkpoint's settings with `key` set to `value`: the error names the file and the key.
void expect_map_error(std::map<std::string, std::string> map, const std::string& key,
                      const std::string& value) {
  map[key] = value;
  try {
    vit::from_config_map(map, "ckpt.h5");
    ADD_FAILURE() << "no error for " << key << " = " << value;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ckpt.h5"), std::string::npos) << what;
    EXPECT_NE(what.find(key), std::string::npos) << what;
  }
}

TEST(VitErrorsTest, BadConfigurationsNameTheOption) {
  const VitConfig good = tiny_config("token", 3, 6, 4, 2);
  VitConfig c = good;
  c.patch_size = 4;  // does not divide 6
  expect_usage_error(c, "patch_size");
  c = good;
  c.pool = "max";
  expect_usage_error(c, "pool");
  c = good;
  c.heads = 3;
  expect_usage_error(c, "heads");
  c = good;
  c.channels = 2;
  expect_usage_error(c, "channels");
  c = good;
  c.drop_path = 1.f;
  expect_usage_error(c, "drop_path");
  c = good;
  c.dropout = -0.1f;
  expect_usage_error(c, "dropout");
  c = good;
  c.layers = 0;
  expect_usage_error(c, "layers");
  c = good;
  c.num_classes = -1;
  expect_usage_error(c, "num_classes");
  c = good;  // no head (a captioning encoder) reads every token: pool "token" only
  c.num_classes = 0;
  c.pool = "avg";
  expect_usage_error(c, "num_classes");
}

TEST(VitErrorsTest, WrongImagesAndMisuseThrow) {
  const VitConfig c = tiny_config("token", 3, 6, 4, 2);
  ParamStore store;
  VisionTransformer model(store, c);
  ops::Rng rng(1);
  EXPECT_THROW(model.init(rng), Error);  // before finalize()
  store.finalize();
  model.init(rng);
  Arena arena;
  nn::Context train{true, &arena, nullptr}, eval{false, &arena, nullptr};
  for (const Shape& s : {Shape{1, 3, 4, 6}, Shape{1, 1, 6, 4}, Shape{3, 6, 4}, Shape{0, 3, 6, 4}}) {
    try {
      model.forward(eval, Tensor(s));
      ADD_FAILURE() << "no error for images " << shape_str(s);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("images"), std::string::npos) << e.what();
    }
  }
  Tensor images({2, 3, 6, 4});
  model.forward(eval, images);
  EXPECT_THROW(model.backward(train, Tensor({2, 3})), Error);  // no training forward
  model.forward(train, images);
  try {
    model.backward(train, Tensor({3, 3}));
    ADD_FAILURE() << "no error for dlogits of another batch size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dlogits"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(model.backward(train, Tensor({2, 3})));
  model.forward(eval, images);  // drops what the training forward kept
  EXPECT_THROW(model.backward(train, Tensor({2, 3})), Error);
}

// ---- Initialisation ----

struct Stats {
  double mean = 0, std = 0, max_abs = 0;
  int64_t n = 0;
};

Stats stats_of(const Tensor& t) {
  Stats s;
  s.n = t.numel();
  std::vector<double> v = to_double(t);
  for (double x : v) s.mean += x, s.max_abs = std::max(s.max_abs, std::fabs(x));
  s.mean /= s.n;
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / s.n);
  return s;
}

TEST(VitInitTest, FollowsTimm) {
  VitConfig c;
  c.image_height = c.image_width = 32;
  c.patch_size = 4;
  c.channels = 3;
  c.num_classes = 10;
  c.d_model = 192;
  c.heads = 3;
  c.d_ff = 768;
  c.layers = 2;
  ParamStore store;
  VisionTransformer model(store, c);
  store.finalize();
  store.values().fill(42.f);  // init() must set every value
  ops::Rng rng(5);
  model.init(rng);

  // timm's trunc_normal_(std=.02) cuts at ±2 absolute, i.e. at 100σ: a plain N(0, 0.02).
  const double trunc_std = 0.02;
  const double bound = 1 / std::sqrt(48.0);  // patch projection: 1/√(C·P·P)
  double max_trunc = 0;
  for (const auto& p : store.params()) {
    const Stats s = stats_of(p.value);
    // Sampling tolerances of about 5 standard errors.
    const double mean_tol = 5 * s.std / std::sqrt(double(s.n)) + 1e-12;
    const double std_tol = 5 / std::sqrt(2.0 * s.n);
    if (p.name == "cls_token") {
      EXPECT_LT(s.max_abs, 1e-5) << p.name;
      EXPECT_NEAR(s.std, 1e-6, 1e-6 * std_tol) << p.name;
    } else if (p.name.rfind("patch_embed.proj.", 0) == 0) {
      EXPECT_LE(s.max_abs, bound) << p.name;
      EXPECT_NEAR(s.mean, 0, mean_tol) << p.name;
      EXPECT_NEAR(s.std, bound / std::sqrt(3.0), bound / std::sqrt(3.0) * std_tol) << p.name;
      if (p.shape.size() == 4) {
        EXPECT_GT(s.max_abs, 0.99 * bound) << p.name;
      }
    } else if (p.shape.size() >= 2) {  // Linear weights, the head and pos_embed
      EXPECT_NEAR(s.mean, 0, mean_tol) << p.name;
      EXPECT_NEAR(s.std, trunc_std, trunc_std * std_tol) << p.name;
      max_trunc = std::max(max_trunc, s.max_abs);
    } else if (ends_with(p.name, ".weight")) {  // LayerNorm gains
      EXPECT_EQ(s.mean, 1.0) << p.name;
      EXPECT_EQ(s.std, 0.0) << p.name;
    } else {  // biases
      EXPECT_EQ(s.max_abs, 0.0) << p.name;
    }
  }
  // Not cut at 2σ (0.04): among tens of thousands of draws some lie beyond 3σ.
  EXPECT_GT(max_trunc, 0.06);

  // Reproducible from the generator's state alone.
  const Tensor first = store.values().clone();
  ops::Rng again(5);
  model.init(again);
  EXPECT_TRUE(bitwise_equal(store.values(), first));
  ops::Rng other(6);
  model.init(other);
  EXPECT_FALSE(bitwise_equal(store.values(), first));
}

// ---- Inference ----

TEST(VitEvalTest, DeterministicAndBatchIndependent) {
  for (const std::string pool : {"token", "avg"}) {
    VitConfig c = tiny_config(pool, 3, 8, 12, 4);
    c.dropout = 0.3f;  // off in eval
    c.drop_path = 0.3f;
    ParamStore store;
    VisionTransformer model(store, c);
    store.finalize();
    std::mt19937 gen(6);
    randomize(store, gen);
    const int64_t B = 3, image = 3 * 8 * 12;
    Tensor images = random_tensor({B, 3, 8, 12}, gen);
    Arena arena;
    nn::Context eval{false, &arena, nullptr};
    const Tensor logits = model.forward(eval, images).clone();  // [B, classes]
    EXPECT_TRUE(bitwise_equal(model.forward(eval, images), logits)) << pool;
    for (int64_t b = 0; b < B; ++b) {
      Tensor one({1, 3, 8, 12});
      std::copy(images.f32() + b * image, images.f32() + (b + 1) * image, one.f32());
      arena.reset();
      const Tensor alone = model.forward(eval, one);
      EXPECT_TRUE(all_close(alone, to_double(logits.rows(b, b + 1)), 1e-6, 1e-6))
          << pool << ", image " << b;
    }
    // The images themselves matter (the logits differ between images).
    EXPECT_FALSE(all_close(logits.rows(0, 1), to_double(logits.rows(1, 2)), 1e-3, 0)) << pool;
  }
}

// Context::free_block_activations: the same logits, bit for bit, with the arena holding one
// block's activations at a time. Poisoned memory shows a read of a freed block's tensors.
TEST(VitEvalTest, FreeingEachBlocksActivationsKeepsTheLogitsInLessMemory) {
  struct Case {
    std::string pool;
    std::vector<int64_t> pos_conv;
  };
  // token: the last block computes the class row alone; a positional convolution after a block.
  for (const Case& k : {Case{"token", {}}, Case{"avg", {}}, Case{"avg", {0, 2}}}) {
    VitConfig c = tiny_config(k.pool, 3, 8, 12, 4);
    c.layers = 4;
    c.pos_conv_blocks = k.pos_conv;
    ParamStore store;
    VisionTransformer model(store, c);
    store.finalize();
    std::mt19937 gen(8);
    randomize(store, gen);
    Tensor images = random_tensor({3, 3, 8, 12}, gen);
    Arena kept, freed;
    kept.set_poison(true);
    freed.set_poison(true);
    nn::Context all{false, &kept, nullptr};
    nn::Context one = all;
    one.arena = &freed;
    one.free_block_activations = true;
    const Tensor expected = model.forward(all, images);
    for (int pass = 0; pass < 2; ++pass) {  // the second in an arena that has been used
      freed.reset();
      EXPECT_TRUE(bitwise_equal(model.forward(one, images), expected)) << k.pool << " " << pass;
    }
    EXPECT_LT(freed.high_water(), kept.high_water()) << k.pool;
    // Attention maps read every block's weights after the forward: nothing is freed then.
    for (nn::EncoderLayer& block : model.blocks()) block.attention().keep_weights = true;
    kept.reset();
    model.forward(all, images);
    const Tensor first = model.blocks()[0].attention().weights().clone();
    freed.reset();
    model.forward(one, images);
    EXPECT_TRUE(bitwise_equal(model.blocks()[0].attention().weights(), first)) << k.pool;
  }
}

TEST(VitEvalTest, TrainingForwardWithoutDropoutEqualsEval) {
  const VitConfig c = tiny_config("token", 1, 4, 6, 2);
  ParamStore store;
  VisionTransformer model(store, c);
  store.finalize();
  ops::Rng rng(8);
  model.init(rng);
  std::mt19937 gen(7);
  Tensor images = random_tensor({2, 1, 4, 6}, gen);
  Arena arena;
  nn::Context train{true, &arena, nullptr}, eval{false, &arena, nullptr};
  const Tensor y_train = model.forward(train, images).clone();
  EXPECT_TRUE(bitwise_equal(model.forward(eval, images), y_train));
}

}  // namespace

// ---- The convolutional stem (vit.h: stem_channels) ----

namespace {

// Windows by the definition: cols[b, oy·Wo + ox, (c·K + i)·K + j] = x[b, c, oy·S − pad + i,
// ox·S − pad + j], 0 outside.
std::vector<double> naive_windows(const Tensor& x, bool channels_last, int64_t K, int64_t S,
                                  int64_t pad) {
  const int64_t B = x.dim(0), C = channels_last ? x.dim(3) : x.dim(1);
  const int64_t H = channels_last ? x.dim(1) : x.dim(2), W = channels_last ? x.dim(2) : x.dim(3);
  const int64_t Ho = (H + 2 * pad - K) / S + 1, Wo = (W + 2 * pad - K) / S + 1;
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < K; ++i)
            for (int64_t j = 0; j < K; ++j) {
              const int64_t y = oy * S - pad + i, xx = ox * S - pad + j;
              if (y < 0 || y >= H || xx < 0 || xx >= W) {
                out.push_back(0);
                continue;
              }
              const int64_t at =
                  channels_last ? ((b * H + y) * W + xx) * C + c : ((b * C + c) * H + y) * W + xx;
              out.push_back(x.f32()[at]);
            }
  return out;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += double(a.f32()[i]) * b.f32()[i];
  return s;
}

struct WindowCase {
  bool channels_last;
  int64_t B, C, H, W, K, S, pad;
};

void PrintTo(const WindowCase& k, std::ostream* os) {
  *os << (k.channels_last ? "NHWC " : "NCHW ") << k.B << "x" << k.C << "x" << k.H << "x" << k.W
      << ", K " << k.K << ", S " << k.S << ", pad " << k.pad;
}

class WindowTest : public ::testing::TestWithParam<WindowCase> {};

// extract_windows against the definition; fold_windows is its adjoint:
// <extract(x), y> = <x, fold(y)> for random x and y.
TEST_P(WindowTest, ExtractMatchesTheDefinitionAndFoldIsItsAdjoint) {
  const WindowCase k = GetParam();
  std::mt19937 gen(11);
  const Shape in_shape = k.channels_last ? Shape{k.B, k.H, k.W, k.C} : Shape{k.B, k.C, k.H, k.W};
  const Tensor x = random_tensor(in_shape, gen);
  const int64_t Ho = (k.H + 2 * k.pad - k.K) / k.S + 1, Wo = (k.W + 2 * k.pad - k.K) / k.S + 1;
  Tensor cols = garbage_tensor({k.B, Ho * Wo, k.C * k.K * k.K});
  vit::extract_windows(x, k.channels_last, k.K, k.S, k.pad, cols);
  EXPECT_TRUE(all_close(cols, naive_windows(x, k.channels_last, k.K, k.S, k.pad), 0, 0));

  const Tensor y = random_tensor(cols.shape(), gen);
  Tensor folded = garbage_tensor(in_shape);
  vit::fold_windows(y, k.channels_last, k.K, k.S, k.pad, folded);
  const double lhs = dot(cols, y), rhs = dot(x, folded);
  EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + std::fabs(lhs)) + 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WindowTest,
    ::testing::Values(WindowCase{false, 2, 1, 28, 28, 3, 2, 1},  // the stem's first stage
                      WindowCase{true, 2, 5, 14, 14, 3, 2, 1},   // its second
                      WindowCase{true, 1, 3, 7, 6, 3, 2, 1},     // odd sizes
                      WindowCase{false, 2, 3, 5, 7, 3, 1, 1},    // stride 1, "same"
                      WindowCase{true, 2, 4, 8, 12, 2, 2, 0},    // the projection after a stem
                      WindowCase{true, 1, 6, 4, 4, 1, 1, 0}),    // 1×1
    [](const auto& p) {
      const WindowCase& k = p.param;
      return std::string(k.channels_last ? "NHWC" : "NCHW") + "_C" + std::to_string(k.C) + "_" +
             std::to_string(k.H) + "x" + std::to_string(k.W) + "_K" + std::to_string(k.K) + "S" +
             std::to_string(k.S) + "P" + std::to_string(k.pad);
    });

TEST(WindowTest, NonOverlappingWindowsArePatches) {
  std::mt19937 gen(12);
  const Tensor images = random_tensor({2, 3, 8, 12}, gen);
  Tensor windows({2, 6, 48}), patches({2, 6, 48});
  vit::extract_windows(images, false, 4, 4, 0, windows);
  vit::extract_patches(images, 4, patches);
  EXPECT_TRUE(bitwise_equal(windows, patches));
}

TEST(WindowTest, ShapesThatDoNotFitThrowNamingThem) {
  Tensor x({1, 2, 6, 6}), cols({1, 9, 18});  // 3×3 stride 2 pad 1 on 6×6: 3×3 windows of 2·9
  EXPECT_NO_THROW(vit::extract_windows(x, false, 3, 2, 1, cols));
  Tensor wrong({1, 9, 17});
  try {
    vit::extract_windows(x, false, 3, 2, 1, wrong);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 9, 18]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(vit::fold_windows(wrong, false, 3, 2, 1, x), Error);
  EXPECT_THROW(vit::extract_windows(x, false, 3, 2, 3, cols), Error);  // padding ≥ kernel
  EXPECT_THROW(vit::extract_windows(x, false, 0, 2, 0, cols), Error);
  Tensor small({1, 2, 1, 1});
  EXPECT_THROW(vit::extract_windows(small, false, 3, 1, 0, cols), Error);
}

// Two stages and a 1×1 projection on grey 8×8 images (the Fashion-MNIST shape, smaller), one
// stage and a 2×2 projection on RGB 8×4 images; "strides": stride-1 stages around a stride-2
// one (grey 8×8 -> 8×8 -> 4×4 -> 4×4), then a 2×2 projection.
VitConfig stem_config(const std::string& kind) {
  if (kind == "strides") {
    VitConfig c = tiny_config("avg", 1, 8, 8, 4);
    c.stem_channels = {4, 5, 3};
    c.stem_strides = {1, 2, 1};
    return c;
  }
  VitConfig c = kind == "avg" ? tiny_config(kind, 1, 8, 8, 4) : tiny_config(kind, 3, 8, 4, 4);
  c.stem_channels = kind == "avg" ? std::vector<int64_t>{6, 4} : std::vector<int64_t>{5};
  return c;
}

}  // namespace

TEST(VitStemTest, NamesShapesAndDecay) {
  const VitConfig c = stem_config("avg");
  ParamStore store;
  VisionTransformer model(store, c);
  const std::vector<std::string> names = names_of(store);
  const std::vector<std::string> first(names.begin() + 2, names.begin() + 12);
  EXPECT_EQ(first, (std::vector<std::string>{
                       "patch_embed.stem.0.conv.weight", "patch_embed.stem.0.conv.bias",
                       "patch_embed.stem.0.norm.weight", "patch_embed.stem.0.norm.bias",
                       "patch_embed.stem.1.conv.weight", "patch_embed.stem.1.conv.bias",
                       "patch_embed.stem.1.norm.weight", "patch_embed.stem.1.norm.bias",
                       "patch_embed.proj.weight", "patch_embed.proj.bias"}));
  EXPECT_EQ(store.get("patch_embed.stem.0.conv.weight").shape, (Shape{6, 1, 3, 3}));
  EXPECT_EQ(store.get("patch_embed.stem.1.conv.weight").shape, (Shape{4, 6, 3, 3}));
  EXPECT_EQ(store.get("patch_embed.proj.weight").shape, (Shape{8, 4, 1, 1}));
  EXPECT_EQ(store.get("pos_embed").shape, (Shape{1, 5, 8}));  // the grid stays 8/4 × 8/4
  EXPECT_TRUE(store.get("patch_embed.stem.1.conv.weight").decay);
  EXPECT_FALSE(store.get("patch_embed.stem.1.conv.bias").decay);
  EXPECT_FALSE(store.get("patch_embed.stem.1.norm.weight").decay);
}

TEST(VitStemTest, StrideOneStagesKeepTheMapSize) {
  const VitConfig c = stem_config("strides");
  EXPECT_EQ(c.stem_stride(), 2);
  EXPECT_EQ(c.proj_kernel(), 2);
  ParamStore store;
  VisionTransformer model(store, c);
  EXPECT_EQ(store.get("patch_embed.stem.0.conv.weight").shape, (Shape{4, 1, 3, 3}));
  EXPECT_EQ(store.get("patch_embed.stem.2.conv.weight").shape, (Shape{3, 5, 3, 3}));
  EXPECT_EQ(store.get("patch_embed.proj.weight").shape, (Shape{8, 3, 2, 2}));
  EXPECT_EQ(store.get("pos_embed").shape, (Shape{1, 5, 8}));
  store.finalize();
  std::mt19937 gen(24);
  randomize(store, gen);
  Arena arena;
  nn::Context eval{false, &arena, nullptr};
  const Tensor logits = model.forward(eval, random_tensor({2, 1, 8, 8}, gen));
  EXPECT_EQ(logits.shape(), (Shape{2, c.num_classes}));

  // Strides given as 2 for every stage are the default, not a different model.
  VitConfig explicit_twos = stem_config("avg"), implicit = stem_config("avg");
  explicit_twos.stem_strides = {2, 2};
  EXPECT_EQ(vit::to_config_map(explicit_twos), vit::to_config_map(implicit));
}

class VitStemGradientTest : public ::testing::TestWithParam<const char*> {};  // stem_config kind

TEST_P(VitStemGradientTest, BackwardMatchesFiniteDifferences) {
  // A LayerNorm over a few channels bends sharply: a smaller step than the default 1e-2.
  GradientRun run;
  run.options.h = 2e-3;
  expect_model_gradients(stem_config(GetParam()), 21, run);
}

INSTANTIATE_TEST_SUITE_P(Pools, VitStemGradientTest, ::testing::Values("token", "avg", "strides"),
                         [](const auto& p) { return std::string(p.param); });

TEST(VitStemTest, InitIsPyTorchsConvDefault) {
  VitConfig c = stem_config("avg");
  c.stem_channels = {32, 64};
  c.image_height = c.image_width = 16;
  ParamStore store;
  VisionTransformer model(store, c);
  store.finalize();
  store.values().fill(42.f);
  ops::Rng rng(5);
  model.init(rng);
  // uniform ±1/√fan_in for weight and bias: fan-in 1·9, 32·9 and 64·1·1 (the projection)
  const std::vector<std::pair<std::string, double>> bounds = {
      {"patch_embed.stem.0.conv.", 1 / 3.0},
      {"patch_embed.stem.1.conv.", 1 / std::sqrt(288.0)},
      {"patch_embed.proj.", 1 / 8.0}};
  for (const auto& [prefix, bound] : bounds)
    for (const char* part : {"weight", "bias"}) {
      const Stats s = stats_of(store.get(prefix + part).value);
      EXPECT_LE(s.max_abs, bound) << prefix << part;
      EXPECT_GT(s.max_abs, 0.8 * bound) << prefix << part;
    }
  const Stats gain = stats_of(store.get("patch_embed.stem.1.norm.weight").value);
  EXPECT_EQ(gain.mean, 1.0);
  EXPECT_EQ(stats_of(store.get("patch_embed.stem.1.norm.bias").value).max_abs, 0.0);
}

TEST(VitStemTest, ConfigurationRoundTripsAndBadStemsNameTheOption) {
  VitConfig c = stem_config("avg");
  const auto map = vit::to_config_map(c);
  ASSERT_EQ(map.count("stem_channels"), 1u);
  EXPECT_EQ(map.at("stem_channels"), "6,4");
  EXPECT_EQ(vit::from_config_map(map, "test").stem_channels, c.stem_channels);
  EXPECT_EQ(vit::to_config_map(tiny_config("avg", 1, 8, 8, 4)).at("stem_channels"), "none");
  auto old_checkpoint = map;  // written before the stem existed: no stem
  old_checkpoint.erase("stem_channels");
  old_checkpoint.erase("stem_strides");
  EXPECT_TRUE(vit::from_config_map(old_checkpoint, "old.h5").stem_channels.empty());

  EXPECT_EQ(vit::parse_stem_channels("48, 96"), (std::vector<int64_t>{48, 96}));
  EXPECT_EQ(vit::parse_stem_channels("48 96"), (std::vector<int64_t>{48, 96}));
  EXPECT_TRUE(vit::parse_stem_channels("none").empty());
  EXPECT_TRUE(vit::parse_stem_channels("").empty());
  for (const char* bad : {"0", "-3", "48,x", "none,4", "1e3", "1234567"})
    EXPECT_THROW(vit::parse_stem_channels(bad), UsageError) << bad;
  expect_map_error(map, "stem_channels", "3,,x");

  c.stem_channels = {3, 4, 5};  // stride 8 does not divide the patch size 4
  expect_usage_error(c, "stem_channels");
  c.stem_channels = {3, 0};
  expect_usage_error(c, "stem_channels");
}

TEST(VitStemTest, StridesRoundTripAndBadStridesNameTheOption) {
  const VitConfig c = stem_config("strides");
  const auto map = vit::to_config_map(c);
  EXPECT_EQ(map.at("stem_strides"), "1,2,1");
  EXPECT_EQ(vit::from_config_map(map, "test").stem_strides, c.stem_strides);
  EXPECT_EQ(vit::to_config_map(stem_config("avg")).at("stem_strides"), "2,2");
  EXPECT_EQ(vit::to_config_map(tiny_config("avg", 1, 8, 8, 4)).at("stem_strides"), "none");
  auto old_checkpoint = vit::to_config_map(stem_config("avg"));  // before strides: all 2
  old_checkpoint.erase("stem_strides");
  const VitConfig old = vit::from_config_map(old_checkpoint, "old.h5");
  EXPECT_EQ(old.stem_stride(), 4);
  EXPECT_EQ(old.proj_kernel(), 1);

  EXPECT_EQ(vit::parse_stem_strides("1, 2"), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(vit::parse_stem_strides("none").empty());
  for (const char* bad : {"0", "3", "2,x", "-1", "4,1"}) {
    try {
      vit::parse_stem_strides(bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("stem_strides"), std::string::npos) << e.what();
    }
  }
  expect_map_error(map, "stem_strides", "1,3,1");

  VitConfig wrong = c;
  wrong.stem_strides = {1, 2};  // two strides for three stages
  expect_usage_error(wrong, "stem_strides");
  wrong.stem_strides = {2, 2, 2};  // stride 8 does not divide the patch size 4
  expect_usage_error(wrong, "stem_channels");
  wrong.stem_strides = {1, 1, 1};  // stride 1: a 4×4 projection after the stem
  EXPECT_NO_THROW(wrong.validate());
  EXPECT_EQ(wrong.proj_kernel(), 4);
}

TEST(VitStemTest, EvalIsBatchIndependent) {
  const VitConfig c = stem_config("token");
  ParamStore store;
  VisionTransformer model(store, c);
  store.finalize();
  std::mt19937 gen(23);
  randomize(store, gen);
  Tensor images = random_tensor({3, 3, 8, 4}, gen);
  Arena arena;
  nn::Context eval{false, &arena, nullptr};
  const Tensor all = model.forward(eval, images).clone();
  Tensor one({1, 3, 8, 4});
  std::copy(images.f32() + 96, images.f32() + 192, one.f32());
  const Tensor single = model.forward(eval, one);
  for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(single.f32()[j], all.f32()[3 + j], 1e-5);
}

// ---- Patch dropout (vit.h: patch_drop) ----

namespace {

// No stem, no dropout: a patch token depends on its own pixels only.
VitConfig patch_drop_config(const std::string& pool, float patch_drop) {
  VitConfig c = tiny_config(pool, 1, 4, 6, 2);  // 2×3 = 6 patches
  c.patch_drop = patch_drop;
  return c;
}

// Patch p of image b of [B, 1, 4, 6] images set to `value`.
void fill_patch(Tensor& images, int64_t b, int64_t p, float value) {
  const int64_t gy = p / 3, gx = p % 3;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) images.f32()[(b * 4 + gy * 2 + i) * 6 + gx * 2 + j] = value;
}

}  // namespace

TEST(VitPatchDropTest, KeepsTimmsCountOfPatches) {
  VitConfig c;
  c.image_height = c.image_width = 28;
  c.patch_size = 4;  // 49 patches
  EXPECT_EQ(c.kept_patches(), 49);
  c.patch_drop = 0.25f;
  EXPECT_EQ(c.kept_patches(), 36);  // int(49 · 0.75) = int(36.75)
  c.patch_drop = 0.5f;
  EXPECT_EQ(c.kept_patches(), 24);
  c.patch_drop = 0.99f;
  EXPECT_EQ(c.kept_patches(), 1);  // int(0.49) = 0, at least one
  c.image_height = 10;
  c.image_width = 4;
  c.patch_size = 2;     // 10 patches
  c.patch_drop = 0.3f;  // 0.30000001 as a float: still int(10 · 0.7) = 7, as timm's 0.3
  EXPECT_EQ(c.kept_patches(), 7);
  c.patch_drop = 0.35f;
  EXPECT_EQ(c.kept_patches(), 6);  // int(6.5)
}

TEST(VitPatchDropTest, EachImageKeepsADistinctUniformSubsetAndEvalKeepsAll) {
  const VitConfig c = patch_drop_config("avg", 0.5f);  // keeps 3 of 6
  ParamStore store;
  VisionTransformer model(store, c);
  store.finalize();
  ops::Rng init(1);
  model.init(init);
  std::mt19937 gen(5);
  const Tensor images = random_tensor({16, 1, 4, 6}, gen);
  Arena arena;
  ops::Rng rng(11);
  nn::Context train{true, &arena, &rng};
  std::vector<int64_t> count(6, 0);
  std::vector<std::vector<int32_t>> first_rows;
  const int kForwards = 250;  // 4,000 images
  for (int f = 0; f < kForwards; ++f) {
    arena.reset();
    model.forward(train, images);
    const Tensor& kept = model.kept_patches();
    ASSERT_EQ(kept.shape(), (Shape{16, 3}));
    for (int64_t b = 0; b < 16; ++b) {
      std::vector<int32_t> row(kept.i32() + b * 3, kept.i32() + b * 3 + 3);
      for (int32_t i : row) {
        ASSERT_GE(i, 0);
        ASSERT_LT(i, 6);
        ++count[static_cast<size_t>(i)];
      }
      std::sort(row.begin(), row.end());
      EXPECT_EQ(std::adjacent_find(row.begin(), row.end()), row.end()) << "a patch kept twice";
      if (f == 0) first_rows.push_back(row);
    }
  }
  // Each patch is kept with probability 1/2: 2,000 of 4,000 expected, standard deviation 32.
  for (int64_t i = 0; i < 6; ++i) EXPECT_NEAR(count[static_cast<size_t>(i)], 2000, 160) << i;
  // The images of one batch do not share a draw.
  int same = 0;
  for (size_t b = 1; b < first_rows.size(); ++b) same += first_rows[b] == first_rows[0];
  EXPECT_LT(same, 8);

  // The same generator state gives the same draw; eval keeps every patch.
  ops::Rng a(3), b(3);
  nn::Context ta{true, &arena, &a}, tb{true, &arena, &b};
  const Tensor ya = model.forward(ta, images).clone();
  const Tensor kept_a = model.kept_patches();
  const Tensor yb = model.forward(tb, images).clone();
  EXPECT_TRUE(bitwise_equal(ya, yb));
  EXPECT_TRUE(std::equal(kept_a.i32(), kept_a.i32() + kept_a.numel(), model.kept_patches().i32()));
  nn::Context eval{false, &arena, nullptr};
  model.forward(eval, images);
  EXPECT_TRUE(model.kept_patches().empty());
}

TEST(VitPatchDropTest, DroppedPatchesReachNeitherTheLogitsNorTheGradients) {
  for (const char* pool : {"token", "avg"}) {
    SCOPED_TRACE(pool);
    const VitConfig c = patch_drop_config(pool, 0.5f);
    ParamStore store;
    VisionTransformer model(store, c);
    store.finalize();
    std::mt19937 gen(9);
    randomize(store, gen);
    Tensor images = random_tensor({2, 1, 4, 6}, gen);
    Arena arena;
    auto run = [&](const Tensor& x) {
      arena.reset();
      ops::Rng rng(21);  // the same draw every time
      nn::Context train{true, &arena, &rng};
      return model.forward(train, x).clone();
    };
    const Tensor y = run(images);
    const std::vector<int32_t> kept(model.kept_patches().i32(), model.kept_patches().i32() + 3);
    int32_t dropped = 0;
    while (std::find(kept.begin(), kept.end(), dropped) != kept.end()) ++dropped;

    // d(images) is exactly 0 on image 0's dropped patches, not on its kept ones.
    {
      ops::Rng rng(21);
      nn::Context train{true, &arena, &rng};
      arena.reset();
      model.forward(train, images);
      Tensor dimages;
      model.backward(train, random_tensor({2, 3}, gen), &dimages);
      for (int32_t p = 0; p < 6; ++p) {
        double norm = 0;
        for (int64_t i = 0; i < 2; ++i)
          for (int64_t j = 0; j < 2; ++j)
            norm += std::fabs(dimages.f32()[((p / 3) * 2 + i) * 6 + (p % 3) * 2 + j]);
        const bool is_kept = std::find(kept.begin(), kept.end(), p) != kept.end();
        if (is_kept)
          EXPECT_GT(norm, 0) << "kept patch " << p;
        else
          EXPECT_EQ(norm, 0) << "dropped patch " << p;
      }
    }

    Tensor changed = images.clone();
    fill_patch(changed, 0, dropped, 7.f);
    EXPECT_TRUE(bitwise_equal(run(changed), y)) << "dropped patch " << dropped << " was seen";
    changed = images.clone();
    fill_patch(changed, 0, kept[0], 7.f);
    const Tensor y_kept = run(changed);
    EXPECT_FALSE(all_close(y_kept.rows(0, 1), y.rows(0, 1), 1e-4, 0));
    EXPECT_TRUE(bitwise_equal(y_kept.rows(1, 2), y.rows(1, 2)));  // image 1 is untouched
  }
}

// The blocks and both poolings do not depend on the order of the kept tokens.
TEST(VitPatchDropTest, TheOrderOfTheKeptPatchesDoesNotMatter) {
  for (const char* pool : {"token", "avg"}) {
    SCOPED_TRACE(pool);
    const VitConfig c = patch_drop_config(pool, 0.25f);  // keeps int(4.5) = 4 of 6
    ParamStore store;
    VisionTransformer model(store, c);
    store.finalize();
    std::mt19937 gen(13);
    randomize(store, gen);
    const Tensor images = random_tensor({2, 1, 4, 6}, gen);
    Arena arena;
    nn::Context train{true, &arena, nullptr};  // no Rng: only forced draws can run
    Tensor order({2, 4}, DType::i32), reversed({2, 4}, DType::i32);
    const int32_t rows[2][4] = {{0, 2, 3, 5}, {4, 1, 0, 3}};
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t k = 0; k < 4; ++k) {
        order.i32()[b * 4 + k] = rows[b][k];
        reversed.i32()[b * 4 + k] = rows[b][3 - k];
      }
    model.force_kept_patches(order);
    const Tensor y = model.forward(train, images).clone();
    EXPECT_TRUE(std::equal(order.i32(), order.i32() + 8, model.kept_patches().i32()));
    model.force_kept_patches(reversed);
    EXPECT_TRUE(all_close(model.forward(train, images), y, 1e-5, 1e-6));
    // A forced draw is used once: the next training forward would draw, and has no Rng here.
    EXPECT_THROW(model.forward(train, images), Error);
  }
}

class VitPatchDropGradientTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VitPatchDropGradientTest, BackwardMatchesFiniteDifferences) {
  const std::string kind = GetParam();
  VitConfig c = kind == "stem" ? stem_config("avg") : patch_drop_config(kind, 0.5f);
  c.patch_drop = 0.5f;
  GradientRun run;
  run.nonzero = true;  // every parameter still gets gradient from the kept patches
  expect_model_gradients(c, 31, run);
}

INSTANTIATE_TEST_SUITE_P(Pools, VitPatchDropGradientTest, ::testing::Values("token", "avg", "stem"),
                         [](const auto& p) { return std::string(p.param); });

TEST(VitPatchDropTest, ConfigurationRoundTripsAndBadValuesNameTheOption) {
  VitConfig c = patch_drop_config("avg", 0.25f);
  auto map = vit::to_config_map(c);
  ASSERT_EQ(map.count("patch_drop"), 1u);
  EXPECT_FLOAT_EQ(vit::from_config_map(map, "ckpt.h5").patch_drop, 0.25f);
  map.erase("patch_drop");  // a checkpoint from before the setting
  EXPECT_EQ(vit::from_config_map(map, "ckpt.h5").patch_drop, 0.f);
  expect_map_error(map, "patch_drop", "1");
  for (float bad : {-0.1f, 1.f}) {
    c.patch_drop = bad;
    expect_usage_error(c, "patch_drop");
  }
}

TEST(VitPatchDropTest, BadForcedDrawsAreRejected) {
  const VitConfig c = patch_drop_config("avg", 0.5f);  // keeps 3 of 6
  ParamStore store;
  VisionTransformer model(store, c);
  store.finalize();
  auto rows = [](std::vector<int32_t> v, int64_t k) {
    Tensor t({static_cast<int64_t>(v.size()) / k, k}, DType::i32);
    std::copy(v.begin(), v.end(), t.i32());
    return t;
  };
  EXPECT_THROW(model.force_kept_patches(rows({0, 1, 2, 3}, 4)), Error);  // 4 per row, not 3
  EXPECT_THROW(model.force_kept_patches(rows({0, 1, 6}, 3)), Error);     // outside [0, 6)
  EXPECT_THROW(model.force_kept_patches(rows({0, 1, -1}, 3)), Error);    // outside [0, 6)
  EXPECT_THROW(model.force_kept_patches(rows({2, 1, 2}, 3)), Error);     // a patch twice
  EXPECT_THROW(model.force_kept_patches(Tensor({1, 3})), Error);         // not int32
  {
    ParamStore other;
    VisionTransformer no_drop(other, patch_drop_config("avg", 0.f));
    EXPECT_THROW(no_drop.force_kept_patches(rows({0, 1, 2}, 3)), Error);  // nothing to drop
  }
  model.force_kept_patches(rows({0, 1, 2}, 3));  // one image
  Arena arena;
  nn::Context train{true, &arena, nullptr};
  try {
    model.forward(train, Tensor({2, 1, 4, 6}));  // two images
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forced kept patches"), std::string::npos) << e.what();
  }
}

// ---- The positional convolution (vit.h: pos_conv_blocks) ----

namespace {

// The definition, in double: out[b, 0] = x[b, 0]; out[b, 1 + i·W + j, c] = x[b, 1 + i·W + j, c] +
// bias[c] + Σ_{u,v} weight[c, 0, u, v]·x[b, 1 + (i + u − 1)·W + j + v − 1, c], 0 outside the grid.
std::vector<double> naive_pos_conv(const Tensor& x, int64_t H, int64_t W, const Tensor& weight,
                                   const Tensor& bias) {
  const int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  auto at = [&](int64_t b, int64_t t, int64_t c) { return double(x.f32()[(b * T + t) * d + c]); };
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < d; ++c) {
        double v = at(b, t, c);
        if (t > 0) {
          const int64_t i = (t - 1) / W, j = (t - 1) % W;
          v += bias.f32()[c];
          for (int64_t u = 0; u < 3; ++u)
            for (int64_t w = 0; w < 3; ++w) {
              const int64_t y = i + u - 1, xx = j + w - 1;
              if (y >= 0 && y < H && xx >= 0 && xx < W)
                v += double(weight.f32()[c * 9 + u * 3 + w]) * at(b, 1 + y * W + xx, c);
            }
        }
        out.push_back(v);
      }
  return out;
}

struct PosConvCase {
  int64_t B, H, W, d;
};

void PrintTo(const PosConvCase& k, std::ostream* os) {
  *os << k.B << " images, grid " << k.H << "x" << k.W << ", d " << k.d;
}

class PosConvTest : public ::testing::TestWithParam<PosConvCase> {};

// A model whose patch tokens pass through a positional convolution after `blocks`.
VitConfig pos_conv_config(const std::string& pool, std::vector<int64_t> blocks) {
  VitConfig c = gradient_config(pool);
  c.pos_conv_blocks = std::move(blocks);
  return c;
}

}  // namespace

// The op against the definition, and its gradient (x, weight, bias) by central differences of
// L = Σ w·out.
TEST_P(PosConvTest, MatchesTheDefinitionAndFiniteDifferences) {
  const PosConvCase k = GetParam();
  std::mt19937 gen(41);
  Tensor x = random_tensor({k.B, 1 + k.H * k.W, k.d}, gen);
  Tensor weight = random_tensor({k.d, 1, 3, 3}, gen), bias = random_tensor({k.d}, gen);
  Tensor out = garbage_tensor(x.shape());
  vit::pos_conv_forward(x, k.H, k.W, weight, bias, out);
  EXPECT_TRUE(all_close(out, naive_pos_conv(x, k.H, k.W, weight, bias), 1e-5, 1e-5));

  const Tensor w = random_tensor(x.shape(), gen);
  Tensor dx = garbage_tensor(x.shape());
  Tensor dweight({k.d, 1, 3, 3}), dbias({k.d});
  dweight.fill(0.5f), dbias.fill(-0.25f);  // backward adds to what is there
  vit::pos_conv_backward(x, w, k.H, k.W, weight, dx, dweight, dbias);
  Tensor gw = dweight.clone(), gb = dbias.clone();
  for (int64_t i = 0; i < gw.numel(); ++i) gw.f32()[i] -= 0.5f;
  for (int64_t i = 0; i < gb.numel(); ++i) gb.f32()[i] += 0.25f;
  auto loss = [&] {
    Tensor y(x.shape());
    vit::pos_conv_forward(x, k.H, k.W, weight, bias, y);
    return weighted_sum(y, w);
  };
  EXPECT_GRAD_OK(check_gradient("x", x, dx, loss));
  EXPECT_GRAD_OK(check_gradient("weight", weight, gw, loss));
  EXPECT_GRAD_OK(check_gradient("bias", bias, gb, loss));
}

INSTANTIATE_TEST_SUITE_P(Shapes, PosConvTest,
                         ::testing::Values(PosConvCase{2, 3, 2, 5},    // rectangular, d < 16
                                           PosConvCase{1, 1, 1, 3},    // one patch: the centre tap
                                           PosConvCase{2, 4, 5, 37},   // d spans 3 blocks
                                           PosConvCase{3, 7, 7, 16}),  // the Fashion-MNIST grid
                         [](const auto& p) {
                           const PosConvCase& k = p.param;
                           return std::to_string(k.H) + "x" + std::to_string(k.W) + "_d" +
                                  std::to_string(k.d);
                         });

TEST(PosConvTest, ShapesThatDoNotFitThrowNamingThem) {
  Tensor x({2, 7, 4}), w({4, 1, 3, 3}), b({4}), out({2, 7, 4});
  EXPECT_THROW(vit::pos_conv_forward(x, 2, 2, w, b, out), Error);  // 6 patches, not 4
  Tensor w5({5, 1, 3, 3}), out5({2, 7, 5});
  EXPECT_THROW(vit::pos_conv_forward(x, 2, 3, w5, b, out), Error);
  EXPECT_THROW(vit::pos_conv_forward(x, 2, 3, w, b, out5), Error);
  try {
    vit::pos_conv_forward(x, 3, 3, w, b, out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 7, 4]"), std::string::npos) << e.what();
  }
  Tensor dx({2, 7, 4}), dw({4, 1, 3, 3}), db({4}), dw_bad({4, 9});
  EXPECT_NO_THROW(vit::pos_conv_backward(x, out, 2, 3, w, dx, dw, db));
  EXPECT_THROW(vit::pos_conv_backward(x, out, 2, 3, w, dx, dw_bad, db), Error);
}

class VitPosConvGradientTest : public ::testing::TestWithParam<const char*> {};  // pool

// After block 0 only, and after both blocks (the last one's output feeds the pooling directly;
// with token pooling only the class token's row goes on, so that last convolution gets no
// gradient, exactly).
TEST_P(VitPosConvGradientTest, BackwardMatchesFiniteDifferences) {
  const std::string pool = GetParam();
  expect_model_gradients(pos_conv_config(pool, {0}), 43, GradientRun{});
  GradientRun run;
  run.nonzero = pool == "avg";
  expect_model_gradients(pos_conv_config(pool, {0, 1}), 44, run);
}

INSTANTIATE_TEST_SUITE_P(Pools, VitPosConvGradientTest, ::testing::Values("token", "avg"),
                         [](const auto& p) { return std::string(p.param); });

// Init fills each named depthwise convolution parameter as PyTorch's Conv2d default does with
// fan-in 9: uniform within ±1/3.
void expect_depthwise_init(VisionTransformer& model, ParamStore& store,
                           const std::vector<std::string>& names, uint64_t seed) {
  store.finalize();
  store.values().fill(42.f);
  ops::Rng rng(seed);
  model.init(rng);
  for (const std::string& name : names) {
    const Stats s = stats_of(store.get(name).value);
    EXPECT_LE(s.max_abs, 1 / 3.0) << name;
    EXPECT_GT(s.max_abs, 0.1) << name;
  }
}

// A convolution (`prefix`.weight and .bias) of the model `with` changes the function: the model
// differs from the same weights without it (gradient_config("avg")), and a zero kernel and bias
// make it the identity; eval stays independent of the batch.
void expect_zero_kernel_is_identity(const VitConfig& with, const std::string& prefix,
                                    unsigned seed) {
  ParamStore s1, s2;
  VisionTransformer m1(s1, with), m2(s2, gradient_config("avg"));
  s1.finalize(), s2.finalize();
  std::mt19937 gen(seed);
  randomize(s1, gen);
  for (auto& p : s2.params()) std::copy_n(s1.get(p.name).value.f32(), p.numel(), p.value.f32());
  Arena arena;
  nn::Context eval{false, &arena, nullptr};
  const Tensor images = random_tensor({3, 1, 4, 6}, gen);
  const Tensor a = m1.forward(eval, images).clone(), b = m2.forward(eval, images).clone();
  EXPECT_FALSE(all_close(a, b, 1e-3, 0));
  s1.get(prefix + ".weight").value.zero();
  s1.get(prefix + ".bias").value.zero();
  s1.mark_changed();
  EXPECT_TRUE(bitwise_equal(m1.forward(eval, images), b));

  randomize(s1, gen);
  const Tensor all = m1.forward(eval, images).clone();
  Tensor one({1, 1, 4, 6});
  std::copy_n(images.f32() + 24, 24, one.f32());
  const Tensor single = m1.forward(eval, one);
  for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(single.f32()[j], all.f32()[3 + j], 1e-5);
}

TEST(VitPosConvTest, NamesShapesDecayAndInit) {
  const VitConfig c = pos_conv_config("avg", {0, 1});
  ParamStore store;
  VisionTransformer model(store, c);
  const std::vector<std::string> names = names_of(store);
  const std::vector<std::string> first(names.begin() + 4, names.begin() + 8);
  EXPECT_EQ(first, (std::vector<std::string>{"pos_conv.0.weight", "pos_conv.0.bias",
                                             "pos_conv.1.weight", "pos_conv.1.bias"}));
  EXPECT_EQ(store.get("pos_conv.1.weight").shape, (Shape{8, 1, 3, 3}));
  EXPECT_EQ(store.get("pos_conv.1.bias").shape, (Shape{8}));
  EXPECT_TRUE(store.get("pos_conv.0.weight").decay);
  EXPECT_FALSE(store.get("pos_conv.0.bias").decay);
  expect_depthwise_init(model, store, {"pos_conv.0.weight", "pos_conv.0.bias", "pos_conv.1.weight"},
                        6);
}

// The convolution changes the function: a model with it differs from the same weights without,
// and only through the patch tokens' neighbourhoods (a zero kernel and bias make it the identity).
TEST(VitPosConvTest, ZeroKernelIsTheIdentityAndEvalIsBatchIndependent) {
  expect_zero_kernel_is_identity(pos_conv_config("avg", {0}), "pos_conv.0", 45);
}

// A block-list setting (pos_conv_blocks, ffn_conv_blocks: `key`, the VitConfig member `blocks`
// and its parser) round-trips through the config map, reads as none from a checkpoint without
// it, and every bad value (text, a block the model lacks, disorder, a repeat, patch dropout)
// is an error naming the key. c has blocks 0 and 1 and the key set to {0, 1}.
void expect_block_list_setting(VitConfig c, const std::string& key,
                               std::vector<int64_t> VitConfig::*blocks,
                               std::vector<int64_t> (*parse)(const std::string&)) {
  auto map = vit::to_config_map(c);
  EXPECT_EQ(map.at(key), "0,1");
  EXPECT_EQ(vit::from_config_map(map, "ckpt.h5").*blocks, c.*blocks);
  EXPECT_EQ(vit::to_config_map(gradient_config("avg")).at(key), "none");
  auto old_checkpoint = map;  // written before the setting existed: none
  old_checkpoint.erase(key);
  EXPECT_TRUE((vit::from_config_map(old_checkpoint, "old.h5").*blocks).empty());
  EXPECT_EQ(parse("0, 3"), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(parse("1 ,0"), (std::vector<int64_t>{1, 0}));  // validate() checks the order
  EXPECT_TRUE(parse("none").empty());
  for (const char* bad : {"-1", "x", "0,,y", "1.5"}) EXPECT_THROW(parse(bad), UsageError) << bad;
  expect_map_error(map, key, "2");  // the model has blocks 0 and 1
  expect_map_error(map, key, "a");
  for (std::vector<int64_t> bad : {std::vector<int64_t>{2}, {1, 0}, {0, 0}}) {
    c.*blocks = bad;
    expect_usage_error(c, key);
  }
  c.*blocks = {0};
  c.patch_drop = 0.5f;  // the convolution needs the whole grid
  expect_usage_error(c, key);
}

TEST(VitPosConvTest, ConfigurationRoundTripsAndBadBlocksNameTheOption) {
  expect_block_list_setting(pos_conv_config("avg", {0, 1}), "pos_conv_blocks",
                            &VitConfig::pos_conv_blocks, vit::parse_pos_conv_blocks);
}

// ---- The MLP convolution (vit.h: ffn_conv_blocks) ----

VitConfig ffn_conv_config(const std::string& pool, std::vector<int64_t> blocks) {
  VitConfig c = gradient_config(pool);
  c.ffn_conv_blocks = std::move(blocks);
  return c;
}

class VitFfnConvGradientTest : public ::testing::TestWithParam<const char*> {};  // pool

// In block 0 only; in both blocks together with a positional convolution after block 0 and
// dropout, drop-path and the diagonal mask (the masks part of a fixed function, as above). With
// token pooling the last block's patch rows do not reach the logits, so its MLP convolution gets
// no gradient, exactly.
TEST_P(VitFfnConvGradientTest, BackwardMatchesFiniteDifferences) {
  const std::string pool = GetParam();
  expect_model_gradients(ffn_conv_config(pool, {0}), 46, GradientRun{});
  VitConfig c = ffn_conv_config(pool, {0, 1});
  c.pos_conv_blocks = {0};
  c.dropout = 0.2f;
  c.drop_path = 0.5f;
  c.diag_mask = true;
  GradientRun run;
  run.nonzero = pool == "avg";
  expect_model_gradients(c, 47, run);
}

INSTANTIATE_TEST_SUITE_P(Pools, VitFfnConvGradientTest, ::testing::Values("token", "avg"),
                         [](const auto& p) { return std::string(p.param); });

namespace {

// Pool "token" reads only the class token's row of the last block, so that block computes only
// that row (the model passes it as the block's only query row, nn::QueryRows). The logits,
// d(images) and every parameter's gradient must be those of the full last block, which keep_weights
// on its attention (as attention maps set it) still runs; and the pruned step must need less
// activation memory. With a positional convolution after block 0 and MLP convolutions in both
// blocks (the last one's sees the class token alone and passes it unchanged), in f32 and, where the
// CPU has the instructions, in bf16.
void expect_class_row_only(ops::Precision precision) {
  VitConfig c = ffn_conv_config("token", {0, 1});
  c.pos_conv_blocks = {0};
  ParamStore store;
  VisionTransformer model(store, c);
  store.finalize();
  std::mt19937 gen(71);
  randomize(store, gen);
  const Tensor images = random_tensor({3, c.channels, c.image_height, c.image_width}, gen);
  const Tensor dlogits = random_tensor({3, c.num_classes}, gen);
  struct Run {
    Tensor logits, dimages, grads;
    size_t memory = 0;
  };
  auto run = [&](bool full) {
    model.blocks().back().attention().keep_weights = full;
    Arena arena;
    arena.set_poison(true);
    nn::Context ctx{true, &arena, nullptr};
    ctx.precision = precision;
    store.zero_grad();
    Run r;
    r.logits = model.forward(ctx, images).clone();
    Tensor dimages;
    model.backward(ctx, dlogits, &dimages);
    r.dimages = dimages.clone();
    r.grads = store.grads().clone();
    r.memory = arena.high_water();
    return r;
  };
  SCOPED_TRACE(ops::precision_name(precision));
  const double tol = precision == ops::Precision::f32 ? 1e-5 : 1e-3;
  const Run full = run(true), pruned = run(false);
  EXPECT_TRUE(all_close(pruned.logits, full.logits, tol, tol));
  EXPECT_TRUE(all_close(pruned.dimages, full.dimages, tol, tol));
  EXPECT_TRUE(all_close(pruned.grads, full.grads, tol, tol));
  EXPECT_GT(ops::l2_norm(pruned.grads), 0.0);
  EXPECT_LT(pruned.memory, full.memory);
  model.blocks().back().attention().keep_weights = false;
}

}  // namespace

TEST(VitClassRowTest, LastBlockComputesOnlyTheClassRowWithTheSameResults) {
  expect_class_row_only(ops::Precision::f32);
}

TEST(VitClassRowTest, LastBlockComputesOnlyTheClassRowWithTheSameResultsInBf16) {
  SKIP_WITHOUT_BF16();
  expect_class_row_only(ops::Precision::bf16);
}

TEST(VitFfnConvTest, NamesShapesDecayAndInit) {
  const VitConfig c = ffn_conv_config("avg", {1});
  ParamStore store;
  VisionTransformer model(store, c);
  const std::vector<std::string> names = names_of(store);
  // Block 1's parameters, then the convolution, then the final norm.
  const auto at = std::find(names.begin(), names.end(), "blocks.1.mlp.fc2.bias");
  ASSERT_NE(at, names.end());
  ASSERT_GE(names.end() - at, 3);
  EXPECT_EQ(std::vector<std::string>(at + 1, at + 3),
            (std::vector<std::string>{"blocks.1.mlp.dwconv.weight", "blocks.1.mlp.dwconv.bias"}));
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) { return n.find("dwconv") != n.npos; }),
            2);
  EXPECT_EQ(store.get("blocks.1.mlp.dwconv.weight").shape, (Shape{c.d_ff, 1, 3, 3}));
  EXPECT_EQ(store.get("blocks.1.mlp.dwconv.bias").shape, (Shape{c.d_ff}));
  EXPECT_TRUE(store.get("blocks.1.mlp.dwconv.weight").decay);
  EXPECT_FALSE(store.get("blocks.1.mlp.dwconv.bias").decay);
  expect_depthwise_init(model, store, {"blocks.1.mlp.dwconv.weight", "blocks.1.mlp.dwconv.bias"},
                        7);
}

// A zero kernel and bias make the MLP convolution the identity; otherwise it changes the
// function, and eval stays independent of the batch.
TEST(VitFfnConvTest, ZeroKernelIsTheIdentityAndEvalIsBatchIndependent) {
  expect_zero_kernel_is_identity(ffn_conv_config("avg", {0}), "blocks.0.mlp.dwconv", 48);
}

TEST(VitFfnConvTest, ConfigurationRoundTripsAndBadBlocksNameTheOption) {
  expect_block_list_setting(ffn_conv_config("avg", {0, 1}), "ffn_conv_blocks",
                            &VitConfig::ffn_conv_blocks, vit::parse_ffn_conv_blocks);
}

TEST(VitDiagMaskTest, ConfigurationRoundTripsAndOldCheckpointsHaveNoMask) {
  VitConfig c = gradient_config("avg");
  EXPECT_EQ(vit::to_config_map(c).at("diag_mask"), "false");
  c.diag_mask = true;
  auto map = vit::to_config_map(c);
  EXPECT_EQ(map.at("diag_mask"), "true");
  EXPECT_TRUE(vit::from_config_map(map, "ckpt.h5").diag_mask);
  map.erase("diag_mask");  // written before the setting existed: no mask
  EXPECT_FALSE(vit::from_config_map(map, "old.h5").diag_mask);
  expect_map_error(vit::to_config_map(c), "diag_mask", "maybe");
}

// ---- Training in each precision ----

namespace {

// A small ViT learning a fixed batch of random images with random labels by heart (every part of
// the backward matters) from one start, in a precision: the losses of `steps` steps.
std::vector<double> vit_losses(ops::Precision precision, int steps) {
  vit::VitConfig c;
  c.image_height = c.image_width = 16;
  c.patch_size = 4;
  c.channels = 1;
  c.num_classes = 8;
  c.d_model = 64;
  c.heads = 1;  // d_head 64: also the shape of the f32 fused attention kernel
  c.d_ff = 128;
  c.layers = 2;
  c.preprocess.mean = {0.5f};
  c.preprocess.std = {0.5f};
  ParamStore store;
  vit::VisionTransformer model(store, c);
  store.finalize();
  ops::Rng rng(3);
  model.init(rng);
  optim::AdamWOptions o;
  o.weight_decay = 0;
  optim::AdamW adam(store, o);
  const int64_t B = 32;
  Tensor images({B, 1, 16, 16}), labels({B}, DType::i32);
  ops::Rng data(4);
  for (int64_t i = 0; i < images.numel(); ++i) images.f32()[i] = static_cast<float>(data.normal());
  for (int64_t i = 0; i < B; ++i) labels.i32()[i] = static_cast<int32_t>(data.next_u64() % 8);
  Arena arena;
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    arena.reset();
    nn::Context ctx{true, &arena, &rng};
    ctx.precision = precision;
    const Tensor logits = model.forward(ctx, images);
    Tensor dlogits = ctx.alloc(logits.shape());
    losses.push_back(
        ops::cross_entropy_forward_backward(logits, labels, 0.f, -100, 1.f, dlogits).loss);
    store.zero_grad();
    model.backward(ctx, dlogits);
    adam.step(2e-3f);
  }
  return losses;
}

}  // namespace

class VitTraining : public ::testing::TestWithParam<ops::Precision> {};

// The ViT memorises the batch in each precision, and with bf16 products about as fast as in f32.
TEST_P(VitTraining, AViTLearnsAsInF32) {
  const ops::Precision precision = GetParam();
  SKIP_UNLESS_SUPPORTED(precision);
  const OneThread one_thread;
  const int steps = 120;
  const std::vector<double> losses = vit_losses(precision, steps);
  EXPECT_LT(losses.back(), 0.1 * losses[0]) << "memorises the batch";
  if (precision == ops::Precision::f32) return;
  const std::vector<double> f32 = vit_losses(ops::Precision::f32, steps);
  std::printf(
      "[ %s ] ViT loss: start %.4f / %.4f, step 40 %.4f / %.4f, end %.4f / %.4f (f32 / %s)\n",
      ops::precision_name(precision), f32[0], losses[0], f32[40], losses[40], f32.back(),
      losses.back(), ops::precision_name(precision));
  EXPECT_NEAR(losses[0], f32[0], 0.01) << "the same start";
  EXPECT_LT(losses[40], 1.5 * f32[40] + 0.05) << "and about as fast";
}

INSTANTIATE_TEST_SUITE_P(Precisions, VitTraining, ::testing::ValuesIn(test::kPrecisions),
                         test::precision_case_name);

// nn::MultiHeadAttention's paths (nn::AttentionPath) against its reference path: the fused and the
// blocked kernels, in f32 and (blocked) with bf16 products, for self- and cross-attention with
// every mask the path takes and attention dropout with the same draw: the output, the input
// gradients and every parameter gradient. Then the same through pre- and post-norm encoder and
// decoder layers, central finite differences through each path, the choice itself,
// keep_weights, and the activation memory of an encoder layer at 2,048 tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "util/op_test_util.h"
#include "util/test_util.h"

namespace vitk::nn {

// For gtest's messages.
void PrintTo(AttentionPath path, std::ostream* os) {
  *os << attention_path_name(path);
}

namespace {

using test::all_close;
using test::random_tensor;
using test::randomize;

// The parameters' ranges here: biases in ±0.3 (randomize's default: ±0.2).
const test::RandomRanges kRanges{0.3f, 0.3f};

// The request that makes a forward take `path` where the path applies.
AttentionKernel request(AttentionPath path) {
  switch (path) {
    case AttentionPath::reference:
      return AttentionKernel::reference;
    case AttentionPath::fused:
      return AttentionKernel::materialized;  // without a mask and dropout, in f32
    case AttentionPath::blocked:
      return AttentionKernel::blocked;
  }
  return AttentionKernel::automatic;
}

// Why this build or CPU cannot run `path` at `precision` (empty: it can).
std::string cannot_run(AttentionPath path, ops::Precision precision) {
  if (precision == ops::Precision::bf16 && !ops::bf16_supported())
    return "no AVX512_BF16 on this CPU (" + ops::cpu_isa() + ")";
  if (path == AttentionPath::fused && !ops::fused_attention_supported(int64_t{64}))
    return "no fused attention kernel in this build (needs AVX-512)";
  return "";
}

#define SKIP_UNLESS_RUNNABLE(path, precision) \
  if (const std::string why = cannot_run(path, precision); !why.empty()) GTEST_SKIP() << why

// One training step of `run` (forward and backward, returning the output followed by the input
// gradients) with the given kernel; the parameter gradients are appended.
using Step = std::function<std::vector<Tensor>(Context&)>;
std::vector<Tensor> step(ParamStore& store, AttentionKernel kernel, ops::Precision precision,
                         const Step& run, uint64_t rng_seed = 9) {
  store.zero_grad();
  Arena arena;
  arena.set_poison(true);  // a read of memory nobody wrote shows as NaN
  ops::Rng rng(rng_seed);
  Context ctx{true, &arena, &rng};
  ctx.attention_kernel = kernel;
  ctx.precision = precision;
  std::vector<Tensor> out;
  for (const Tensor& t : run(ctx)) out.push_back(t.clone());
  for (auto& p : store.params()) out.push_back(p.grad.clone());
  return out;
}

// The largest |a − b| (b empty: |a|) over the elements of a.
double max_abs_diff(const Tensor& a, const Tensor& b = Tensor()) {
  const std::vector<double> x = test::to_double(a), y = b.empty() ? x : test::to_double(b);
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(b.empty() ? x[i] : x[i] - y[i]));
  return m;
}

// Outputs and gradients of a path agree with the reference path's to rounding in f32, element by
// element. With bf16 products the reference path rounds q, k, v, the weights and their gradients
// to bf16 (8 bits of mantissa) where the blocked kernel computes in f32: each tensor then agrees
// to a few per cent of its largest value (elements that cancel have no relative bound).
void expect_same(const std::vector<Tensor>& path, const std::vector<Tensor>& reference,
                 ops::Precision precision, const std::string& what) {
  ASSERT_EQ(path.size(), reference.size());
  for (size_t i = 0; i < path.size(); ++i) {
    SCOPED_TRACE(what + ": tensor " + std::to_string(i) +
                 " (0 is the output, then input and parameter gradients)");
    if (precision == ops::Precision::f32) {
      EXPECT_TRUE(all_close(path[i], reference[i], 1e-5, 1e-4));
    } else {
      EXPECT_LE(max_abs_diff(path[i], reference[i]), 3e-2 * max_abs_diff(reference[i]));
    }
  }
}

AttentionMask make_mask(bool padded, bool causal, int64_t B, int64_t Tk) {
  AttentionMask m;
  m.causal = causal;
  if (padded) {
    std::vector<int32_t> lengths(static_cast<size_t>(B), static_cast<int32_t>(Tk));
    lengths[1] = 0;  // a sequence with no key at all
    if (B > 2) lengths[2] = static_cast<int32_t>(Tk / 2 + 3);
    m.key_lengths = test::ids_tensor(lengths);
  }
  return m;
}

// ---- MultiHeadAttention: each path against the reference path ----
struct MhaCase {
  AttentionPath path;
  ops::Precision precision;
  bool cross, padded, causal;
  int64_t heads;  // d_model 64: d_head 32 with 2 heads, 64 with 1 (the fused kernel's size)
  float dropout;
};

std::string case_name(const MhaCase& c) {
  return std::string(attention_path_name(c.path)) + "_" + ops::precision_name(c.precision) + "_" +
         (c.cross ? "cross" : "self") + (c.padded ? "_padded" : "") + (c.causal ? "_causal" : "") +
         "_heads" + std::to_string(c.heads) + (c.dropout > 0 ? "_dropout" : "");
}

void PrintTo(const MhaCase& c, std::ostream* os) {
  *os << case_name(c);
}

std::vector<MhaCase> mha_cases() {
  const ops::Precision f32 = ops::Precision::f32, bf16 = ops::Precision::bf16;
  std::vector<MhaCase> cases;
  // The blocked kernel takes every mask but the diagonal one, and dropout.
  for (ops::Precision p : {f32, bf16}) {
    for (const MhaCase& c : {MhaCase{AttentionPath::blocked, p, false, false, false, 2, 0.f},
                             MhaCase{AttentionPath::blocked, p, false, true, false, 2, 0.f},
                             MhaCase{AttentionPath::blocked, p, false, false, true, 2, 0.f},
                             MhaCase{AttentionPath::blocked, p, false, true, true, 2, 0.f},
                             MhaCase{AttentionPath::blocked, p, true, true, true, 1, 0.f},
                             MhaCase{AttentionPath::blocked, p, false, true, true, 2, 0.3f},
                             MhaCase{AttentionPath::blocked, p, true, true, false, 2, 0.3f}})
      cases.push_back(c);
  }
  for (const MhaCase& c : {MhaCase{AttentionPath::blocked, f32, false, false, false, 1, 0.f},
                           MhaCase{AttentionPath::blocked, f32, true, false, false, 2, 0.f},
                           MhaCase{AttentionPath::blocked, f32, true, true, false, 2, 0.f}})
    cases.push_back(c);
  // The fused kernel: no mask, no dropout, f32, d_head 64.
  cases.push_back({AttentionPath::fused, f32, false, false, false, 1, 0.f});
  cases.push_back({AttentionPath::fused, f32, true, false, false, 1, 0.f});
  return cases;
}

// A layer for a case (d_model 64, or smaller where given), its parameters drawn from `seed`, with
// inputs x [B, Tq, d], memory [B, Tk, d] for cross-attention and dy [B, Tq, d], and the mask.
struct MhaSetup {
  MhaSetup(const MhaCase& c, int64_t B, int64_t Tq, int64_t Tk, uint32_t seed, int64_t d = 64)
      : attn(store, "attn", config_of(c, d)) {
    store.finalize();
    randomize(store, seed, kRanges);
    std::mt19937 gen(seed + 1);
    x = random_tensor({B, Tq, d}, gen);
    if (c.cross) memory = random_tensor({B, Tk, d}, gen);
    dy = random_tensor({B, Tq, d}, gen);
    mask = make_mask(c.padded, c.causal, B, Tk);
  }
  static AttentionConfig config_of(const MhaCase& c, int64_t d) {
    AttentionConfig config;
    config.d_model = d;
    config.heads = c.heads;
    config.cross = c.cross;
    config.dropout = c.dropout;
    return config;
  }
  ParamStore store;
  MultiHeadAttention attn;
  Tensor x, memory, dy;
  AttentionMask mask;
};

class MhaPath : public ::testing::TestWithParam<MhaCase> {};

TEST_P(MhaPath, EqualsTheReferencePath) {
  const MhaCase c = GetParam();
  SKIP_UNLESS_RUNNABLE(c.path, c.precision);
  MhaSetup s(c, 3, 70, c.cross ? 131 : 70, 3);
  AttentionPath ran = AttentionPath::reference;
  const Step run = [&](Context& ctx) {
    std::vector<Tensor> out = {s.attn.forward(ctx, s.x, s.memory, s.mask)};
    ran = s.attn.path();
    Tensor dmemory;
    out.push_back(s.attn.backward(ctx, s.dy, c.cross ? &dmemory : nullptr));
    if (c.cross) out.push_back(dmemory);
    return out;
  };
  const std::vector<Tensor> got = step(s.store, request(c.path), c.precision, run);
  EXPECT_EQ(ran, c.path);
  const std::vector<Tensor> want = step(s.store, AttentionKernel::reference, c.precision, run);
  EXPECT_EQ(ran, AttentionPath::reference);
  expect_same(got, want, c.precision, "attention");
}

INSTANTIATE_TEST_SUITE_P(Cases, MhaPath, ::testing::ValuesIn(mha_cases()),
                         [](const ::testing::TestParamInfo<MhaCase>& p) {
                           return case_name(p.param);
                         });

// loss = Σ w ⊙ forward(x, memory) through the case's path, in f32: x, memory and every parameter
// against central finite differences. Dropout draws the same mask in every evaluation (a fresh
// counter-based generator), so the loss is a smooth function. d_model 8, or 64 for the fused
// kernel (its heads are 64 wide), where every eleventh element of the larger tensors is perturbed.
class MhaPathGradient : public ::testing::TestWithParam<MhaCase> {};

TEST_P(MhaPathGradient, BackwardMatchesFiniteDifferences) {
  const MhaCase c = GetParam();
  SKIP_UNLESS_RUNNABLE(c.path, c.precision);
  const bool fused = c.path == AttentionPath::fused;
  MhaSetup s(c, fused ? 2 : 3, 5, c.cross ? 7 : 5, 13, fused ? 64 : 8);  // s.dy: loss weights
  auto forward = [&](bool training, Arena& arena) {
    ops::Rng rng(21);
    Context ctx{training, &arena, &rng};
    ctx.attention_kernel = request(c.path);
    return s.attn.forward(ctx, s.x, s.memory, s.mask);
  };
  s.store.zero_grad();
  Arena arena;
  forward(/*training=*/true, arena);
  ASSERT_EQ(s.attn.path(), c.path);
  Context ctx{true, &arena, nullptr};
  Tensor dmemory;
  const Tensor dx = s.attn.backward(ctx, s.dy, c.cross ? &dmemory : nullptr).clone();
  if (c.cross) dmemory = dmemory.clone();

  auto loss = [&]() {
    arena.reset();
    return test::weighted_sum(forward(/*training=*/c.dropout > 0.f, arena), s.dy);
  };
  test::FdOptions opt;
  opt.h = 3e-3;
  opt.atol = 1e-3;
  opt.rtol = 1e-2;
  test::FdOptions sampled = opt;
  sampled.skip = [](int64_t i) { return i % 11 != 0; };
  auto options = [&](const Tensor& t) { return fused && t.numel() > 256 ? sampled : opt; };
  EXPECT_GRAD_OK(test::check_gradient("x", s.x, dx, loss, options(s.x)));
  if (c.cross) {
    EXPECT_GRAD_OK(test::check_gradient("memory", s.memory, dmemory, loss, options(s.memory)));
  }
  for (auto& p : s.store.params()) {
    const Tensor grad = p.grad.clone();
    EXPECT_GRAD_OK(test::check_gradient(p.name, p.value, grad, loss, options(p.value)));
  }
}

// The reference path has finite-difference tests of its own for every score and mask
// (test_attention.cpp); here it runs through the same driver as the fast paths.
INSTANTIATE_TEST_SUITE_P(
    Cases, MhaPathGradient,
    ::testing::Values(
        MhaCase{AttentionPath::reference, ops::Precision::f32, false, true, true, 2, 0.f},
        MhaCase{AttentionPath::reference, ops::Precision::f32, true, true, false, 1, 0.3f},
        MhaCase{AttentionPath::fused, ops::Precision::f32, false, false, false, 1, 0.f},
        MhaCase{AttentionPath::fused, ops::Precision::f32, true, false, false, 1, 0.f},
        MhaCase{AttentionPath::blocked, ops::Precision::f32, false, true, true, 2, 0.f},
        MhaCase{AttentionPath::blocked, ops::Precision::f32, true, true, false, 2, 0.f},
        MhaCase{AttentionPath::blocked, ops::Precision::f32, true, true, true, 1, 0.f},
        MhaCase{AttentionPath::blocked, ops::Precision::f32, false, true, true, 2, 0.3f}),
    [](const ::testing::TestParamInfo<MhaCase>& p) { return case_name(p.param); });

// ---- The choice ----
// Which path a forward takes for a request, score, mask, dropout, precision and keep_weights.
struct Choice {
  AttentionKernel kernel;
  Score score;
  bool padded;
  float dropout;
  ops::Precision precision;
  bool keep_weights;
  AttentionPath want;
};

// Runs a forward for each choice and checks the path it took.
void expect_choices(const std::vector<Choice>& choices) {
  std::mt19937 gen(31);
  const Tensor x = random_tensor({2, 6, 64}, gen);
  for (const Choice& ch : choices) {
    SCOPED_TRACE(std::string("kernel ") + std::to_string(static_cast<int>(ch.kernel)) + ", " +
                 score_name(ch.score) + (ch.padded ? ", padded" : "") +
                 (ch.dropout > 0 ? ", dropout" : "") + ", " + ops::precision_name(ch.precision) +
                 (ch.keep_weights ? ", keep_weights" : ""));
    AttentionConfig config;
    config.d_model = 64;
    config.heads = 1;
    config.score = ch.score;
    config.dropout = ch.dropout;
    ParamStore store;
    MultiHeadAttention attn(store, "attn", config);
    store.finalize();
    randomize(store, 32, kRanges);
    attn.keep_weights = ch.keep_weights;
    Arena arena;
    ops::Rng rng(1);
    Context ctx{true, &arena, &rng};
    ctx.attention_kernel = ch.kernel;
    ctx.precision = ch.precision;
    attn.forward(ctx, x, Tensor(), make_mask(ch.padded, false, 2, 6));
    EXPECT_EQ(attention_path_name(attn.path()), std::string(attention_path_name(ch.want)));
  }
}

TEST(AttentionPathChoice, FollowsTheRequestScoreMaskPrecisionAndKeepWeights) {
  const bool fused = ops::fused_attention_supported(int64_t{64});
  const AttentionPath fused_or_reference = fused ? AttentionPath::fused : AttentionPath::reference;
  const ops::Precision f32 = ops::Precision::f32;
  expect_choices({
      // Short sequences: the fused kernel without a mask and dropout in f32, else the reference.
      {AttentionKernel::automatic, Score::scaled_dot, false, 0.f, f32, false, fused_or_reference},
      // keep_weights in training: the reference path, whose backward takes a weights gradient.
      {AttentionKernel::automatic, Score::dot, false, 0.f, f32, true, AttentionPath::reference},
      {AttentionKernel::automatic, Score::scaled_dot, true, 0.f, f32, false,
       AttentionPath::reference},
      {AttentionKernel::automatic, Score::scaled_dot, false, 0.2f, f32, false,
       AttentionPath::reference},
      {AttentionKernel::materialized, Score::scaled_dot, false, 0.f, f32, false,
       fused_or_reference},
      {AttentionKernel::reference, Score::scaled_dot, false, 0.f, f32, false,
       AttentionPath::reference},
      // A forced blocked kernel, but not for the other scores or keep_weights.
      {AttentionKernel::blocked, Score::general, false, 0.f, f32, false, AttentionPath::reference},
      {AttentionKernel::blocked, Score::additive, true, 0.f, f32, false, AttentionPath::reference},
      {AttentionKernel::blocked, Score::dot, false, 0.f, f32, true, AttentionPath::reference},
  });
}

// With bf16 products: the fused kernel (in f32) where it runs, as in f32; the reference path's
// bf16 products with a mask or dropout, unless the blocked kernel is asked for.
TEST(AttentionPathChoice, FollowsTheRequestScoreMaskPrecisionAndKeepWeightsInBf16) {
  SKIP_WITHOUT_BF16();
  const ops::Precision bf16 = ops::Precision::bf16;
  const AttentionPath fused_or_reference =
      ops::fused_attention_supported(int64_t{64}) ? AttentionPath::fused : AttentionPath::reference;
  expect_choices({
      {AttentionKernel::automatic, Score::scaled_dot, false, 0.f, bf16, false, fused_or_reference},
      {AttentionKernel::automatic, Score::scaled_dot, true, 0.f, bf16, false,
       AttentionPath::reference},
      {AttentionKernel::blocked, Score::scaled_dot, true, 0.2f, bf16, false,
       AttentionPath::blocked},
  });
}

// A self-attention layer, the only one in `store`, its parameters drawn from `seed`.
MultiHeadAttention random_attention(ParamStore& store, int64_t d_model, int64_t heads,
                                    uint32_t seed) {
  AttentionConfig config;
  config.d_model = d_model;
  config.heads = heads;
  MultiHeadAttention attn(store, "attn", config);
  store.finalize();
  randomize(store, seed, kRanges);
  return attn;
}

// keep_weights gets the weights whatever the request: the blocked request falls back to a path
// that holds them, and the fused kernel hands over the ones it wrote.
TEST(AttentionPathWeights, KeepWeightsStillGetsTheWeights) {
  ParamStore store;
  MultiHeadAttention attn = random_attention(store, 16, 2, 5);
  std::mt19937 gen(6);
  Tensor x = random_tensor({2, 9, 16}, gen);
  const AttentionMask mask = make_mask(false, true, 2, 9);
  Arena arena;
  Context ctx{false, &arena, nullptr};
  ctx.attention_kernel = AttentionKernel::blocked;
  Tensor y_blocked = attn.forward(ctx, x, Tensor(), mask).clone();
  EXPECT_EQ(attn.path(), AttentionPath::blocked);
  EXPECT_TRUE(attn.weights().empty());
  attn.keep_weights = true;
  Tensor y_kept = attn.forward(ctx, x, Tensor(), mask).clone();
  EXPECT_EQ(attn.path(), AttentionPath::reference);
  ASSERT_EQ(attn.weights().shape(), (Shape{2, 2, 9, 9}));
  EXPECT_EQ(attn.weights().f32()[1], 0.f);  // causal: query 0 does not see key 1
  EXPECT_TRUE(all_close(y_kept, y_blocked, 1e-6, 1e-5));
}

TEST(AttentionPathWeights, TheFusedPathHandsOverItsWeights) {
  SKIP_UNLESS_RUNNABLE(AttentionPath::fused, ops::Precision::f32);
  ParamStore store;
  MultiHeadAttention attn = random_attention(store, 128, 2, 7);
  std::mt19937 gen(8);
  Tensor x = random_tensor({3, 11, 128}, gen);
  attn.keep_weights = true;
  Arena arena;
  Context ctx{false, &arena, nullptr};
  std::vector<Tensor> weights;
  for (AttentionKernel kernel : {AttentionKernel::materialized, AttentionKernel::reference}) {
    ctx.attention_kernel = kernel;
    attn.forward(ctx, x, Tensor(), AttentionMask());
    weights.push_back(attn.weights());
  }
  ASSERT_EQ(weights[0].shape(), (Shape{3, 2, 11, 11}));
  EXPECT_TRUE(weights[0].owning());
  EXPECT_TRUE(all_close(weights[0], weights[1], 1e-6, 1e-5));
}

// ---- Encoder and decoder layers, pre- and post-norm ----
LayerConfig layer_config(bool pre_norm) {
  LayerConfig c;
  c.d_model = 64;
  c.heads = 1;
  c.d_ff = 96;
  c.activation = ops::Activation::gelu;
  c.pre_norm = pre_norm;
  return c;
}

struct LayerCase {
  AttentionPath path;
  bool pre_norm;
};

std::string case_name(const LayerCase& c) {
  return std::string(attention_path_name(c.path)) + (c.pre_norm ? "_PreNorm" : "_PostNorm");
}

void PrintTo(const LayerCase& c, std::ostream* os) {
  *os << case_name(c);
}

class LayerPath : public ::testing::TestWithParam<LayerCase> {};

// The path an attention layer run under ctx should take: the case's, or the reference asked for.
AttentionPath expected(const Context& ctx, AttentionPath path) {
  return ctx.attention_kernel == AttentionKernel::reference ? AttentionPath::reference : path;
}

// A step of `run` through `path` against one through the reference path, in f32.
void expect_like_the_reference(ParamStore& store, AttentionPath path, const Step& run,
                               const std::string& what) {
  expect_same(step(store, request(path), ops::Precision::f32, run),
              step(store, AttentionKernel::reference, ops::Precision::f32, run),
              ops::Precision::f32, what);
}

// The encoder layer with padding (the blocked path) or without a mask (the fused path).
TEST_P(LayerPath, EncoderLayerEqualsTheReferencePath) {
  const LayerCase c = GetParam();
  SKIP_UNLESS_RUNNABLE(c.path, ops::Precision::f32);
  ParamStore store;
  EncoderLayer layer(store, "enc", layer_config(c.pre_norm));
  store.finalize();
  randomize(store, 7, kRanges);
  std::mt19937 gen(8);
  const int64_t B = 3, T = 77;
  Tensor x = random_tensor({B, T, 64}, gen), dy = random_tensor({B, T, 64}, gen);
  const AttentionMask mask = make_mask(c.path == AttentionPath::blocked, false, B, T);
  const Step run = [&](Context& ctx) {
    std::vector<Tensor> out = {layer.forward(ctx, x, mask)};
    EXPECT_EQ(layer.attention().path(), expected(ctx, c.path));
    out.push_back(layer.backward(ctx, dy));
    return out;
  };
  expect_like_the_reference(store, c.path, run, "encoder layer");
}

// The decoder layer: the blocked path takes its causal and padding masks; the fused one its
// cross-attention without a memory mask (its causal self-attention stays on the reference path).
TEST_P(LayerPath, DecoderLayerEqualsTheReferencePath) {
  const LayerCase c = GetParam();
  SKIP_UNLESS_RUNNABLE(c.path, ops::Precision::f32);
  ParamStore store;
  DecoderLayer layer(store, "dec", layer_config(c.pre_norm));
  store.finalize();
  randomize(store, 9, kRanges);
  std::mt19937 gen(10);
  const int64_t B = 3, Tt = 66, Ts = 90;
  Tensor x = random_tensor({B, Tt, 64}, gen), memory = random_tensor({B, Ts, 64}, gen);
  Tensor dy = random_tensor({B, Tt, 64}, gen);
  AttentionMask self_mask = make_mask(true, true, B, Tt);
  self_mask.key_lengths.i32()[1] = 5;  // a decoder target is never empty
  const AttentionMask memory_mask = make_mask(c.path == AttentionPath::blocked, false, B, Ts);
  const Step run = [&](Context& ctx) {
    std::vector<Tensor> out = {layer.forward(ctx, x, memory, self_mask, memory_mask)};
    EXPECT_EQ(layer.cross_attention().path(), expected(ctx, c.path));
    Tensor dmemory;
    out.push_back(layer.backward(ctx, dy, &dmemory));
    out.push_back(dmemory);
    return out;
  };
  expect_like_the_reference(store, c.path, run, "decoder layer");
}

INSTANTIATE_TEST_SUITE_P(Arrangements, LayerPath,
                         ::testing::Values(LayerCase{AttentionPath::blocked, true},
                                           LayerCase{AttentionPath::blocked, false},
                                           LayerCase{AttentionPath::fused, true},
                                           LayerCase{AttentionPath::fused, false}),
                         [](const ::testing::TestParamInfo<LayerCase>& p) {
                           return case_name(p.param);
                         });

// ---- Memory ----
// An encoder layer's forward and backward at 2,048 tokens: with the automatic choice (the blocked
// path) the activation arena stays below an eighth of the weights [B, H, T, T] (67 MB here; the
// layer's other activations take about 6 MB), in f32 and with bf16 products (the blocked kernel
// then computes attention in f32); the materialized path, for contrast, needs more than that.
class LongSequence : public ::testing::Test {
 protected:
  void SetUp() override {
    c_.d_model = 32;
    c_.heads = 4;
    c_.d_ff = 64;
    c_.pre_norm = true;
    layer_.emplace(store_, "enc", c_);
    store_.finalize();
    randomize(store_, 11, kRanges);
    std::mt19937 gen(12);
    x_ = random_tensor({1, kT, 32}, gen);
    dy_ = random_tensor({1, kT, 32}, gen);
  }
  // The arena's high-water mark of one training step; the output in *y.
  double high_water(AttentionKernel kernel, ops::Precision precision, Tensor* y = nullptr) {
    Arena arena;
    Context ctx{true, &arena, nullptr};
    ctx.attention_kernel = kernel;
    ctx.precision = precision;
    Tensor out = layer_->forward(ctx, x_, AttentionMask{});
    if (y) *y = out.clone();
    if (kernel == AttentionKernel::automatic) {
      EXPECT_EQ(layer_->attention().path(), AttentionPath::blocked);
    }
    layer_->backward(ctx, dy_);
    return static_cast<double>(arena.high_water());
  }
  static constexpr int64_t kT = 2048;
  const double weights_bytes_ = 4.0 * 4 * kT * kT;
  LayerConfig c_;
  ParamStore store_;
  std::optional<EncoderLayer> layer_;
  Tensor x_, dy_;
};

TEST_F(LongSequence, EncoderLayerStaysFarBelowTheWeights) {
  EXPECT_LT(high_water(AttentionKernel::automatic, ops::Precision::f32), weights_bytes_ / 8)
      << "bytes";
  EXPECT_GT(high_water(AttentionKernel::materialized, ops::Precision::f32), weights_bytes_)
      << "bytes";
}

TEST_F(LongSequence, Bf16ProductsTakeTheBlockedKernelToo) {
  SKIP_WITHOUT_BF16();
  Tensor y_bf16, y_f32;
  EXPECT_LT(high_water(AttentionKernel::automatic, ops::Precision::bf16, &y_bf16),
            weights_bytes_ / 8)
      << "bytes";
  high_water(AttentionKernel::materialized, ops::Precision::f32, &y_f32);
  // Only the projections and the MLP round to bf16 (8 bits of mantissa): outputs of size ~1
  // agree to a few units of bf16's 2^-8.
  EXPECT_TRUE(all_close(y_bf16, y_f32, 5e-2, 5e-2));
}

}  // namespace
}  // namespace vitk::nn

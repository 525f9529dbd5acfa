// The layers through the blocked attention kernel against the same layers through the
// materialized weights (nn::AttentionKernel): outputs, input gradients and every parameter
// gradient, for self- and cross-attention with every mask, attention dropout with the same draw,
// pre- and post-norm encoder and decoder layers; keep_weights still gets its weights; and the
// activation memory of an encoder layer at 2,048 tokens stays far below one [B, H, T, T] tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "op_test_util.h"
#include "test_util.h"

namespace vitk::nn {
namespace {

using test::all_close;
using test::random_tensor;

void randomize(ParamStore& store, uint32_t seed) {
  std::mt19937 gen(seed);
  for (auto& p : store.params()) {
    const float a =
        p.shape.size() == 2 ? 1.5f / std::sqrt(static_cast<float>(p.shape.back())) : 0.3f;
    const float offset = p.name.find("norm") != std::string::npos &&
                                 p.name.compare(p.name.size() - 7, 7, ".weight") == 0
                             ? 1.f
                             : 0.f;
    std::uniform_real_distribution<float> dist(-a, a);
    for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] = offset + dist(gen);
  }
}

// One training step of `run` (forward and backward, returning the output followed by the input
// gradients) with the given kernel; the parameter gradients are appended.
using Step = std::function<std::vector<Tensor>(Context&)>;
std::vector<Tensor> step(ParamStore& store, AttentionKernel kernel, const Step& run,
                         uint64_t rng_seed = 9) {
  store.zero_grad();
  Arena arena;
  arena.set_poison(true);  // a read of memory nobody wrote shows as NaN
  ops::Rng rng(rng_seed);
  Context ctx{true, &arena, &rng};
  ctx.attention_kernel = kernel;
  std::vector<Tensor> out;
  for (const Tensor& t : run(ctx)) out.push_back(t.clone());
  for (auto& p : store.params()) out.push_back(p.grad.clone());
  return out;
}

void expect_same(const std::vector<Tensor>& blocked, const std::vector<Tensor>& materialized,
                 const std::string& what) {
  ASSERT_EQ(blocked.size(), materialized.size());
  for (size_t i = 0; i < blocked.size(); ++i)
    EXPECT_TRUE(all_close(blocked[i], materialized[i], 1e-5, 1e-4))
        << what << ": tensor " << i << " (0 is the output, then input and parameter gradients)";
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

// ---- MultiHeadAttention ----
struct MhaCase {
  bool cross, padded, causal;
  int64_t heads;  // d_model 64: d_head 32 with 2 heads, 64 with 1 (the fused kernel's size)
  float dropout;
};

class BlockedMha : public ::testing::TestWithParam<MhaCase> {};

TEST_P(BlockedMha, EqualsTheMaterializedPath) {
  const MhaCase c = GetParam();
  const int64_t B = 3, Tq = 70, Tk = c.cross ? 131 : Tq, d = 64;
  AttentionConfig config;
  config.d_model = d;
  config.heads = c.heads;
  config.cross = c.cross;
  config.dropout = c.dropout;
  ParamStore store;
  MultiHeadAttention attn(store, "attn", config);
  store.finalize();
  randomize(store, 3);
  std::mt19937 gen(4);
  Tensor x = random_tensor({B, Tq, d}, gen);
  Tensor memory = c.cross ? random_tensor({B, Tk, d}, gen) : Tensor();
  Tensor dy = random_tensor({B, Tq, d}, gen);
  const AttentionMask mask = make_mask(c.padded, c.causal, B, Tk);
  const Step run = [&](Context& ctx) {
    std::vector<Tensor> out = {attn.forward(ctx, x, memory, mask)};
    Tensor dmemory;
    out.push_back(attn.backward(ctx, dy, c.cross ? &dmemory : nullptr));
    if (c.cross) out.push_back(dmemory);
    return out;
  };
  expect_same(step(store, AttentionKernel::blocked, run),
              step(store, AttentionKernel::materialized, run), "attention");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BlockedMha,
    ::testing::Values(MhaCase{false, false, false, 2, 0.f}, MhaCase{false, true, false, 2, 0.f},
                      MhaCase{false, false, true, 2, 0.f}, MhaCase{false, true, true, 2, 0.f},
                      MhaCase{false, false, false, 1, 0.f}, MhaCase{true, false, false, 2, 0.f},
                      MhaCase{true, true, false, 2, 0.f}, MhaCase{true, true, true, 1, 0.f},
                      MhaCase{false, true, true, 2, 0.3f}, MhaCase{true, true, false, 2, 0.3f}),
    [](const ::testing::TestParamInfo<MhaCase>& p) {
      const MhaCase& c = p.param;
      return std::string(c.cross ? "cross" : "self") + (c.padded ? "_padded" : "") +
             (c.causal ? "_causal" : "") + "_heads" + std::to_string(c.heads) +
             (c.dropout > 0 ? "_dropout" : "");
    });

TEST(BlockedMhaWeights, KeepWeightsStillGetsTheWeights) {
  AttentionConfig config;
  config.d_model = 16;
  config.heads = 2;
  ParamStore store;
  MultiHeadAttention attn(store, "attn", config);
  store.finalize();
  randomize(store, 5);
  std::mt19937 gen(6);
  Tensor x = random_tensor({2, 9, 16}, gen);
  const AttentionMask mask = make_mask(false, true, 2, 9);
  Arena arena;
  Context ctx{false, &arena, nullptr};
  ctx.attention_kernel = AttentionKernel::blocked;
  Tensor y_blocked = attn.forward(ctx, x, Tensor(), mask).clone();
  EXPECT_TRUE(attn.weights().empty());
  attn.keep_weights = true;
  Tensor y_kept = attn.forward(ctx, x, Tensor(), mask).clone();
  ASSERT_EQ(attn.weights().shape(), (Shape{2, 2, 9, 9}));
  EXPECT_EQ(attn.weights().f32()[1], 0.f);  // causal: query 0 does not see key 1
  EXPECT_TRUE(all_close(y_kept, y_blocked, 1e-6, 1e-5));
}

// ---- Encoder and decoder layers, pre- and post-norm ----
LayerConfig layer_config(bool pre_norm) {
  LayerConfig c;
  c.d_model = 64;
  c.heads = 2;
  c.d_ff = 96;
  c.activation = ops::Activation::gelu;
  c.pre_norm = pre_norm;
  return c;
}

class BlockedLayers : public ::testing::TestWithParam<bool> {};  // pre_norm

TEST_P(BlockedLayers, EncoderLayerEqualsTheMaterializedPath) {
  ParamStore store;
  EncoderLayer layer(store, "enc", layer_config(GetParam()));
  store.finalize();
  randomize(store, 7);
  std::mt19937 gen(8);
  const int64_t B = 3, T = 77;
  Tensor x = random_tensor({B, T, 64}, gen), dy = random_tensor({B, T, 64}, gen);
  const AttentionMask mask = make_mask(true, false, B, T);
  const Step run = [&](Context& ctx) {
    std::vector<Tensor> out = {layer.forward(ctx, x, mask)};
    out.push_back(layer.backward(ctx, dy));
    return out;
  };
  expect_same(step(store, AttentionKernel::blocked, run),
              step(store, AttentionKernel::materialized, run), "encoder layer");
}

TEST_P(BlockedLayers, DecoderLayerEqualsTheMaterializedPath) {
  ParamStore store;
  DecoderLayer layer(store, "dec", layer_config(GetParam()));
  store.finalize();
  randomize(store, 9);
  std::mt19937 gen(10);
  const int64_t B = 3, Tt = 66, Ts = 90;
  Tensor x = random_tensor({B, Tt, 64}, gen), memory = random_tensor({B, Ts, 64}, gen);
  Tensor dy = random_tensor({B, Tt, 64}, gen);
  AttentionMask self_mask = make_mask(true, true, B, Tt);
  self_mask.key_lengths.i32()[1] = 5;  // a decoder target is never empty
  const AttentionMask memory_mask = make_mask(true, false, B, Ts);
  const Step run = [&](Context& ctx) {
    std::vector<Tensor> out = {layer.forward(ctx, x, memory, self_mask, memory_mask)};
    Tensor dmemory;
    out.push_back(layer.backward(ctx, dy, &dmemory));
    out.push_back(dmemory);
    return out;
  };
  expect_same(step(store, AttentionKernel::blocked, run),
              step(store, AttentionKernel::materialized, run), "decoder layer");
}

INSTANTIATE_TEST_SUITE_P(Arrangements, BlockedLayers, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "PreNorm" : "PostNorm";
                         });

// ---- Memory ----
// An encoder layer's forward and backward at 2,048 tokens: with the automatic choice the
// activation arena stays below an eighth of the weights [B, H, T, T] (67 MB here; the layer's
// other activations take about 6 MB),
// in f32 and with bf16 products (the blocked kernel then computes attention in f32); the
// materialized path, for contrast, needs more than that.
class LongSequence : public ::testing::Test {
 protected:
  void SetUp() override {
    c_.d_model = 32;
    c_.heads = 4;
    c_.d_ff = 64;
    c_.pre_norm = true;
    layer_.emplace(store_, "enc", c_);
    store_.finalize();
    randomize(store_, 11);
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

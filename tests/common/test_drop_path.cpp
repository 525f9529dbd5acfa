// Stochastic depth (LayerConfig::drop_path) in EncoderLayer: one Bernoulli draw per sample and
// residual branch from ctx.rng, kept branches scaled by 1/(1 − p), the same mask in backward
// (central finite differences with the generator restarted for every evaluation), the dropped
// fraction over many samples, independence of the two branches, and identity in eval.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "util/op_test_util.h"

using namespace vitk;
using namespace vitk::nn;
using namespace vitk::test;

namespace {

constexpr int64_t kD = 8;

LayerConfig config(bool pre_norm, float drop_path) {
  LayerConfig c;
  c.d_model = kD;
  c.heads = 2;
  c.d_ff = 16;
  c.activation = ops::Activation::gelu;
  c.pre_norm = pre_norm;
  c.drop_path = drop_path;
  return c;
}

// The parameters' ranges here: norm gains in 1 ± 0.2 (randomize's default: 1 ± 0.3).
const RandomRanges kRanges{0.2f, 0.2f};

// What the layer must draw: sample b of branch `branch` (0 attention, 1 MLP) is kept when the
// uniform at counter branch·B + b is at least p (the layer has no other dropout, so drop path is
// the only user of the generator).
bool expected_keep(uint64_t seed, int64_t B, int branch, int64_t b, float p) {
  return ops::Rng::to_uniform(ops::Rng::hash(seed, static_cast<uint64_t>(branch * B + b))) >= p;
}

class DropPathTest : public ::testing::TestWithParam<bool> {};  // pre_norm

TEST_P(DropPathTest, BackwardAppliesTheForwardMask) {
  const bool pre = GetParam();
  const float p = 0.5f;
  const int64_t B = 6, T = 3;
  const uint64_t seed = 11;
  ParamStore store;
  EncoderLayer layer(store, "blocks.0", config(pre, p));
  store.finalize();
  std::mt19937 gen(1);
  randomize(store, gen, kRanges);
  Tensor x = random_tensor({B, T, kD}, gen);

  // The draws must both keep and drop something in each branch, or the check proves little.
  for (int branch = 0; branch < 2; ++branch) {
    int kept = 0;
    for (int64_t b = 0; b < B; ++b) kept += expected_keep(seed, B, branch, b, p);
    ASSERT_GT(kept, 0) << "branch " << branch;
    ASSERT_LT(kept, B) << "branch " << branch;
  }

  Arena arena;
  ops::Rng rng(seed);
  Context ctx{true, &arena, &rng};
  store.zero_grad();
  const Tensor y = layer.forward(ctx, x, AttentionMask{});
  EXPECT_EQ(rng.counter(), static_cast<uint64_t>(2 * B)) << "one draw per sample and branch";
  const Tensor w = random_tensor(y.shape(), gen);  // dL/dy
  const Tensor dx = layer.backward(ctx, w).clone();

  Arena fd_arena;
  ops::Rng fd_rng;
  auto loss = [&]() {
    fd_arena.reset();
    fd_rng.set_state(seed, 0);  // the same masks in every evaluation
    Context fctx{true, &fd_arena, &fd_rng};
    return weighted_sum(layer.forward(fctx, x, AttentionMask{}), w);
  };
  EXPECT_GRAD_OK(check_gradient("x", x, dx, loss));
  for (auto& prm : store.params()) {
    const Tensor analytic = prm.grad.clone();
    EXPECT_GT(ops::l2_norm(analytic), 0.0) << prm.name << " gets no gradient";
    EXPECT_GRAD_OK(check_gradient(prm.name, prm.value, analytic, loss));
  }
}

// In eval (and in training with p = 0) the layer is the plain layer and draws nothing.
TEST_P(DropPathTest, EvalIsIdentity) {
  const bool pre = GetParam();
  ParamStore s_drop, s_plain;
  EncoderLayer with(s_drop, "l", config(pre, 0.5f)), plain(s_plain, "l", config(pre, 0.f));
  s_drop.finalize();
  s_plain.finalize();
  std::mt19937 gen(2);
  randomize(s_drop, gen, kRanges);
  s_plain.values().copy_from(s_drop.values());
  Tensor x = random_tensor({4, 3, kD}, gen);
  Arena arena;
  ops::Rng rng(3);
  Context eval{false, &arena, &rng}, train{true, &arena, &rng};
  const Tensor want = plain.forward(eval, x, AttentionMask{}).clone();
  EXPECT_TRUE(bitwise_equal(with.forward(eval, x, AttentionMask{}), want));
  EXPECT_TRUE(bitwise_equal(plain.forward(train, x, AttentionMask{}), want));
  EXPECT_EQ(rng.counter(), 0u);
  // Training with p > 0 changes the output: dropped branches vanish, kept ones are scaled.
  EXPECT_FALSE(bitwise_equal(with.forward(train, x, AttentionMask{}), want));
  EXPECT_EQ(rng.counter(), 8u);
}

INSTANTIATE_TEST_SUITE_P(Layers, DropPathTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "PreNorm" : "PostNorm"; });

// Over many samples, each branch is dropped with probability p, a kept branch is scaled by exactly
// 1/(1 − p), and the two branches draw independently. A pre-norm layer with one branch silenced
// (its output projection zero) exposes the other: y − x = scale_b · branch(x).
TEST(DropPathStatsTest, DroppedFractionIsAboutP) {
  const float p = 0.3f;
  const int64_t B = 4000, T = 1;
  ParamStore store;
  EncoderLayer layer(store, "l", config(true, p));
  store.finalize();
  std::mt19937 gen(4);
  randomize(store, gen, kRanges);
  const Tensor values = store.values().clone();
  Tensor x = random_tensor({B, T, kD}, gen);
  Arena arena;

  // Returns per sample whether the live branch was kept; checks the scale of kept ones.
  auto masks = [&](const std::string& silenced) {
    store.values().copy_from(values);
    store.get(silenced + ".weight").value.zero();
    store.get(silenced + ".bias").value.zero();
    arena.reset();
    Context eval{false, &arena, nullptr};
    const Tensor full = layer.forward(eval, x, AttentionMask{}).clone();  // x + branch(x)
    ops::Rng rng(5);
    Context train{true, &arena, &rng};
    const Tensor y = layer.forward(train, x, AttentionMask{});
    std::vector<bool> kept(B);
    int64_t bad = 0;
    for (int64_t b = 0; b < B; ++b) {
      double dropped_err = 0, kept_err = 0;
      for (int64_t i = 0; i < T * kD; ++i) {
        const int64_t k = b * T * kD + i;
        const double branch = double(full.f32()[k]) - x.f32()[k];
        const double got = double(y.f32()[k]) - x.f32()[k];
        dropped_err = std::max(dropped_err, std::fabs(got));
        kept_err = std::max(kept_err, std::fabs(got - branch / (1.0 - p)));
      }
      kept[b] = dropped_err != 0;
      if (kept[b] && kept_err > 1e-5) ++bad;
    }
    EXPECT_EQ(bad, 0) << silenced << ": kept branches not scaled by 1/(1 - p)";
    return kept;
  };
  const std::vector<bool> attn = masks("l.mlp.fc2"), mlp = masks("l.attn.proj");
  int64_t attn_dropped = 0, mlp_dropped = 0, agree = 0;
  for (int64_t b = 0; b < B; ++b) {
    attn_dropped += !attn[b];
    mlp_dropped += !mlp[b];
    agree += attn[b] == mlp[b];
  }
  // Binomial standard deviations: √(p(1−p)/B) ≈ 0.007; the bounds are about 5 of them.
  EXPECT_NEAR(double(attn_dropped) / B, p, 0.035);
  EXPECT_NEAR(double(mlp_dropped) / B, p, 0.035);
  // Independent draws agree with probability p² + (1 − p)²; identical masks would agree always.
  EXPECT_NEAR(double(agree) / B, p * p + (1 - p) * (1 - p), 0.04);
}

TEST(DropPathErrorsTest, NeedsAGeneratorAndAValidProbability) {
  ParamStore store;
  EncoderLayer layer(store, "blocks.3", config(true, 0.1f));
  store.finalize();
  Arena arena;
  Context train{true, &arena, nullptr};
  Tensor x({1, 2, kD});
  try {
    layer.forward(train, x, AttentionMask{});
    ADD_FAILURE() << "no error without a generator";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("drop_path"), std::string::npos) << e.what();
  }
  ParamStore other;
  EXPECT_THROW(EncoderLayer(other, "bad", config(true, 1.f)), Error);
  ParamStore other2;
  EXPECT_THROW(EncoderLayer(other2, "bad", config(true, -0.1f)), Error);
}

}  // namespace

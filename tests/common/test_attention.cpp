// nn::MultiHeadAttention: forward against a double-precision loop written here, backward against
// central finite differences, dropout, incremental decoding against a full forward, attention
// weights, and the errors for bad shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/nn/nn.h"
#include "util/isa_levels.h"
#include "util/op_test_util.h"

namespace vitk::nn {
namespace {

using test::all_close;
using test::check_gradient;
using test::random_tensor;

const Score kScores[] = {Score::scaled_dot, Score::dot, Score::general, Score::additive};

// A layer with its own parameters, every parameter drawn uniform in [-0.5, 0.5).
struct Layer {
  ParamStore params;
  std::string name;
  AttentionConfig config;
  std::unique_ptr<MultiHeadAttention> attn;

  Layer(const std::string& layer_name, AttentionConfig c, uint32_t seed = 1)
      : name(layer_name), config(c) {
    attn = std::make_unique<MultiHeadAttention>(params, name, config);
    params.finalize();
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
    for (auto& p : params.params()) {
      float* v = p.value.f32();
      for (int64_t i = 0; i < p.numel(); ++i) v[i] = dist(gen);
    }
  }
  const float* value(const std::string& suffix) const {
    const Parameter* p = params.find(name + "." + suffix);
    return p ? p->value.f32() : nullptr;
  }
};

AttentionConfig small_config(Score score, bool cross, float dropout = 0.f) {
  AttentionConfig c;
  c.d_model = 8;
  c.heads = 2;
  c.score = score;
  c.additive_dim = 3;  // not d_head, so that a mix-up of the two shows
  c.cross = cross;
  c.dropout = dropout;
  return c;
}

Tensor lengths_tensor(const std::vector<int32_t>& v) {
  return v.empty() ? Tensor() : test::ids_tensor(v);
}

// ---- The reference: multi-head attention in double precision, straight from the definitions ----
struct Reference {
  std::vector<double> y;        // [B, Tq, d]
  std::vector<double> weights;  // [B, H, Tq, Tk]
};

Reference reference(const Layer& layer, const Tensor& x, const Tensor& memory,
                    const std::vector<int32_t>& lengths, bool causal, bool diagonal = false) {
  const AttentionConfig& c = layer.config;
  const int64_t d = c.d_model, H = c.heads, dh = d / H;
  const int64_t a = c.additive_dim ? c.additive_dim : dh;
  const int64_t B = x.dim(0), Tq = x.dim(1), Tk = c.cross ? memory.dim(1) : Tq;
  const float* xs = x.f32();
  const float* ms = c.cross ? memory.f32() : xs;
  // Rows [row0, row0 + d) of a PyTorch-style in_proj weight [n·d, d] and its bias.
  auto project = [&](const float* src, int64_t T, const float* w, const float* bias, int64_t row0) {
    std::vector<double> out(static_cast<size_t>(B * T * d));
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t o = 0; o < d; ++o) {
        double s = bias ? bias[row0 + o] : 0.0;
        for (int64_t i = 0; i < d; ++i) s += double(src[bt * d + i]) * w[(row0 + o) * d + i];
        out[bt * d + o] = s;
      }
    return out;
  };
  std::vector<double> q, k, v;  // [B, T, d], head h in columns [h·dh, (h+1)·dh)
  if (c.cross) {
    q = project(xs, Tq, layer.value("q.weight"), layer.value("q.bias"), 0);
    k = project(ms, Tk, layer.value("kv.weight"), layer.value("kv.bias"), 0);
    v = project(ms, Tk, layer.value("kv.weight"), layer.value("kv.bias"), d);
  } else {
    q = project(xs, Tq, layer.value("qkv.weight"), layer.value("qkv.bias"), 0);
    k = project(xs, Tk, layer.value("qkv.weight"), layer.value("qkv.bias"), d);
    v = project(xs, Tk, layer.value("qkv.weight"), layer.value("qkv.bias"), 2 * d);
  }
  auto score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    const double* qi = &q[(b * Tq + i) * d + h * dh];
    const double* kj = &k[(b * Tk + j) * d + h * dh];
    double s = 0;
    switch (c.score) {
      case Score::scaled_dot:
      case Score::dot:
        for (int64_t e = 0; e < dh; ++e) s += qi[e] * kj[e];
        return c.score == Score::dot ? s : s / std::sqrt(double(dh));
      case Score::general: {
        const float* w = layer.value("score.weight");
        for (int64_t r = 0; r < dh; ++r)
          for (int64_t e = 0; e < dh; ++e) s += qi[r] * w[r * dh + e] * kj[e];
        return s;
      }
      case Score::additive: {
        const float* wq = layer.value("score.w_q");
        const float* wk = layer.value("score.w_k");
        const float* vv = layer.value("score.v");
        for (int64_t r = 0; r < a; ++r) {
          double pre = 0;
          for (int64_t e = 0; e < dh; ++e) pre += wq[r * dh + e] * qi[e] + wk[r * dh + e] * kj[e];
          s += vv[r] * std::tanh(pre);
        }
        return s;
      }
    }
    return s;
  };
  Reference ref;
  ref.weights.assign(static_cast<size_t>(B * H * Tq * Tk), 0.0);
  std::vector<double> context(static_cast<size_t>(B * Tq * d), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        double* w = &ref.weights[((b * H + h) * Tq + i) * Tk];
        std::vector<bool> visible(Tk);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Tk; ++j) {
          visible[j] = (lengths.empty() || j < lengths[b]) && (!causal || j <= i + (Tk - Tq)) &&
                       !(diagonal && j == i + (Tk - Tq));
          if (visible[j]) w[j] = score(b, h, i, j), mx = std::max(mx, w[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Tk; ++j) sum += visible[j] ? (w[j] = std::exp(w[j] - mx)) : 0.0;
        for (int64_t j = 0; j < Tk; ++j) w[j] = visible[j] ? w[j] / sum : 0.0;
        for (int64_t j = 0; j < Tk; ++j)
          for (int64_t e = 0; e < dh; ++e)
            context[(b * Tq + i) * d + h * dh + e] += w[j] * v[(b * Tk + j) * d + h * dh + e];
      }
  const float* pw = layer.value("proj.weight");
  const float* pb = layer.value("proj.bias");
  ref.y.assign(static_cast<size_t>(B * Tq * d), 0.0);
  for (int64_t bt = 0; bt < B * Tq; ++bt)
    for (int64_t o = 0; o < d; ++o) {
      double s = pb ? pb[o] : 0.0;
      for (int64_t i = 0; i < d; ++i) s += context[bt * d + i] * pw[o * d + i];
      ref.y[bt * d + o] = s;
    }
  return ref;
}

// Runs one forward in a fresh arena (returns an owning copy of y).
Tensor run_forward(Layer& layer, const Tensor& x, const Tensor& memory, const AttentionMask& mask,
                   bool training = false, ops::Rng* rng = nullptr) {
  Arena arena;
  Context ctx;
  ctx.training = training;
  ctx.arena = &arena;
  ctx.rng = rng;
  return layer.attn->forward(ctx, x, memory, mask).clone();
}

Tensor position(const Tensor& x, int64_t t) {  // x [B, T, d] -> x[:, t:t+1, :] [B, 1, d]
  const int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  Tensor out({B, 1, d});
  for (int64_t b = 0; b < B; ++b)
    std::copy(x.f32() + (b * T + t) * d, x.f32() + (b * T + t + 1) * d, out.f32() + b * d);
  return out;
}

std::vector<double> position_ref(const Tensor& y, int64_t t) {
  return test::to_double(position(y, t));
}

bool all_finite(const Tensor& t) {
  for (double v : test::to_double(t))
    if (!std::isfinite(v)) return false;
  return true;
}

template <typename F>
void expect_error_naming(const std::string& layer, F&& f) {
  try {
    f();
    ADD_FAILURE() << "no vitk::Error thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(layer), std::string::npos)
        << "message does not name " << layer << ": " << e.what();
  }
}

// ---- Names, parsing ----
VITK_AT_EVERY_ISA_LEVEL(MultiHeadAttentionLayer);

TEST_P(MultiHeadAttentionLayer, ParsesScoreNames) {
  for (Score s : kScores) EXPECT_EQ(parse_score(score_name(s)), s);
  EXPECT_THROW(parse_score("cosine"), UsageError);
}

TEST_P(MultiHeadAttentionLayer, RegistersPyTorchStyleParameters) {
  {
    ParamStore ps;
    AttentionConfig c = small_config(Score::general, false);
    MultiHeadAttention attn(ps, "enc.layers.0.attn", c);
    EXPECT_EQ(ps.get("enc.layers.0.attn.qkv.weight").shape, (Shape{24, 8}));
    EXPECT_EQ(ps.get("enc.layers.0.attn.qkv.bias").shape, (Shape{24}));
    EXPECT_EQ(ps.get("enc.layers.0.attn.proj.weight").shape, (Shape{8, 8}));
    EXPECT_EQ(ps.get("enc.layers.0.attn.proj.bias").shape, (Shape{8}));
    EXPECT_EQ(ps.get("enc.layers.0.attn.score.weight").shape, (Shape{4, 4}));
    EXPECT_EQ(ps.params().size(), 5u);
  }
  {
    ParamStore ps;
    AttentionConfig c = small_config(Score::additive, true);
    c.bias = false;
    MultiHeadAttention attn(ps, "dec.cross_attn", c);
    EXPECT_EQ(ps.get("dec.cross_attn.q.weight").shape, (Shape{8, 8}));
    EXPECT_EQ(ps.get("dec.cross_attn.kv.weight").shape, (Shape{16, 8}));
    EXPECT_EQ(ps.get("dec.cross_attn.proj.weight").shape, (Shape{8, 8}));
    EXPECT_EQ(ps.get("dec.cross_attn.score.w_q").shape, (Shape{3, 4}));
    EXPECT_EQ(ps.get("dec.cross_attn.score.w_k").shape, (Shape{3, 4}));
    EXPECT_EQ(ps.get("dec.cross_attn.score.v").shape, (Shape{3}));
    EXPECT_EQ(ps.params().size(), 6u);  // no biases
    EXPECT_EQ(ps.find("dec.cross_attn.q.bias"), nullptr);
  }
  {
    ParamStore ps;
    AttentionConfig c = small_config(Score::additive, false);
    c.additive_dim = 0;  // a = d_head
    MultiHeadAttention attn(ps, "a", c);
    EXPECT_EQ(ps.get("a.score.w_q").shape, (Shape{4, 4}));
    EXPECT_EQ(ps.get("a.score.v").shape, (Shape{4}));
  }
}

// ---- Forward against the reference ----
class MhaScore : public ::testing::TestWithParam<Score> {};

TEST_P(MhaScore, ForwardMatchesReference) {
  const Score score = GetParam();
  std::mt19937 gen(7);
  struct MaskCase {
    std::vector<int32_t> lengths;
    bool causal;
    bool diagonal = false;
  };
  for (bool cross : {false, true}) {
    Layer layer("attn", small_config(score, cross), 3);
    const int64_t B = 3, Tq = cross ? 3 : 5, Tk = cross ? 6 : 5;
    Tensor x = random_tensor({B, Tq, 8}, gen);
    Tensor memory = cross ? random_tensor({B, Tk, 8}, gen) : Tensor();
    const std::vector<int32_t> lengths =
        cross ? std::vector<int32_t>{6, 4, 1} : std::vector<int32_t>{5, 3, 2};
    for (const MaskCase& mc :
         {MaskCase{{}, false}, MaskCase{lengths, false}, MaskCase{{}, true},
          MaskCase{lengths, true}, MaskCase{{}, false, true}, MaskCase{lengths, false, true}}) {
      SCOPED_TRACE(std::string(score_name(score)) + (cross ? " cross" : " self") +
                   (mc.lengths.empty() ? "" : " padded") + (mc.causal ? " causal" : "") +
                   (mc.diagonal ? " diagonal" : ""));
      AttentionMask mask{lengths_tensor(mc.lengths), mc.causal, mc.diagonal};
      layer.attn->keep_weights = true;
      Tensor y = run_forward(layer, x, memory, mask);
      Reference ref = reference(layer, x, memory, mc.lengths, mc.causal, mc.diagonal);
      EXPECT_EQ(y.shape(), (Shape{B, Tq, 8}));
      EXPECT_TRUE(all_close(y, ref.y, 2e-5, 1e-4));
      ASSERT_EQ(layer.attn->weights().shape(), (Shape{B, 2, Tq, Tk}));
      EXPECT_TRUE(all_close(layer.attn->weights(), ref.weights, 2e-6, 1e-4));
      // A training forward (dropout off) computes the same thing.
      Tensor yt = run_forward(layer, x, memory, mask, /*training=*/true);
      EXPECT_TRUE(all_close(yt, ref.y, 2e-5, 1e-4));
    }
  }
}

// ---- Backward against central finite differences ----
struct GradCase {
  Tensor x, memory, dy;
  std::vector<int32_t> lengths;
  bool causal = true;
  bool diagonal = false;
};

// loss = Σ dy ⊙ forward(x, memory); checks dx, dmemory and every parameter gradient.
void check_all_gradients(Layer& layer, GradCase& gc, uint64_t dropout_seed = 0) {
  AttentionMask mask{lengths_tensor(gc.lengths), gc.causal, gc.diagonal};
  const bool cross = layer.config.cross;
  const bool dropout = layer.config.dropout > 0.f;
  // Analytic gradients. With dropout, every evaluation draws from a fresh Rng(seed): the
  // generator is counter-based, so the mask is the same in each and the loss is a smooth function.
  layer.params.zero_grad();
  Arena arena;
  ops::Rng rng(dropout_seed);
  Context ctx{true, &arena, &rng};
  layer.attn->forward(ctx, gc.x, gc.memory, mask);
  Tensor dmemory;
  Tensor dx = layer.attn->backward(ctx, gc.dy, cross ? &dmemory : nullptr).clone();
  if (cross) dmemory = dmemory.clone();
  ASSERT_TRUE(all_finite(dx));

  auto loss = [&]() {
    ops::Rng r(dropout_seed);
    Tensor y = run_forward(layer, gc.x, gc.memory, mask, /*training=*/dropout, &r);
    return test::weighted_sum(y, gc.dy);
  };
  test::FdOptions opt;
  opt.h = 3e-3;
  opt.atol = 1e-3;
  opt.rtol = 1e-2;
  EXPECT_GRAD_OK(check_gradient("x", gc.x, dx, loss, opt));
  if (cross) {
    EXPECT_GRAD_OK(check_gradient("memory", gc.memory, dmemory, loss, opt));
  }
  for (auto& p : layer.params.params()) {
    Tensor grad = p.grad.clone();
    EXPECT_GRAD_OK(check_gradient(p.name, p.value, grad, loss, opt));
  }
}

GradCase grad_case(bool cross, std::mt19937& gen) {
  GradCase gc;
  const int64_t B = 2, Tq = 4, Tk = cross ? 3 : 4;
  gc.x = random_tensor({B, Tq, 8}, gen);
  if (cross) gc.memory = random_tensor({B, Tk, 8}, gen);
  gc.dy = random_tensor({B, Tq, 8}, gen);
  // Self: padding cuts the second sequence to 2 keys. Cross: Tq > Tk, so with causal the first
  // query sees no key at all (its gradient must be zero, not NaN).
  gc.lengths = cross ? std::vector<int32_t>{3, 2} : std::vector<int32_t>{4, 2};
  gc.causal = true;
  return gc;
}

TEST_P(MhaScore, BackwardMatchesFiniteDifferencesSelf) {
  std::mt19937 gen(11);
  Layer layer("enc.attn", small_config(GetParam(), false), 5);
  GradCase gc = grad_case(false, gen);
  check_all_gradients(layer, gc);
}

TEST_P(MhaScore, BackwardMatchesFiniteDifferencesCross) {
  std::mt19937 gen(12);
  Layer layer("dec.cross_attn", small_config(GetParam(), true), 6);
  GradCase gc = grad_case(true, gen);
  check_all_gradients(layer, gc);
}

// The diagonal mask (LSA) with padding; in the cross case (Tq > Tk) it hides key i − 1.
TEST_P(MhaScore, BackwardWithDiagonalMaskMatchesFiniteDifferences) {
  std::mt19937 gen(14);
  for (bool cross : {false, true}) {
    SCOPED_TRACE(cross ? "cross" : "self");
    Layer layer("attn", small_config(GetParam(), cross), 10);
    GradCase gc = grad_case(cross, gen);
    gc.causal = false;
    gc.diagonal = true;
    check_all_gradients(layer, gc);
  }
}

TEST_P(MhaScore, BackwardWithDropoutMatchesFiniteDifferencesForTheSameMask) {
  std::mt19937 gen(13);
  for (bool cross : {false, true}) {
    SCOPED_TRACE(cross ? "cross" : "self");
    Layer layer("attn", small_config(GetParam(), cross, 0.3f), 8);
    GradCase gc = grad_case(cross, gen);
    check_all_gradients(layer, gc, /*dropout_seed=*/99);
  }
}

// A loss term on the kept weights (captioning's attention penalty) reaches x, the memory and
// every parameter through dweights: loss = Σ dy ⊙ y + Σ R ⊙ weights, R random.
TEST_P(MhaScore, BackwardWithAWeightsTermMatchesFiniteDifferences) {
  std::mt19937 gen(15);
  for (bool cross : {false, true}) {
    SCOPED_TRACE(cross ? "cross" : "self");
    Layer layer("attn", small_config(GetParam(), cross), 12);
    GradCase gc = grad_case(cross, gen);
    const AttentionMask mask{lengths_tensor(gc.lengths), gc.causal, gc.diagonal};
    const int64_t Tk = cross ? gc.memory.dim(1) : gc.x.dim(1);
    const Tensor r = random_tensor({gc.x.dim(0), layer.config.heads, gc.x.dim(1), Tk}, gen);
    layer.attn->keep_weights = true;
    layer.params.zero_grad();
    Arena arena;
    Context ctx{true, &arena, nullptr};
    layer.attn->forward(ctx, gc.x, gc.memory, mask);
    layer.attn->dweights = r.clone();
    Tensor dmemory;
    const Tensor dx = layer.attn->backward(ctx, gc.dy, cross ? &dmemory : nullptr).clone();
    EXPECT_TRUE(layer.attn->dweights.empty()) << "backward consumes dweights";
    auto loss = [&]() {
      Arena a;
      Context c{true, &a, nullptr};
      const Tensor y = layer.attn->forward(c, gc.x, gc.memory, mask);
      return test::weighted_sum(y, gc.dy) + test::weighted_sum(layer.attn->weights(), r);
    };
    test::FdOptions opt;
    opt.h = 3e-3;
    opt.atol = 1e-3;
    opt.rtol = 1e-2;
    EXPECT_GRAD_OK(check_gradient("x", gc.x, dx, loss, opt));
    if (cross) {
      dmemory = dmemory.clone();
      EXPECT_GRAD_OK(check_gradient("memory", gc.memory, dmemory, loss, opt));
    }
    for (auto& p : layer.params.params()) {
      Tensor grad = p.grad.clone();
      EXPECT_GRAD_OK(check_gradient(p.name, p.value, grad, loss, opt));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Scores, MhaScore, ::testing::ValuesIn(kScores),
                         [](const ::testing::TestParamInfo<Score>& param_info) {
                           return std::string(score_name(param_info.param));
                         });

TEST_P(MultiHeadAttentionLayer, ParameterGradientsAccumulate) {
  std::mt19937 gen(21);
  for (bool cross : {false, true}) {
    Layer layer("attn", small_config(Score::additive, cross), 9);
    GradCase gc = grad_case(cross, gen);
    AttentionMask mask{lengths_tensor(gc.lengths), gc.causal};
    Arena arena;
    Context ctx{true, &arena, nullptr};
    layer.params.zero_grad();
    layer.attn->forward(ctx, gc.x, gc.memory, mask);
    Tensor dm1, dm2;
    Tensor dx1 = layer.attn->backward(ctx, gc.dy, &dm1);
    Tensor once = layer.params.grads().clone();
    Tensor dx2 = layer.attn->backward(ctx, gc.dy, &dm2);
    std::vector<double> twice = test::to_double(once);
    for (double& g : twice) g *= 2;
    EXPECT_TRUE(all_close(layer.params.grads(), twice, 1e-6, 1e-5));
    EXPECT_GT(ops::l2_norm(once), 0.0);
    EXPECT_TRUE(test::bitwise_equal(dx1, dx2));  // input gradients are overwritten, not summed
    if (cross) {
      EXPECT_TRUE(test::bitwise_equal(dm1, dm2));
    }
  }
}

// ---- Masks: rows that see nothing, weights ----
TEST_P(MultiHeadAttentionLayer, DiagonalMaskRefusesAForcedBlockedKernel) {
  std::mt19937 gen(32);
  Layer layer("enc.attn", small_config(Score::scaled_dot, false), 4);
  Tensor x = random_tensor({2, 4, 8}, gen);
  AttentionMask mask;
  mask.diagonal = true;
  Arena arena;
  Context ctx{false, &arena, nullptr};
  ctx.attention_kernel = AttentionKernel::blocked;
  try {
    layer.attn->forward(ctx, x, Tensor(), mask);
    ADD_FAILURE() << "a forced blocked kernel took the diagonal mask";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("enc.attn"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("diagonal"), std::string::npos) << e.what();
  }
  // The automatic choice takes the materialized path, whose weights skip the diagonal.
  ctx.attention_kernel = AttentionKernel::automatic;
  layer.attn->keep_weights = true;
  layer.attn->forward(ctx, x, Tensor(), mask);
  const Tensor& w = layer.attn->weights();
  ASSERT_EQ(w.shape(), (Shape{2, 2, 4, 4}));
  for (int64_t r = 0; r < 2 * 2; ++r)
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(w.f32()[(r * 4 + i) * 4 + i], 0.f);
}

TEST_P(MultiHeadAttentionLayer, RowsThatSeeNothingGiveZeroWeightsAndFiniteOutput) {
  std::mt19937 gen(31);
  for (Score score : kScores) {
    for (bool cross : {false, true}) {
      SCOPED_TRACE(std::string(score_name(score)) + (cross ? " cross" : " self"));
      Layer layer("attn", small_config(score, cross), 4);
      const int64_t B = 2, Tq = 4, Tk = cross ? 2 : 4;
      Tensor x = random_tensor({B, Tq, 8}, gen);
      Tensor memory = cross ? random_tensor({B, Tk, 8}, gen) : Tensor();
      // Sequence 0 is fully padded; in sequence 1 causal cross-attention with Tq > Tk leaves the
      // first two queries blind.
      AttentionMask mask{test::ids_tensor({0, static_cast<int32_t>(Tk)}), true};
      layer.attn->keep_weights = true;
      Arena arena;
      Context ctx{true, &arena, nullptr};
      Tensor y = layer.attn->forward(ctx, x, memory, mask);
      ASSERT_TRUE(all_finite(y));
      const Tensor& w = layer.attn->weights();
      const float* pw = w.f32();
      const float* bias = layer.value("proj.bias");
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Tq; ++i) {
          const bool blind = b == 0 || i + (Tk - Tq) < 0;
          for (int64_t h = 0; h < 2; ++h) {
            double sum = 0;
            for (int64_t j = 0; j < Tk; ++j) sum += pw[((b * 2 + h) * Tq + i) * Tk + j];
            EXPECT_NEAR(sum, blind ? 0.0 : 1.0, 1e-6) << "b " << b << " i " << i;
          }
          // A blind query has a zero context vector, so its output is the projection bias.
          if (blind) {
            for (int64_t o = 0; o < 8; ++o) EXPECT_FLOAT_EQ(y.f32()[(b * Tq + i) * 8 + o], bias[o]);
          }
        }
      Tensor dy = random_tensor({B, Tq, 8}, gen);
      Tensor dmemory;
      Tensor dx = layer.attn->backward(ctx, dy, &dmemory);
      EXPECT_TRUE(all_finite(dx));
      EXPECT_TRUE(all_finite(layer.params.grads()));
      if (cross) {
        EXPECT_TRUE(all_finite(dmemory));
      }
    }
  }
}

TEST_P(MultiHeadAttentionLayer, KeptWeightsAreCausalAndSumToOne) {
  std::mt19937 gen(41);
  Layer layer("attn", small_config(Score::scaled_dot, false), 2);
  const int64_t B = 2, T = 5, H = 2;
  Tensor x = random_tensor({B, T, 8}, gen);
  layer.attn->keep_weights = true;
  Arena arena;
  Context ctx{false, &arena, nullptr};
  layer.attn->forward(ctx, x, Tensor(), AttentionMask{test::ids_tensor({5, 3}), true});
  arena.reset();  // the weights are owned by the layer and survive the arena
  Tensor filler = arena.alloc({4096});
  filler.fill(123.f);
  const Tensor& w = layer.attn->weights();
  ASSERT_TRUE(w.owning());
  ASSERT_EQ(w.shape(), (Shape{B, H, T, T}));
  const int len[] = {5, 3};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          const float v = w.f32()[((b * H + h) * T + i) * T + j];
          if (j > i || j >= len[b]) {
            EXPECT_EQ(v, 0.f) << b << h << i << j;
          } else {
            EXPECT_GT(v, 0.f);
          }
          sum += v;
        }
        EXPECT_NEAR(sum, 1.0, 1e-6);
      }
  layer.attn->keep_weights = false;
  layer.attn->forward(ctx, x, Tensor(), AttentionMask{});
  EXPECT_TRUE(layer.attn->weights().empty());
}

// ---- Dropout on the attention weights ----
TEST_P(MultiHeadAttentionLayer, DropoutIsDeterministicPerSeedAndOffInInference) {
  std::mt19937 gen(51);
  Layer layer("attn", small_config(Score::scaled_dot, false, 0.4f), 3);
  Tensor x = random_tensor({2, 6, 8}, gen);
  AttentionMask mask{test::ids_tensor({6, 4}), true};
  ops::Rng r1(5), r2(5), r3(6);
  Tensor a = run_forward(layer, x, Tensor(), mask, true, &r1);
  Tensor b = run_forward(layer, x, Tensor(), mask, true, &r2);
  Tensor c = run_forward(layer, x, Tensor(), mask, true, &r3);
  EXPECT_TRUE(test::bitwise_equal(a, b));
  EXPECT_FALSE(test::bitwise_equal(a, c));
  Reference ref = reference(layer, x, Tensor(), {6, 4}, true);
  EXPECT_FALSE(all_close(a, ref.y, 1e-4, 1e-3));  // dropout did something in training
  ops::Rng r4(5);
  Tensor inference = run_forward(layer, x, Tensor(), mask, false, &r4);
  EXPECT_TRUE(all_close(inference, ref.y, 2e-5, 1e-4));
  EXPECT_EQ(r4.counter(), 0u);  // inference draws nothing
  // Training with dropout but without a generator is an error naming the layer.
  expect_error_naming("attn", [&] { run_forward(layer, x, Tensor(), mask, true, nullptr); });
}

TEST_P(MultiHeadAttentionLayer, DropoutIsUnbiased) {
  std::mt19937 gen(52);
  Layer layer("attn", small_config(Score::dot, false, 0.3f), 3);
  Tensor x = random_tensor({2, 4, 8}, gen);
  AttentionMask mask{test::ids_tensor({4, 3}), false};
  Reference ref = reference(layer, x, Tensor(), {4, 3}, false);
  const int kSeeds = 2000;
  std::vector<double> mean(ref.y.size(), 0.0);
  for (int s = 0; s < kSeeds; ++s) {
    ops::Rng rng(static_cast<uint64_t>(s));
    std::vector<double> y = test::to_double(run_forward(layer, x, Tensor(), mask, true, &rng));
    for (size_t i = 0; i < y.size(); ++i) mean[i] += y[i] / kSeeds;
  }
  double worst = 0;
  for (size_t i = 0; i < mean.size(); ++i) worst = std::max(worst, std::fabs(mean[i] - ref.y[i]));
  EXPECT_LT(worst, 0.03);
}

// ---- Incremental decoding ----
TEST_P(MultiHeadAttentionLayer, SelfAttentionStepsEqualCausalForward) {
  std::mt19937 gen(61);
  for (Score score : kScores) {
    SCOPED_TRACE(score_name(score));
    Layer layer("dec.self_attn", small_config(score, false), 10);
    const int64_t B = 2, T = 6, H = 2;
    Tensor x = random_tensor({B, T, 8}, gen);
    layer.attn->keep_weights = true;
    Tensor full = run_forward(layer, x, Tensor(), AttentionMask{Tensor(), true});
    Tensor full_weights = layer.attn->weights().clone();  // [B, H, T, T]
    KVCache cache;
    Arena arena;
    Context ctx{false, &arena, nullptr};
    for (int64_t t = 0; t < T; ++t) {
      arena.reset();
      Tensor y = layer.attn->step(ctx, position(x, t), cache, /*capacity=*/T);
      EXPECT_EQ(cache.length, t + 1);
      EXPECT_TRUE(all_close(y, position_ref(full, t), 1e-6, 1e-6)) << "position " << t;
      const Tensor& w = layer.attn->weights();  // [B, H, 1, t + 1]
      ASSERT_EQ(w.shape(), (Shape{B, H, 1, t + 1}));
      std::vector<double> want;
      for (int64_t bh = 0; bh < B * H; ++bh)
        for (int64_t j = 0; j <= t; ++j) want.push_back(full_weights.f32()[(bh * T + t) * T + j]);
      EXPECT_TRUE(all_close(w, want, 1e-6, 1e-6)) << "position " << t;
    }
    EXPECT_TRUE(cache.k.owning());
    EXPECT_EQ(cache.k.shape(), (Shape{B, H, T, 4}));
    expect_error_naming("dec.self_attn", [&] { layer.attn->step(ctx, position(x, 0), cache, T); });
    EXPECT_EQ(cache.length, T);  // the failed step left the cache alone
  }
}

TEST_P(MultiHeadAttentionLayer, SelfAttentionStepsWithKeyLengthsEqualPaddedCausalForward) {
  std::mt19937 gen(63);
  Layer layer("dec.self_attn", small_config(Score::general, false), 12);
  const int64_t B = 3, T = 5;
  Tensor x = random_tensor({B, T, 8}, gen);
  Tensor lengths = test::ids_tensor({5, 2, 0});
  Tensor full = run_forward(layer, x, Tensor(), AttentionMask{lengths, true});
  KVCache cache;
  Arena arena;
  Context ctx{false, &arena, nullptr};
  for (int64_t t = 0; t < T; ++t) {
    arena.reset();
    Tensor y = layer.attn->step(ctx, position(x, t), cache, /*capacity=*/8, lengths);
    ASSERT_TRUE(all_finite(y));
    EXPECT_TRUE(all_close(y, position_ref(full, t), 1e-6, 1e-6)) << "position " << t;
  }
  EXPECT_EQ(cache.k.shape(), (Shape{B, 2, 8, 4}));
}

TEST_P(MultiHeadAttentionLayer, CrossAttentionStepsEqualForwardWithPadding) {
  std::mt19937 gen(62);
  for (Score score : kScores) {
    SCOPED_TRACE(score_name(score));
    Layer layer("dec.cross_attn", small_config(score, true), 11);
    const int64_t B = 3, Tq = 4, Tk = 5;
    Tensor x = random_tensor({B, Tq, 8}, gen);
    Tensor memory = random_tensor({B, Tk, 8}, gen);
    Tensor lengths = test::ids_tensor({5, 2, 0});
    Tensor full = run_forward(layer, x, memory, AttentionMask{lengths, false});
    KVCache cache;
    Arena arena;
    Context ctx{false, &arena, nullptr};
    layer.attn->prepare_memory(ctx, memory, cache);
    EXPECT_EQ(cache.length, Tk);
    EXPECT_TRUE(cache.k.owning() && cache.v.owning());
    for (int64_t t = 0; t < Tq; ++t) {
      arena.reset();  // the memory cache must survive it
      Tensor scratch = arena.alloc({4096});
      scratch.fill(-7.f);
      arena.reset();
      Tensor y = layer.attn->step(ctx, position(x, t), cache, 0, lengths);
      ASSERT_TRUE(all_finite(y));
      EXPECT_TRUE(all_close(y, position_ref(full, t), 1e-6, 1e-6)) << "position " << t;
      EXPECT_EQ(cache.length, Tk);
    }
  }
}

// ---- Errors ----
TEST_P(MultiHeadAttentionLayer, BadShapesThrowNamingTheLayer) {
  std::mt19937 gen(71);
  Layer self("enc.layers.2.attn", small_config(Score::scaled_dot, false));
  Layer cross("dec.layers.1.cross_attn", small_config(Score::general, true));
  Arena arena;
  Context ctx{true, &arena, nullptr};
  Tensor x = random_tensor({2, 3, 8}, gen);
  Tensor mem = random_tensor({2, 4, 8}, gen);
  const std::string s = self.name, c = cross.name;
  auto fwd = [&](Layer& l, const Tensor& xx, const Tensor& mm, const AttentionMask& mask) {
    return [&l, xx, mm, mask, &ctx] { l.attn->forward(ctx, xx, mm, mask); };
  };
  expect_error_naming(s, fwd(self, random_tensor({2, 3, 7}, gen), Tensor(), {}));
  expect_error_naming(s, fwd(self, random_tensor({6, 8}, gen), Tensor(), {}));
  expect_error_naming(s, fwd(self, x, mem, {}));  // memory for self-attention
  expect_error_naming(c, fwd(cross, x, Tensor(), {}));
  expect_error_naming(c, fwd(cross, x, random_tensor({3, 4, 8}, gen), {}));  // batch differs
  expect_error_naming(c, fwd(cross, x, random_tensor({2, 4, 6}, gen), {}));
  expect_error_naming(s, fwd(self, x, Tensor(), {test::ids_tensor({3}), false}));     // [1] != [B]
  expect_error_naming(s, fwd(self, x, Tensor(), {test::ids_tensor({3, 4}), false}));  // 4 > T
  expect_error_naming(c, fwd(cross, x, mem, {test::ids_tensor({-1, 2}), false}));
  Tensor float_lengths({2});
  expect_error_naming(s, fwd(self, x, Tensor(), {float_lengths, false}));
  // Backward before a training forward, and with a dy that is not the output's shape.
  Layer fresh("fresh.attn", small_config(Score::dot, false));
  expect_error_naming("fresh.attn", [&] { fresh.attn->backward(ctx, x); });
  self.attn->forward(ctx, x, Tensor(), {});
  expect_error_naming(s, [&] { self.attn->backward(ctx, random_tensor({2, 4, 8}, gen)); });
  // Decoding.
  KVCache kv;
  expect_error_naming(s, [&] { self.attn->step(ctx, x, kv, 8); });  // 3 positions, not 1
  expect_error_naming(s, [&] { self.attn->step(ctx, position(x, 0), kv, 0); });
  expect_error_naming(s, [&] { self.attn->prepare_memory(ctx, mem, kv); });
  expect_error_naming(c, [&] { cross.attn->step(ctx, position(x, 0), kv, 8); });
  cross.attn->prepare_memory(ctx, mem, kv);
  expect_error_naming(c, [&] {
    cross.attn->step(ctx, position(x, 0), kv, 8, test::ids_tensor({5, 1}));
  });
  expect_error_naming(c, [&] {
    cross.attn->step(ctx, random_tensor({3, 1, 8}, gen), kv, 8);  // batch differs from memory
  });
  // Construction.
  ParamStore ps;
  AttentionConfig bad = small_config(Score::dot, false);
  bad.heads = 3;
  expect_error_naming("bad.attn", [&] { MultiHeadAttention m(ps, "bad.attn", bad); });
}

}  // namespace
}  // namespace vitk::nn

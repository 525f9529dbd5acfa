// FeedForward, EncoderLayer, DecoderLayer, Encoder, Decoder and the position encodings: forwards
// against the formulas they implement, backwards against central finite differences of
// L = Σ w·y (w.r.t. the inputs, the memory and every parameter), gradient accumulation, the
// inference path, and incremental decoding against the full causal forward.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "util/op_test_util.h"
#include "util/test_util.h"

using namespace vitk;
using namespace vitk::nn;
using namespace vitk::test;

namespace {

constexpr int64_t kD = 8, kHeads = 2, kFF = 16;

LayerConfig small_config(bool pre_norm, ops::Activation act = ops::Activation::gelu) {
  LayerConfig c;
  c.d_model = kD;
  c.heads = kHeads;
  c.d_ff = kFF;
  c.activation = act;
  c.pre_norm = pre_norm;
  return c;
}

// Copies every parameter of `to` from the parameter of the same name in `from`.
void copy_values(ParamStore& from, ParamStore& to) {
  ASSERT_EQ(from.params().size(), to.params().size());
  for (auto& p : to.params()) p.value.copy_from(from.get(p.name).value);
}

Tensor plus(Context& ctx, const Tensor& a, const Tensor& b) {
  Tensor y = ctx.alloc(a.shape());
  ops::add(a, b, y);
  return y;
}

// Position t of x [B, T, d] as a [B, 1, d] tensor.
Tensor position(const Tensor& x, int64_t t) {
  const int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  Tensor y({B, 1, d});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < d; ++e) y.f32()[b * d + e] = x.f32()[(b * T + t) * d + e];
  return y;
}

// LayerNorm over the last axis with unit gain and zero bias, in double.
std::vector<double> naive_layernorm(const Tensor& x, double eps) {
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  std::vector<double> v = to_double(x), y(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += v[r * n + j];
    mean /= n;
    for (int64_t j = 0; j < n; ++j) var += (v[r * n + j] - mean) * (v[r * n + j] - mean);
    var /= n;
    for (int64_t j = 0; j < n; ++j) y[r * n + j] = (v[r * n + j] - mean) / std::sqrt(var + eps);
  }
  return y;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = to_double(a), y = to_double(b);
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

// ---- The finite-difference driver ----
// A layer seen as a function of its inputs and of every parameter in `store`. forward() must read
// the input tensors listed in `inputs` (they are perturbed in place); backward() returns the
// gradients of those inputs, in the same order.
struct GradientCase {
  ParamStore* store = nullptr;
  std::vector<std::pair<std::string, Tensor*>> inputs;
  std::function<Tensor(Context&)> forward;
  std::function<std::vector<Tensor>(Context&, const Tensor&)> backward;
  uint64_t dropout_seed = 7;  // every evaluation restarts the generator: the same dropout masks
};

void expect_gradients(const GradientCase& c, FdOptions opt = {}) {
  std::mt19937 gen(1234);
  Arena arena;
  ops::Rng rng(c.dropout_seed);
  c.store->zero_grad();
  Context ctx{true, &arena, &rng};
  const Tensor y = c.forward(ctx);
  const Tensor w = random_tensor(y.shape(), gen);  // dL/dy
  const std::vector<Tensor> dinputs = c.backward(ctx, w);
  ASSERT_EQ(dinputs.size(), c.inputs.size());

  Arena fd_arena;
  ops::Rng fd_rng;
  auto loss = [&]() {
    fd_arena.reset();
    fd_rng.set_state(c.dropout_seed, 0);
    Context fctx{true, &fd_arena, &fd_rng};
    return weighted_sum(c.forward(fctx), w);
  };
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    ASSERT_EQ(dinputs[i].shape(), c.inputs[i].second->shape()) << c.inputs[i].first;
    EXPECT_GRAD_OK(
        check_gradient(c.inputs[i].first, *c.inputs[i].second, dinputs[i].clone(), loss, opt));
  }
  for (auto& p : c.store->params()) {
    const Tensor analytic = p.grad.clone();
    // A parameter the forward ignored would pass the check with zeros on both sides.
    EXPECT_GT(ops::l2_norm(analytic), 0.0) << p.name << " gets no gradient";
    EXPECT_GRAD_OK(check_gradient(p.name, p.value, analytic, loss, opt));
  }
}

// Shapes shared by the layer tests: B = 2 with unequal target (5, 3) and source (4, 2) lengths.
struct Batch {
  Tensor x, memory;  // [2, 5, d], [2, 4, d]
  AttentionMask self_mask, memory_mask, padding;
};

Batch make_batch(std::mt19937& gen) {
  Batch b;
  b.x = random_tensor({2, 5, kD}, gen);
  b.memory = random_tensor({2, 4, kD}, gen);
  b.self_mask = {ids_tensor({5, 3}), /*causal=*/true};
  b.memory_mask = {ids_tensor({4, 2}), false};
  b.padding = {ids_tensor({5, 3}), false};
  return b;
}

// ---- FeedForward ----

class FeedForwardTest : public ::testing::TestWithParam<ops::Activation> {};

TEST_P(FeedForwardTest, ForwardMatchesNaiveLoops) {
  const ops::Activation act = GetParam();
  ParamStore store;
  FeedForward ffn(store, "blk.mlp", kD, kFF, act, 0.f);
  store.finalize();
  EXPECT_EQ(names_of(store), (std::vector<std::string>{"blk.mlp.fc1.weight", "blk.mlp.fc1.bias",
                                                       "blk.mlp.fc2.weight", "blk.mlp.fc2.bias"}));
  EXPECT_EQ(store.get("blk.mlp.fc1.weight").shape, (Shape{kFF, kD}));
  EXPECT_EQ(store.get("blk.mlp.fc2.weight").shape, (Shape{kD, kFF}));
  std::mt19937 gen(1);
  randomize(store, gen);
  Tensor x = random_tensor({2, 3, kD}, gen);
  Arena arena;
  Context ctx{false, &arena, nullptr};
  Tensor y = ffn.forward(ctx, x);

  const float* w1 = store.get("blk.mlp.fc1.weight").value.f32();
  const float* b1 = store.get("blk.mlp.fc1.bias").value.f32();
  const float* w2 = store.get("blk.mlp.fc2.weight").value.f32();
  const float* b2 = store.get("blk.mlp.fc2.bias").value.f32();
  std::vector<double> want;
  for (int64_t r = 0; r < 6; ++r) {
    std::vector<double> a(kFF);
    for (int64_t j = 0; j < kFF; ++j) {
      double h = b1[j];
      for (int64_t k = 0; k < kD; ++k) h += double(w1[j * kD + k]) * x.f32()[r * kD + k];
      a[j] = act == ops::Activation::relu ? std::max(h, 0.0)
                                          : 0.5 * h * (1.0 + std::erf(h / std::sqrt(2.0)));
    }
    for (int64_t i = 0; i < kD; ++i) {
      double o = b2[i];
      for (int64_t j = 0; j < kFF; ++j) o += double(w2[i * kFF + j]) * a[j];
      want.push_back(o);
    }
  }
  EXPECT_TRUE(all_close(y, want, 1e-5, 1e-5));
}

TEST_P(FeedForwardTest, BackwardMatchesFiniteDifferences) {
  const ops::Activation act = GetParam();
  ParamStore store;
  FeedForward ffn(store, "mlp", kD, kFF, act, 0.f);
  store.finalize();
  std::mt19937 gen(2);
  randomize(store, gen);
  Tensor x = random_tensor({2, 3, kD}, gen);
  FdOptions opt;
  if (act == ops::Activation::relu) {
    // Keep every pre-activation away from ReLU's kink: small fc1 weights and fc1 biases of
    // magnitude 0.4 to 0.8 with random signs. A ±h step then moves a pre-activation by at most
    // 0.01, less than the margin asserted below. The function is then piecewise linear, so the
    // differences are exact up to rounding and the tolerance can be tight.
    std::uniform_real_distribution<float> small(-0.05f, 0.05f), mag(0.4f, 0.8f);
    Tensor& w1 = store.get("mlp.fc1.weight").value;
    for (int64_t i = 0; i < w1.numel(); ++i) w1.f32()[i] = small(gen);
    Tensor& b1 = store.get("mlp.fc1.bias").value;
    for (int64_t i = 0; i < b1.numel(); ++i) b1.f32()[i] = (i % 2 ? 1.f : -1.f) * mag(gen);
    Tensor h({2, 3, kFF});
    ops::linear_forward(x, w1, b1, h);
    double margin = 1e9;
    for (int64_t i = 0; i < h.numel(); ++i)
      margin = std::min(margin, double(std::fabs(h.f32()[i])));
    ASSERT_GT(margin, 0.05);
    opt.atol = 2e-4;
  }
  GradientCase c;
  c.store = &store;
  c.inputs = {{"x", &x}};
  c.forward = [&](Context& ctx) { return ffn.forward(ctx, x); };
  c.backward = [&](Context& ctx, const Tensor& dy) {
    return std::vector<Tensor>{ffn.backward(ctx, dy)};
  };
  expect_gradients(c, opt);
}

INSTANTIATE_TEST_SUITE_P(Activations, FeedForwardTest,
                         ::testing::Values(ops::Activation::relu, ops::Activation::gelu),
                         [](const auto& p) { return ops::activation_name(p.param); });

TEST(FeedForwardTest, InferenceKeepsNothing) {
  ParamStore store;
  FeedForward ffn(store, "mlp", kD, kFF, ops::Activation::gelu, 0.f);
  store.finalize();
  std::mt19937 gen(3);
  randomize(store, gen);
  Tensor x = random_tensor({1, 2, kD}, gen);
  Arena arena;
  Context train{true, &arena, nullptr}, infer{false, &arena, nullptr};
  Tensor y_train = ffn.forward(train, x);
  Tensor y_infer = ffn.forward(infer, x);  // drops what the training forward kept
  EXPECT_TRUE(all_close(y_infer, y_train, 0, 0));
  EXPECT_THROW(ffn.backward(train, y_train), Error);
}

// A hidden mixer with no parameters: out[b, t] = h[b, t] + 0.5 · h[b, t + 1 mod T]; its
// transpose adds 0.5 · dout[b, t − 1 mod T] instead.
class NextTokenMixer : public HiddenMixer {
 public:
  Tensor forward(Context& ctx, const Tensor& h) override {
    calls++;
    return add_half_of(ctx, h, 1);
  }
  Tensor backward(Context& ctx, const Tensor& dout) override {
    return add_half_of(ctx, dout, dout.dim(1) - 1);
  }
  int calls = 0;

 private:
  // out[b, t] = in[b, t] + 0.5 · in[b, t + shift mod T]
  static Tensor add_half_of(Context& ctx, const Tensor& in, int64_t shift) {
    Tensor out = ctx.alloc_uninit(in.shape());
    const int64_t B = in.dim(0), T = in.dim(1), n = in.dim(2);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < n; ++j)
          out.f32()[(b * T + t) * n + j] =
              in.f32()[(b * T + t) * n + j] + 0.5f * in.f32()[(b * T + (t + shift) % T) * n + j];
    return out;
  }
};

// The mixer runs on fc1's output, before the activation: the same as fc2(gelu(mix(fc1(x)))),
// computed with the layers' own pieces, and its gradient flows back to x and the weights.
TEST(FeedForwardTest, MixerRunsBetweenFc1AndTheActivation) {
  ParamStore store;
  FeedForward ffn(store, "mlp", kD, kFF, ops::Activation::gelu, 0.f);
  store.finalize();
  std::mt19937 gen(4);
  randomize(store, gen);
  Tensor x = random_tensor({2, 3, kD}, gen);
  Arena arena;
  Context ctx{false, &arena, nullptr};
  const Tensor plain = ffn.forward(ctx, x).clone();
  auto mixer = std::make_shared<NextTokenMixer>();
  ffn.set_mixer(mixer);
  const Tensor mixed = ffn.forward(ctx, x).clone();
  EXPECT_EQ(mixer->calls, 1);
  EXPECT_FALSE(all_close(mixed, plain, 1e-3, 0));

  Tensor h({2, 3, kFF});
  ops::linear_forward(x, store.get("mlp.fc1.weight").value, store.get("mlp.fc1.bias").value, h);
  Tensor a = mixer->forward(ctx, h);
  ops::activation_forward(ops::Activation::gelu, a, a);
  Tensor want({2, 3, kD});
  ops::linear_forward(a, store.get("mlp.fc2.weight").value, store.get("mlp.fc2.bias").value, want);
  EXPECT_TRUE(all_close(mixed, want, 1e-6, 1e-6));

  GradientCase c;
  c.store = &store;
  c.inputs = {{"x", &x}};
  c.forward = [&](Context& fctx) { return ffn.forward(fctx, x); };
  c.backward = [&](Context& bctx, const Tensor& dy) {
    return std::vector<Tensor>{ffn.backward(bctx, dy)};
  };
  expect_gradients(c, FdOptions{});

  // An encoder layer's MLP takes one too.
  ParamStore layer_store;
  EncoderLayer layer(layer_store, "enc", small_config(true));
  layer_store.finalize();
  randomize(layer_store, gen);
  Tensor xs = random_tensor({2, 3, kD}, gen);
  const Tensor before = layer.forward(ctx, xs, AttentionMask{}).clone();
  auto layer_mixer = std::make_shared<NextTokenMixer>();
  layer.feed_forward().set_mixer(layer_mixer);
  EXPECT_FALSE(all_close(layer.forward(ctx, xs, AttentionMask{}), before, 1e-3, 0));
  EXPECT_EQ(layer_mixer->calls, 1);
  layer.feed_forward().set_mixer(nullptr);
  EXPECT_TRUE(all_close(layer.forward(ctx, xs, AttentionMask{}), before, 0, 0));
}

// A mixer that leaves h as it is: it turns off FeedForward's fused bf16 backward (which needs
// f'(h) ⊙ da right before fc1) without changing the function.
class IdentityMixer : public HiddenMixer {
 public:
  Tensor forward(Context&, const Tensor& h) override { return h; }
  Tensor backward(Context&, const Tensor& dout) override { return dout; }
};

// With bf16 products, the activation writes bf16 for fc2 and its backward hands fc1 the rounded
// gradient with fc1's bias gradient summed in the same pass: the same bits as the separate passes
// (the identity mixer's path), for the output, d(x) and every parameter's gradient, at a size
// whose bias gradients are summed in parallel blocks. With FFN dropout the forward keeps f32.
TEST(FeedForwardTest, Bf16FusedPassesGiveTheSeparatePassesBits) {
  SKIP_WITHOUT_BF16();
  for (float dropout : {0.f, 0.2f}) {
    SCOPED_TRACE("dropout " + std::to_string(dropout));
    ParamStore store;
    FeedForward ffn(store, "mlp", 32, 96, ops::Activation::gelu, dropout);
    store.finalize();
    std::mt19937 gen(5);
    randomize(store, gen);
    const Tensor x = random_tensor({4, 150, 32}, gen), dy = random_tensor({4, 150, 32}, gen);
    auto run = [&](bool fused) {
      ffn.set_mixer(fused ? nullptr : std::make_shared<IdentityMixer>());
      Arena arena;
      arena.set_poison(true);
      ops::Rng rng(3);
      Context ctx{true, &arena, &rng};
      ctx.precision = ops::Precision::bf16;
      store.zero_grad();
      std::vector<Tensor> out{ffn.forward(ctx, x).clone()};
      out.push_back(ffn.backward(ctx, dy).clone());
      out.push_back(store.grads().clone());
      return out;
    };
    const std::vector<Tensor> fused = run(true), separate = run(false);
    for (size_t i = 0; i < fused.size(); ++i)
      EXPECT_TRUE(bitwise_equal(fused[i], separate[i])) << i;
    EXPECT_GT(ops::l2_norm(fused[2]), 0.0);
  }
}

// A Linear's bf16 output (attention's projections with bf16 products) is its f32 output rounded
// to bf16; asking for it without bf16 products is refused with the weight's name.
TEST(LinearTest, Bf16OutputIsTheRoundedF32Output) {
  SKIP_WITHOUT_BF16();
  ParamStore store;
  Linear fc(store, "attn.qkv", 64, 96);
  store.finalize();
  std::mt19937 gen(9);
  randomize(store, gen);
  const Tensor x = random_tensor({4, 50, 64}, gen);
  Arena arena;
  Context ctx{true, &arena, nullptr};
  ctx.precision = ops::Precision::bf16;
  const Tensor y = fc.forward(ctx, x).clone();
  Tensor want({4, 50, 96}, DType::bf16);
  ops::round_to_bf16(y, want);
  const Tensor yb = fc.forward(ctx, x, DType::bf16);
  ASSERT_EQ(yb.dtype(), DType::bf16);
  EXPECT_TRUE(bitwise_equal(yb, want));
  Context f32{true, &arena, nullptr};
  const std::string e = error_of([&] { fc.forward(f32, x, DType::bf16); });
  EXPECT_TRUE(contains(e, "attn.qkv.weight") && contains(e, "needs bf16 products")) << e;
}

// At int8 inference a Linear is ops::linear_forward_int8 on its weight quantised per output
// channel (the op's own tests hold it to the naive integer loop and the f32 bound), quantised again
// when the weight changes; training refuses int8 weights.
TEST(LinearTest, Int8InferenceIsTheInt8OpOnTheQuantisedWeight) {
  ParamStore store;
  Linear fc(store, "attn.qkv", 64, 96);
  store.finalize();
  std::mt19937 gen(10);
  randomize(store, gen);
  const Tensor x = random_tensor({4, 50, 64}, gen);
  Arena arena;
  Context ctx{false, &arena, nullptr};
  set_inference_precision(ctx, ops::Precision::int8);
  EXPECT_TRUE(ctx.int8_weights);
  EXPECT_EQ(ctx.precision, ops::bf16_supported() ? ops::Precision::bf16 : ops::Precision::f32);
  auto expected = [&]() {
    ops::QuantizedWeight q = ops::quantize_weight(fc.weight.value);
    Tensor want({4, 50, 96});
    ops::linear_forward_int8(x, q, fc.bias->value, want);
    return want;
  };
  Tensor want = expected();
  EXPECT_TRUE(bitwise_equal(fc.forward(ctx, x), want));
  Context f32{false, &arena, nullptr};
  EXPECT_FALSE(bitwise_equal(fc.forward(f32, x), want)) << "int8 gave f32's bits";

  // A changed weight (mark_changed, as loading and the optimizers call it) is quantised again.
  for (int64_t i = 0; i < fc.weight.numel(); ++i) fc.weight.value.f32()[i] *= -0.5f;
  store.mark_changed();
  want = expected();
  EXPECT_TRUE(bitwise_equal(fc.forward(ctx, x), want));

  fc.weight.value.f32()[7] = std::nanf("");
  store.mark_changed();
  const std::string nan = error_of([&] { fc.forward(ctx, x); });
  EXPECT_TRUE(contains(nan, "attn.qkv.weight") && contains(nan, "NaN")) << nan;
  Context training{true, &arena, nullptr};
  training.int8_weights = true;
  const std::string e = error_of([&] { fc.forward(training, x); });
  EXPECT_TRUE(contains(e, "attn.qkv.weight") && contains(e, "inference")) << e;
}

// ---- Parameter names (checkpoint compatibility) ----

TEST(LayerNamesTest, EncoderLayerRegistersTimmNames) {
  ParamStore store;
  EncoderLayer layer(store, "encoder.layers.0", small_config(true));
  const std::string p = "encoder.layers.0.";
  EXPECT_EQ(names_of(store), (std::vector<std::string>{
                                 p + "norm1.weight", p + "norm1.bias", p + "attn.qkv.weight",
                                 p + "attn.qkv.bias", p + "attn.proj.weight", p + "attn.proj.bias",
                                 p + "norm2.weight", p + "norm2.bias", p + "mlp.fc1.weight",
                                 p + "mlp.fc1.bias", p + "mlp.fc2.weight", p + "mlp.fc2.bias"}));
  EXPECT_EQ(store.get(p + "attn.qkv.weight").shape, (Shape{3 * kD, kD}));
  EXPECT_FALSE(store.get(p + "norm1.weight").decay);

  // The layer hands its score and attention settings to both attentions.
  LayerConfig luong = small_config(false);
  luong.score = Score::general;
  luong.attention_dropout = 0.25f;
  ParamStore other;
  DecoderLayer dec(other, "dec", luong);
  EXPECT_NE(other.find("dec.self_attn.score.weight"), nullptr);
  EXPECT_NE(other.find("dec.cross_attn.score.weight"), nullptr);
  EXPECT_EQ(dec.cross_attention().config().score, Score::general);
  EXPECT_TRUE(dec.cross_attention().config().cross);
  EXPECT_FLOAT_EQ(dec.cross_attention().config().dropout, 0.25f);
}

TEST(LayerNamesTest, DecoderStackRegistersLayersAndFinalNorm) {
  ParamStore store;
  Decoder dec(store, "decoder", small_config(false), 2, /*final_norm=*/true);
  std::set<std::string> names;
  for (const auto& n : names_of(store)) names.insert(n);
  for (const char* layer : {"decoder.layers.0.", "decoder.layers.1."})
    for (const char* s :
         {"norm1.weight", "self_attn.qkv.weight", "self_attn.proj.bias", "norm2.bias",
          "cross_attn.q.weight", "cross_attn.kv.weight", "cross_attn.proj.weight", "norm3.weight",
          "mlp.fc1.weight", "mlp.fc2.bias"})
      EXPECT_TRUE(names.count(std::string(layer) + s)) << layer << s;
  EXPECT_TRUE(names.count("decoder.norm.weight"));
  EXPECT_EQ(store.get("decoder.layers.1.cross_attn.kv.weight").shape, (Shape{2 * kD, kD}));
  EXPECT_EQ(names.size(), 2u * 20u + 2u);  // 10 weights and 10 biases per layer, the final norm
  EXPECT_EQ(dec.layers().size(), 2u);

  ParamStore plain;
  Encoder enc(plain, "encoder", small_config(false), 1, /*final_norm=*/false);
  EXPECT_EQ(plain.find("encoder.norm.weight"), nullptr);
  EXPECT_THROW(Encoder(plain, "bad", small_config(false), 0, false), Error);
}

// ---- EncoderLayer and DecoderLayer in both arrangements ----

class ArrangementTest : public ::testing::TestWithParam<bool> {};  // pre_norm

TEST_P(ArrangementTest, EncoderLayerForwardFollowsTheFormula) {
  const bool pre = GetParam();
  const LayerConfig cfg = small_config(pre);
  ParamStore s1, s2;
  EncoderLayer layer(s1, "enc", cfg);
  s1.finalize();
  // The same computation assembled by hand from separately built sublayers.
  LayerNorm norm1(s2, "enc.norm1", kD, cfg.norm_eps);
  AttentionConfig acfg;
  acfg.d_model = kD;
  acfg.heads = kHeads;
  MultiHeadAttention attn(s2, "enc.attn", acfg);
  LayerNorm norm2(s2, "enc.norm2", kD, cfg.norm_eps);
  FeedForward mlp(s2, "enc.mlp", kD, kFF, cfg.activation, 0.f);
  s2.finalize();
  std::mt19937 gen(4);
  randomize(s1, gen);
  copy_values(s1, s2);
  Batch b = make_batch(gen);

  Arena arena;
  Context ctx{false, &arena, nullptr};
  Tensor y = layer.forward(ctx, b.x, b.padding);
  Tensor want;
  if (pre) {
    Tensor h = plus(ctx, b.x, attn.forward(ctx, norm1.forward(ctx, b.x), Tensor(), b.padding));
    want = plus(ctx, h, mlp.forward(ctx, norm2.forward(ctx, h)));
  } else {
    Tensor h = norm1.forward(ctx, plus(ctx, b.x, attn.forward(ctx, b.x, Tensor(), b.padding)));
    want = norm2.forward(ctx, plus(ctx, h, mlp.forward(ctx, h)));
  }
  EXPECT_TRUE(all_close(y, want, 1e-6, 1e-6));
}

TEST_P(ArrangementTest, DecoderLayerForwardFollowsTheFormula) {
  const bool pre = GetParam();
  const LayerConfig cfg = small_config(pre);
  ParamStore s1, s2;
  DecoderLayer layer(s1, "dec", cfg);
  s1.finalize();
  AttentionConfig self_cfg, cross_cfg;
  self_cfg.d_model = cross_cfg.d_model = kD;
  self_cfg.heads = cross_cfg.heads = kHeads;
  cross_cfg.cross = true;
  LayerNorm norm1(s2, "dec.norm1", kD, cfg.norm_eps);
  MultiHeadAttention self_attn(s2, "dec.self_attn", self_cfg);
  LayerNorm norm2(s2, "dec.norm2", kD, cfg.norm_eps);
  MultiHeadAttention cross_attn(s2, "dec.cross_attn", cross_cfg);
  LayerNorm norm3(s2, "dec.norm3", kD, cfg.norm_eps);
  FeedForward mlp(s2, "dec.mlp", kD, kFF, cfg.activation, 0.f);
  s2.finalize();
  std::mt19937 gen(5);
  randomize(s1, gen);
  copy_values(s1, s2);
  Batch b = make_batch(gen);

  Arena arena;
  Context ctx{false, &arena, nullptr};
  Tensor y = layer.forward(ctx, b.x, b.memory, b.self_mask, b.memory_mask);
  auto sa = [&](const Tensor& t) { return self_attn.forward(ctx, t, Tensor(), b.self_mask); };
  auto ca = [&](const Tensor& t) { return cross_attn.forward(ctx, t, b.memory, b.memory_mask); };
  Tensor want;
  if (pre) {
    Tensor h1 = plus(ctx, b.x, sa(norm1.forward(ctx, b.x)));
    Tensor h2 = plus(ctx, h1, ca(norm2.forward(ctx, h1)));
    want = plus(ctx, h2, mlp.forward(ctx, norm3.forward(ctx, h2)));
  } else {
    Tensor h1 = norm1.forward(ctx, plus(ctx, b.x, sa(b.x)));
    Tensor h2 = norm2.forward(ctx, plus(ctx, h1, ca(h1)));
    want = norm3.forward(ctx, plus(ctx, h2, mlp.forward(ctx, h2)));
  }
  EXPECT_TRUE(all_close(y, want, 1e-6, 1e-6));
}

// An encoder layer with randomize()d parameters (generator seeded with `seed`, then drawing the
// batch), as the tests below start from.
struct RandomEncoderLayer {
  RandomEncoderLayer(bool pre_norm, unsigned seed, const std::string& name = "enc")
      : layer(store, name, small_config(pre_norm)), gen(seed) {
    store.finalize();
    randomize(store, gen);
    b = make_batch(gen);
  }
  ParamStore store;
  EncoderLayer layer;
  std::mt19937 gen;
  Batch b;
};

// The finite-difference case of an encoder layer with padding: input x, gradient dx; the query
// rows as EncoderLayer::forward takes them.
void expect_encoder_gradients(RandomEncoderLayer& e, QueryRows queries = QueryRows::all()) {
  GradientCase c;
  c.store = &e.store;
  c.inputs = {{"x", &e.b.x}};
  c.forward = [&](Context& ctx) { return e.layer.forward(ctx, e.b.x, e.b.padding, queries); };
  c.backward = [&](Context& ctx, const Tensor& dy) {
    return std::vector<Tensor>{e.layer.backward(ctx, dy)};
  };
  expect_gradients(c);
}

TEST_P(ArrangementTest, EncoderLayerBackwardMatchesFiniteDifferences) {
  RandomEncoderLayer e(GetParam(), 6);
  expect_encoder_gradients(e);
}

// The first R rows of x [B, T, d], as a tensor of their own [B, R, d].
Tensor first_rows(const Tensor& x, int64_t R) {
  const int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  Tensor y({B, R, d});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < R * d; ++i) y.f32()[b * R * d + i] = x.f32()[b * T * d + i];
  return y;
}

// Query rows: the first R rows of the output, computed alone, are those of the full forward, and
// the backward from d(those rows) equals the full backward from the same d padded with zeros (the
// input gradient and every parameter's), for R = 1 and 3 of 5 positions: with and without
// padding (the second sequence has 3 of 5 keys), through each attention path (f32: the reference,
// the fused kernel without a mask where this build has it, the blocked kernel) and, for pre-norm,
// the bf16 products the ViT trains with (where the CPU has them). The arena is poisoned: a read of
// a gradient row nobody wrote would show as NaN.
struct QueryRowSetting {
  ops::Precision precision;
  AttentionKernel kernel;
  bool padded;
};

// The f32 settings, in the order they draw their gradients from the layer's generator.
std::vector<QueryRowSetting> f32_query_row_settings() {
  std::vector<QueryRowSetting> settings;
  for (AttentionKernel kernel :
       {AttentionKernel::reference, AttentionKernel::materialized, AttentionKernel::blocked})
    for (bool padded : {false, true}) settings.push_back({ops::Precision::f32, kernel, padded});
  return settings;
}

void expect_query_rows_are_the_first_rows(RandomEncoderLayer& e,
                                          const std::vector<QueryRowSetting>& settings) {
  ParamStore& store = e.store;
  EncoderLayer& layer = e.layer;
  const Batch& b = e.b;
  for (const QueryRowSetting& set : settings)
    for (int64_t R : {1, 3}) {
      SCOPED_TRACE(std::string(ops::precision_name(set.precision)) + ", kernel " +
                   std::to_string(static_cast<int>(set.kernel)) + (set.padded ? ", padded" : "") +
                   ", query rows " + std::to_string(R));
      const double tol = set.precision == ops::Precision::f32 ? 1e-6 : 1e-3;
      const AttentionMask mask = set.padded ? b.padding : AttentionMask();
      Arena arena;
      arena.set_poison(true);
      Context ctx{true, &arena, nullptr};
      ctx.precision = set.precision;
      ctx.attention_kernel = set.kernel;
      const Tensor dy = random_tensor({2, R, kD}, e.gen);
      Tensor dy_full({2, 5, kD});  // zero beyond the first R rows
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t i = 0; i < R * kD; ++i)
          dy_full.f32()[s * 5 * kD + i] = dy.f32()[s * R * kD + i];

      store.zero_grad();
      const Tensor y_full = layer.forward(ctx, b.x, mask).clone();
      const AttentionPath path = layer.attention().path();
      const Tensor dx_full = layer.backward(ctx, dy_full).clone();
      const Tensor grads_full = store.grads().clone();

      store.zero_grad();
      const Tensor y = layer.forward(ctx, b.x, mask, QueryRows::first(R));
      ASSERT_EQ(y.shape(), (Shape{2, R, kD}));
      EXPECT_EQ(layer.attention().path(), path);
      EXPECT_TRUE(all_close(y, first_rows(y_full, R), tol, tol));
      const Tensor dx = layer.backward(ctx, dy);
      ASSERT_EQ(dx.shape(), b.x.shape());
      EXPECT_TRUE(all_close(dx, dx_full, tol, tol));
      EXPECT_TRUE(all_close(store.grads(), grads_full, tol, tol));
      EXPECT_GT(max_abs_diff(dx, Tensor(dx.shape())), 0.0);
    }
}

TEST_P(ArrangementTest, EncoderLayerQueryRowsAreTheFullLayersFirstRows) {
  RandomEncoderLayer e(GetParam(), 61);
  expect_query_rows_are_the_first_rows(e, f32_query_row_settings());
}

// The same for a pre-norm layer with the bf16 products, skipped on a CPU without them. Its
// generator first draws what the f32 settings draw, so that the bf16 setting sees the gradients it
// saw when the settings ran in one test.
TEST(PreNormBf16Test, EncoderLayerQueryRowsAreTheFullLayersFirstRows) {
  SKIP_WITHOUT_BF16();
  RandomEncoderLayer e(/*pre_norm=*/true, 61);
  for (size_t i = 0; i < f32_query_row_settings().size(); ++i)
    for (int64_t R : {1, 3}) random_tensor({2, R, kD}, e.gen);
  expect_query_rows_are_the_first_rows(
      e, {{ops::Precision::bf16, AttentionKernel::automatic, /*padded=*/true}});
}

TEST_P(ArrangementTest, EncoderLayerQueryRowsBackwardMatchesFiniteDifferences) {
  RandomEncoderLayer e(GetParam(), 62);
  expect_encoder_gradients(e, QueryRows::first(2));
}

// What query rows cannot do is refused with the layer's name: rows outside [1, T], and a causal
// mask, whose rule places the queries at the end of the sequence.
TEST_P(ArrangementTest, EncoderLayerQueryRowsRefuseWhatTheyCannotDo) {
  RandomEncoderLayer random(GetParam(), 63, "blocks.5");
  EncoderLayer& layer = random.layer;
  const Batch& b = random.b;
  Arena arena;
  Context ctx{false, &arena, nullptr};
  for (int64_t R : {-1, 0, 6}) {
    const std::string e =
        error_of([&] { layer.forward(ctx, b.x, b.padding, QueryRows::first(R)); });
    EXPECT_TRUE(contains(e, "blocks.5.attn: query rows: the first " + std::to_string(R) + " of 5"))
        << e;
  }
  const std::string e =
      error_of([&] { layer.forward(ctx, b.x, b.self_mask, QueryRows::first(2)); });
  EXPECT_TRUE(contains(e, "blocks.5.attn") && contains(e, "causal or diagonal mask")) << e;
  // All of them: the full layer.
  EXPECT_EQ(layer.forward(ctx, b.x, b.padding, QueryRows::first(5)).shape(), b.x.shape());
}

// MultiHeadAttention's query rows: self-attention with dot scores only.
TEST(AttentionQueryRowsTest, CrossAttentionAndOtherScoresAreRefused) {
  ParamStore store;
  AttentionConfig cross, general;
  cross.d_model = general.d_model = kD;
  cross.heads = general.heads = kHeads;
  cross.cross = true;
  general.score = Score::general;
  MultiHeadAttention cross_attn(store, "dec.cross_attn", cross);
  MultiHeadAttention general_attn(store, "enc.attn", general);
  store.finalize();
  std::mt19937 gen(64);
  randomize(store, gen);
  Batch b = make_batch(gen);
  Arena arena;
  Context ctx{false, &arena, nullptr};
  std::string e = error_of(
      [&] { cross_attn.forward(ctx, b.x, b.memory, AttentionMask(), QueryRows::first(2)); });
  EXPECT_TRUE(contains(e, "dec.cross_attn: query rows are for self-attention only")) << e;
  e = error_of(
      [&] { general_attn.forward(ctx, b.x, Tensor(), AttentionMask(), QueryRows::first(2)); });
  EXPECT_TRUE(contains(e, "enc.attn") && contains(e, "general score")) << e;
  EXPECT_EQ(general_attn.forward(ctx, b.x, Tensor(), AttentionMask(), QueryRows::all()).shape(),
            b.x.shape());
}

// The finite-difference case of anything with the decoder's signature (a DecoderLayer or a
// Decoder): inputs x and memory, gradients dx and d(memory).
template <typename Module>
GradientCase decoder_case(ParamStore& store, Module& module, Batch& b) {
  GradientCase c;
  c.store = &store;
  c.inputs = {{"x", &b.x}, {"memory", &b.memory}};
  c.forward = [&module, &b](Context& ctx) {
    return module.forward(ctx, b.x, b.memory, b.self_mask, b.memory_mask);
  };
  c.backward = [&module](Context& ctx, const Tensor& dy) {
    Tensor dmemory;
    Tensor dx = module.backward(ctx, dy, &dmemory);
    return std::vector<Tensor>{dx, dmemory};
  };
  return c;
}

TEST_P(ArrangementTest, DecoderLayerBackwardMatchesFiniteDifferences) {
  ParamStore store;
  DecoderLayer layer(store, "dec", small_config(GetParam()));
  store.finalize();
  std::mt19937 gen(7);
  randomize(store, gen);
  Batch b = make_batch(gen);
  expect_gradients(decoder_case(store, layer, b));
}

// Residual, feed-forward and attention dropout are part of the function being differentiated:
// with the generator restarted for every evaluation, the masks are the same each time.
TEST_P(ArrangementTest, BackwardThroughDropoutMatchesFiniteDifferences) {
  LayerConfig cfg = small_config(GetParam());
  cfg.dropout = 0.3f;
  cfg.attention_dropout = 0.2f;
  ParamStore store;
  DecoderLayer layer(store, "dec", cfg);
  store.finalize();
  std::mt19937 gen(8);
  randomize(store, gen);
  Batch b = make_batch(gen);

  // The masks must actually drop something, or this test would repeat the one above.
  Arena arena;
  ops::Rng rng(7);
  Context train{true, &arena, &rng}, infer{false, &arena, nullptr};
  Tensor y_drop = layer.forward(train, b.x, b.memory, b.self_mask, b.memory_mask);
  Tensor y_plain = layer.forward(infer, b.x, b.memory, b.self_mask, b.memory_mask);
  EXPECT_GT(max_abs_diff(y_drop, y_plain), 0.1);

  expect_gradients(decoder_case(store, layer, b));
}

TEST_P(ArrangementTest, EncoderStackBackwardMatchesFiniteDifferences) {
  ParamStore store;
  Encoder enc(store, "encoder", small_config(GetParam()), 2, /*final_norm=*/true);
  store.finalize();
  std::mt19937 gen(9);
  randomize(store, gen);
  Batch b = make_batch(gen);
  GradientCase c;
  c.store = &store;
  c.inputs = {{"x", &b.x}};
  c.forward = [&](Context& ctx) { return enc.forward(ctx, b.x, b.padding); };
  c.backward = [&](Context& ctx, const Tensor& dy) {
    return std::vector<Tensor>{enc.backward(ctx, dy)};
  };
  expect_gradients(c);
}

TEST_P(ArrangementTest, DecoderStackBackwardMatchesFiniteDifferences) {
  ParamStore store;
  Decoder dec(store, "decoder", small_config(GetParam()), 2, /*final_norm=*/true);
  store.finalize();
  std::mt19937 gen(10);
  randomize(store, gen);
  Batch b = make_batch(gen);
  expect_gradients(decoder_case(store, dec, b));
}

TEST_P(ArrangementTest, GradientsAccumulateOverTwoBackwardCalls) {
  ParamStore store;
  Decoder dec(store, "decoder", small_config(GetParam()), 2, /*final_norm=*/true);
  store.finalize();
  std::mt19937 gen(11);
  randomize(store, gen);
  Batch b = make_batch(gen);
  Tensor dy = random_tensor({2, 5, kD}, gen);
  Arena arena;
  Context ctx{true, &arena, nullptr};
  auto run = [&]() {
    dec.forward(ctx, b.x, b.memory, b.self_mask, b.memory_mask);
    Tensor dmemory;
    Tensor dx = dec.backward(ctx, dy, &dmemory);
    return std::make_pair(dx.clone(), dmemory.clone());
  };
  store.zero_grad();
  auto once = run();
  const Tensor single = store.grads().clone();
  auto twice = run();
  // Input gradients are overwritten, parameter gradients added.
  EXPECT_TRUE(all_close(twice.first, once.first, 0, 0));
  EXPECT_TRUE(all_close(twice.second, once.second, 0, 0));
  std::vector<double> doubled = to_double(single);
  for (auto& v : doubled) v *= 2;
  EXPECT_TRUE(all_close(store.grads(), doubled, 1e-6, 1e-6));
  EXPECT_GT(ops::l2_norm(single), 0.0);

  // d(memory) is optional.
  Tensor dx = dec.backward(ctx, dy, nullptr);
  EXPECT_TRUE(all_close(dx, once.first, 0, 0));
}

TEST_P(ArrangementTest, InferenceKeepsNothing) {
  const LayerConfig cfg = small_config(GetParam());
  ParamStore store;
  EncoderLayer enc_layer(store, "el", cfg);
  DecoderLayer dec_layer(store, "dl", cfg);
  Encoder enc(store, "enc", cfg, 2, true);
  Decoder dec(store, "dec", cfg, 2, true);
  store.finalize();
  std::mt19937 gen(12);
  randomize(store, gen);
  Batch b = make_batch(gen);
  Arena arena;
  Context train{true, &arena, nullptr}, infer{false, &arena, nullptr};
  Tensor dmem;

  // Never trained.
  Tensor y = enc_layer.forward(infer, b.x, b.padding);
  EXPECT_THROW(enc_layer.backward(train, y), Error);
  y = dec_layer.forward(infer, b.x, b.memory, b.self_mask, b.memory_mask);
  EXPECT_THROW(dec_layer.backward(train, y, &dmem), Error);
  y = enc.forward(infer, b.x, b.padding);
  EXPECT_THROW(enc.backward(train, y), Error);
  y = dec.forward(infer, b.x, b.memory, b.self_mask, b.memory_mask);
  EXPECT_THROW(dec.backward(train, y, &dmem), Error);

  // Trained, then an inference forward: what the training forward kept is gone, and both give
  // the same output without dropout.
  Tensor y_train = enc.forward(train, b.x, b.padding);
  Tensor y_infer = enc.forward(infer, b.x, b.padding);
  EXPECT_TRUE(all_close(y_infer, y_train, 1e-7, 1e-7));
  EXPECT_THROW(enc.backward(train, y), Error);
  y_train = dec.forward(train, b.x, b.memory, b.self_mask, b.memory_mask);
  y_infer = dec.forward(infer, b.x, b.memory, b.self_mask, b.memory_mask);
  EXPECT_TRUE(all_close(y_infer, y_train, 1e-7, 1e-7));
  EXPECT_THROW(dec.backward(train, y, &dmem), Error);
}

TEST_P(ArrangementTest, ZeroWeightsReduceToTheResidualPath) {
  const bool pre = GetParam();
  ParamStore store;
  EncoderLayer enc_layer(store, "el", small_config(pre));
  DecoderLayer dec_layer(store, "dl", small_config(pre));
  Encoder enc(store, "enc", small_config(pre), 2, /*final_norm=*/true);
  store.finalize();
  init_defaults(store);  // every sublayer outputs 0, every norm is a plain normalisation
  std::mt19937 gen(13);
  Batch b = make_batch(gen);
  Arena arena;
  Context ctx{false, &arena, nullptr};
  const std::vector<double> ln = naive_layernorm(b.x, 1e-5);
  // Pre-norm: x + 0 + 0 = x. Post-norm: LN(LN(x)) = LN(x) up to the eps in the second norm.
  Tensor y = enc_layer.forward(ctx, b.x, b.padding);
  EXPECT_TRUE(pre ? all_close(y, b.x, 0, 0) : all_close(y, ln, 1e-4, 1e-4));
  y = dec_layer.forward(ctx, b.x, b.memory, b.self_mask, b.memory_mask);
  EXPECT_TRUE(pre ? all_close(y, b.x, 0, 0) : all_close(y, ln, 1e-4, 1e-4));
  // With the final norm, both arrangements end in LN(x).
  y = enc.forward(ctx, b.x, b.padding);
  EXPECT_TRUE(all_close(y, ln, 1e-4, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Layers, ArrangementTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "PreNorm" : "PostNorm"; });

TEST(LayerArrangementTest, PreAndPostNormDiffer) {
  ParamStore s_pre, s_post;
  DecoderLayer pre(s_pre, "dec", small_config(true));
  DecoderLayer post(s_post, "dec", small_config(false));
  s_pre.finalize();
  s_post.finalize();
  std::mt19937 gen(14);
  randomize(s_pre, gen);
  copy_values(s_pre, s_post);
  Batch b = make_batch(gen);
  Arena arena;
  Context ctx{false, &arena, nullptr};
  Tensor y_pre = pre.forward(ctx, b.x, b.memory, b.self_mask, b.memory_mask);
  Tensor y_post = post.forward(ctx, b.x, b.memory, b.self_mask, b.memory_mask);
  EXPECT_GT(max_abs_diff(y_pre, y_post), 0.1);
}

// Copies of a stack are handles to the same layers: after a vector of encoders reallocates, each
// one still trains its own parameters and nobody else's.
TEST(LayerStackTest, CopiesKeepTheirParameters) {
  ParamStore store;
  std::vector<Encoder> encoders;
  for (int i = 0; i < 3; ++i)
    encoders.push_back(Encoder(store, "e" + std::to_string(i), small_config(true), 1, true));
  store.finalize();
  std::mt19937 gen(15);
  randomize(store, gen);
  Batch b = make_batch(gen);
  Arena arena;
  Context ctx{true, &arena, nullptr};
  store.zero_grad();
  Encoder copy = encoders[1];
  copy.forward(ctx, b.x, b.padding);
  encoders[1].backward(ctx, b.x);  // the copy's forward is the original's
  for (auto& p : store.params()) {
    const bool mine = p.name.rfind("e1.", 0) == 0;
    EXPECT_EQ(ops::l2_norm(p.grad) > 0, mine) << p.name;
  }
}

// ---- Incremental decoding ----

class IncrementalDecodingTest : public ::testing::TestWithParam<bool> {};

TEST_P(IncrementalDecodingTest, StepsEqualTheCausalForward) {
  ParamStore store;
  Decoder dec(store, "decoder", small_config(GetParam()), 2, /*final_norm=*/true);
  store.finalize();
  std::mt19937 gen(16);
  randomize(store, gen);
  Batch b = make_batch(gen);
  const int64_t T = b.x.dim(1);
  const AttentionMask causal{Tensor(), true};

  Arena arena;
  Context ctx{false, &arena, nullptr};
  Tensor full = dec.forward(ctx, b.x, b.memory, causal, b.memory_mask).clone();  // [B, T, d]

  Decoder::State state;
  dec.start(ctx, b.memory, b.memory_mask.key_lengths, T, state);
  for (int64_t t = 0; t < T; ++t) {
    Tensor y = dec.step(ctx, position(b.x, t), state);  // [B, 1, d]
    EXPECT_TRUE(all_close(y, to_double(position(full, t)), 1e-6, 1e-6)) << "position " << t;
  }
  // The caches are full; start() empties them for the next batch, which decodes the same way.
  EXPECT_THROW(dec.step(ctx, position(b.x, 0), state), Error);
  dec.start(ctx, b.memory, b.memory_mask.key_lengths, T, state);
  for (int64_t t = 0; t < T; ++t) {
    Tensor y = dec.step(ctx, position(b.x, t), state);
    EXPECT_TRUE(all_close(y, to_double(position(full, t)), 1e-6, 1e-6)) << "again, position " << t;
  }
  Context train{true, &arena, nullptr};
  EXPECT_THROW(dec.step(train, position(b.x, 0), state), Error);
  Decoder::State fresh;
  EXPECT_THROW(dec.step(ctx, position(b.x, 0), fresh), Error);
}

INSTANTIATE_TEST_SUITE_P(Layers, IncrementalDecodingTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "PreNorm" : "PostNorm"; });

// Beam search reorders the caches between steps. Every row keeps the history of its inputs and
// outputs; after the rows have been expanded (memory too) and permuted (self caches only), the
// causal forward of each final row's whole input history must give every output it was given
// step by step.
TEST_P(IncrementalDecodingTest, ReorderedCachesEqualTheCausalForwardOfEachHistory) {
  ParamStore store;
  Decoder dec(store, "decoder", small_config(GetParam()), 2, /*final_norm=*/true);
  store.finalize();
  std::mt19937 gen(17);
  randomize(store, gen);
  const Tensor memory = random_tensor({2, 4, kD}, gen);  // [2, 4, d]
  const Tensor lengths = ids_tensor({4, 2});
  constexpr int64_t kSteps = 6;
  Arena arena;
  Context ctx{false, &arena, nullptr};
  Decoder::State state;
  EXPECT_THROW(state.reorder({0}), Error);  // never started
  dec.start(ctx, memory, lengths, kSteps, state);
  EXPECT_EQ(state.batch(), 2);
  EXPECT_EQ(state.position(), 0);

  struct Row {
    int64_t sentence;
    std::vector<std::vector<float>> inputs, outputs;  // per position, [d] each
  };
  std::vector<Row> rows{{0, {}, {}}, {1, {}, {}}};
  auto run_steps = [&](int n) {
    for (int s = 0; s < n; ++s) {
      const int64_t B = static_cast<int64_t>(rows.size());
      Tensor x = random_tensor({B, 1, kD}, gen);
      Tensor y = dec.step(ctx, x, state);  // [B, 1, d]
      for (int64_t i = 0; i < B; ++i) {
        rows[i].inputs.emplace_back(x.f32() + i * kD, x.f32() + (i + 1) * kD);
        rows[i].outputs.emplace_back(y.f32() + i * kD, y.f32() + (i + 1) * kD);
      }
    }
  };
  auto gather = [&](const std::vector<int64_t>& order) {
    std::vector<Row> next;
    for (int64_t r : order) next.push_back(rows[r]);
    rows = next;
  };
  run_steps(2);
  const std::vector<int64_t> expand{0, 0, 1, 1, 1};
  state.reorder(expand);  // B sentences into beams: memory and lengths move too
  gather(expand);
  EXPECT_EQ(state.batch(), 5);
  EXPECT_EQ(state.position(), 2);
  run_steps(2);
  const std::vector<int64_t> permute{1, 0, 4, 2, 2};             // within each sentence's rows
  EXPECT_THROW(state.reorder({0, 1}, /*memory=*/false), Error);  // batch size must stay
  EXPECT_THROW(state.reorder({0, 1, 2, 3, 5}, false), Error);    // row outside the batch
  state.reorder(permute, /*memory=*/false);
  gather(permute);
  run_steps(2);
  EXPECT_THROW(dec.step(ctx, random_tensor({5, 1, kD}, gen), state), Error);  // capacity

  // The reference: each row's history through the full causal forward, with its sentence's
  // memory.
  const int64_t B = static_cast<int64_t>(rows.size());
  Tensor x({B, kSteps, kD}), mem({B, 4, kD});
  Tensor lens({B}, DType::i32);
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t t = 0; t < kSteps; ++t)
      std::copy(rows[i].inputs[t].begin(), rows[i].inputs[t].end(),
                x.f32() + (i * kSteps + t) * kD);
    std::copy(memory.f32() + rows[i].sentence * 4 * kD,
              memory.f32() + (rows[i].sentence + 1) * 4 * kD, mem.f32() + i * 4 * kD);
    lens.i32()[i] = lengths.i32()[rows[i].sentence];
  }
  Tensor full = dec.forward(ctx, x, mem, AttentionMask{Tensor(), true}, AttentionMask{lens, false});
  for (int64_t i = 0; i < B; ++i)
    for (int64_t t = 0; t < kSteps; ++t) {
      std::vector<double> want(full.f32() + (i * kSteps + t) * kD,
                               full.f32() + (i * kSteps + t + 1) * kD);
      Tensor got = from_vector({kD}, rows[i].outputs[t]);
      EXPECT_TRUE(all_close(got, want, 1e-5, 1e-5)) << "row " << i << ", position " << t;
    }
}

// ---- Positions ----

TEST(PositionTest, SinusoidsFollowThePaper) {
  const int64_t T = 50, d = 16;
  Tensor pe = sinusoidal_positions(T, d);
  ASSERT_EQ(pe.shape(), (Shape{T, d}));
  for (int64_t pos : {0, 1, 7, 49})
    for (int64_t i : {0, 1, 3, 7}) {
      const double angle = pos / std::pow(10000.0, 2.0 * i / d);
      EXPECT_NEAR(pe.f32()[pos * d + 2 * i], std::sin(angle), 1e-6) << pos << ", " << i;
      EXPECT_NEAR(pe.f32()[pos * d + 2 * i + 1], std::cos(angle), 1e-6) << pos << ", " << i;
    }
  for (int64_t i = 0; i < pe.numel(); ++i) EXPECT_LE(std::fabs(pe.f32()[i]), 1.f);
  for (int64_t a = 0; a < T; ++a)
    for (int64_t b = a + 1; b < T; ++b)
      EXPECT_GT(max_abs_diff(pe.rows(a, a + 1), pe.rows(b, b + 1)), 1e-3) << a << ", " << b;
  // Large positions are computed in double before rounding.
  Tensor far = sinusoidal_positions(5001, 4);
  EXPECT_NEAR(far.f32()[5000 * 4 + 0], std::sin(5000.0), 1e-6);
  EXPECT_NEAR(far.f32()[5000 * 4 + 3], std::cos(5000.0 / 100.0), 1e-6);
}

TEST(PositionTest, OddWidthEndsInASine) {
  Tensor pe = sinusoidal_positions(3, 5);
  const double angle = 2 / std::pow(10000.0, 4.0 / 5);
  EXPECT_NEAR(pe.f32()[2 * 5 + 4], std::sin(angle), 1e-6);
  EXPECT_NEAR(pe.f32()[2 * 5 + 3], std::cos(2 / std::pow(10000.0, 2.0 / 5)), 1e-6);
}

TEST(PositionTest, LearnedPositionsAddAndAccumulate) {
  ParamStore store;
  LearnedPositions pos(store, "pos_embed", 6, 4);
  store.finalize();
  EXPECT_FALSE(store.get("pos_embed").decay);
  std::mt19937 gen(17);
  randomize(store, gen);
  Tensor x = random_tensor({2, 3, 4}, gen), dy = random_tensor({2, 3, 4}, gen);
  Arena arena;
  Context ctx{true, &arena, nullptr};
  Tensor y = pos.forward(ctx, x);
  std::vector<double> want(24), dtable(24, 0.0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 12; ++i) {
      want[b * 12 + i] = double(x.f32()[b * 12 + i]) + pos.table.value.f32()[i];
      dtable[i] += 2.0 * dy.f32()[b * 12 + i];  // two backward calls
    }
  EXPECT_TRUE(all_close(y, want, 1e-6, 1e-6));
  store.zero_grad();
  EXPECT_TRUE(all_close(pos.backward(ctx, dy), dy, 0, 0));
  pos.backward(ctx, dy);
  EXPECT_TRUE(all_close(pos.table.grad, dtable, 1e-6, 1e-6));  // rows 3..5 stay zero

  EXPECT_THROW(pos.forward(ctx, Tensor({1, 7, 4})), Error);
  EXPECT_THROW(pos.forward(ctx, Tensor({1, 2, 5})), Error);
}

}  // namespace

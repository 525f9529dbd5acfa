// The models with bf16 products against themselves in f32: the ViT and the translation model of
// the PyTorch parity fixtures (forward and gradients), short training runs that must learn as
// f32 does, and decoding. Skipped on CPUs without AVX512_BF16.
//
// The tolerance. Rounding an operand to bf16 (8 significant bits, round to nearest) changes it by
// at most u = 2⁻⁸ relative, so a product Σ_k x_k·w_k on rounded operands is off by at most
// about 2u·Σ_k |x_k·w_k| (the products of bf16 values are exact in f32, and f32 accumulation
// adds ~1e-7). Along the network the errors of the P
// products a value passes through add up (layer norms keep the scale), which gives
//   max |logit_bf16 − logit_f32| ≤ 2u·P·max(1, max |logit_f32|),
// with P = 6 per encoder layer (qkv, q·kᵀ, p·v, proj, fc1, fc2), 11 per decoder layer (the
// cross-attention adds q, kv, q·kᵀ, p·v, proj) plus the patch embedding and the head (ViT) or the
// output layer (translation). Rounding errors of independent sign mostly cancel, so the measured
// error is far below this bound (the tests print both); each test also checks that bf16 differs
// from f32 at all, so that an f32 run in disguise fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "common/optim/optim.h"
#include "common/params.h"
#include "common/seq2seq/model.h"
#include "common/seq2seq/search.h"
#include "fixture_io.h"
#include "model_fixtures.h"
#include "op_test_util.h"
#include "test_util.h"
#include "vit/vit.h"

using namespace vitk;
using namespace vitk::test;

namespace {

constexpr double kU = 1.0 / 256;  // bf16's unit roundoff, 2⁻⁸

// Tiny shapes gain nothing from threads, and on a shared machine every parallel region can wait a
// long time for a busy core (test_seq2seq.cpp does the same): the training runs use one thread.
struct OneThread {
  const int saved = ops::num_threads();
  OneThread() { ops::set_num_threads(1); }
  ~OneThread() { ops::set_num_threads(saved); }
};

struct Diff {
  double max_abs = 0, scale = 1, rel_l2 = 0;
};

// max |a − b|, max(1, max |b|) and ‖a − b‖₂ / ‖b‖₂.
Diff diff(const Tensor& a, const Tensor& b) {
  Diff d;
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.f32()[i], y = b.f32()[i];
    d.max_abs = std::max(d.max_abs, std::fabs(x - y));
    if (std::isnan(x)) d.max_abs = INFINITY;
    d.scale = std::max(d.scale, std::fabs(y));
    num += (x - y) * (x - y);
    den += y * y;
  }
  d.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

void load_params(const FixtureFile& f, ParamStore& store) {
  for (auto& p : store.params()) p.value.copy_from(f.read_f32("param/" + p.name));
  store.mark_changed();  // the values were written directly
}

// Logits and every gradient of the fixture's ViT at a precision (training forward, dropout 0).
struct VitRun {
  Tensor logits;
  std::map<std::string, Tensor> grads;
};
VitRun run_vit(vit::VisionTransformer& model, ParamStore& store, const FixtureFile& f,
               ops::Precision precision) {
  const Tensor images = f.read_f32("input/images"), targets = f.read_i32("input/targets");
  Arena arena;
  nn::Context ctx{true, &arena, nullptr};
  ctx.precision = precision;
  store.zero_grad();
  if (f.has("input/kept")) model.force_kept_patches(f.read_i32("input/kept"));  // patch_drop
  VitRun r;
  r.logits = model.forward(ctx, images).clone();
  Tensor dlogits = ctx.alloc(r.logits.shape());
  ops::cross_entropy_backward(r.logits, targets, 0.f, -100, 1.f, dlogits);
  model.backward(ctx, dlogits);
  for (const auto& p : store.params()) r.grads[p.name] = p.grad.clone();
  return r;
}

class Bf16Vit : public ::testing::TestWithParam<const char*> {};

TEST_P(Bf16Vit, ForwardAndGradientsAgreeWithF32WithinTheDerivedTolerance) {
  SKIP_WITHOUT_BF16();
  const FixtureFile f(std::string(VITK_SOURCE_DIR) + "/tests/fixtures/vit/" + GetParam() + ".h5");
  const vit::VitConfig c = vit_config_of(f);
  ParamStore store;
  vit::VisionTransformer model(store, c);
  store.finalize();
  load_params(f, store);
  const VitRun f32 = run_vit(model, store, f, ops::Precision::f32);
  const VitRun bf16 = run_vit(model, store, f, ops::Precision::bf16);

  const int products = 6 * c.layers + 2 + static_cast<int>(c.stem_channels.size());
  const Diff d = diff(bf16.logits, f32.logits);
  const double bound = 2 * kU * products * d.scale;
  std::printf("[ bf16 ] %s logits: max |diff| %.3g (bound %.3g), relative L2 %.3g\n", GetParam(),
              d.max_abs, bound, d.rel_l2);
  EXPECT_LE(d.max_abs, bound);
  EXPECT_GT(d.max_abs, 1e-6 * d.scale) << "bf16 gave f32's logits: were the products rounded?";

  // Gradients pass through about three times as many products (the forward's, then dx and dw).
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, g] : f32.grads) {
    const Diff dg = diff(bf16.grads.at(name), g);
    if (dg.rel_l2 > worst) worst = dg.rel_l2, worst_name = name;
  }
  std::printf("[ bf16 ] %s gradients: worst relative L2 difference %.3g (%s; bound %.3g)\n",
              GetParam(), worst, worst_name.c_str(), 2 * kU * 3 * products);
  EXPECT_LE(worst, 2 * kU * 3 * products) << worst_name;
  EXPECT_GT(worst, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Bf16Vit, ::testing::ValuesIn(test::kVitFixtures),
                         test::fixture_case_name);

class Bf16Seq2Seq : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16Seq2Seq, ForwardAgreesWithF32WithinTheDerivedTolerance) {
  SKIP_WITHOUT_BF16();
  const FixtureFile f(std::string(VITK_SOURCE_DIR) + "/tests/fixtures/seq2seq/" + GetParam() +
                      ".h5");
  const seq2seq::TransformerConfig c = seq2seq_config_of(f);
  ParamStore store;
  seq2seq::Transformer model(store, c);
  store.finalize();
  load_params(f, store);
  const Tensor source = f.read_i32("input/source"), sl = f.read_i32("input/source_lengths");
  const Tensor target_in = f.read_i32("input/target_in"), tl = f.read_i32("input/target_lengths");
  Arena arena;
  Tensor logits[2];
  for (int i = 0; i < 2; ++i) {
    arena.reset();
    nn::Context ctx{false, &arena, nullptr};
    ctx.precision = i ? ops::Precision::bf16 : ops::Precision::f32;
    logits[i] = model.forward(ctx, source, sl, target_in, tl).clone();
  }
  const int products = 6 * c.encoder_layers + 11 * c.decoder_layers + 1;
  const Diff d = diff(logits[1], logits[0]);
  const double bound = 2 * kU * products * d.scale;
  std::printf("[ bf16 ] %s logits: max |diff| %.3g (bound %.3g), relative L2 %.3g\n",
              GetParam().c_str(), d.max_abs, bound, d.rel_l2);
  EXPECT_LE(d.max_abs, bound);
  EXPECT_GT(d.max_abs, 1e-6 * d.scale);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Bf16Seq2Seq,
                         ::testing::Values("01_post_relu_tied", "02_pre_gelu_untied"),
                         [](const auto& p) { return "Case" + p.param; });

// ---- Training ----

// A small ViT memorises a fixed batch of random images with random labels (every part of the
// backward matters): bf16 from the same start must bring the loss down as f32 does.
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

TEST(Bf16Training, AViTLearnsAsInF32) {
  SKIP_WITHOUT_BF16();
  const OneThread one_thread;
  const int steps = 120;
  const std::vector<double> f32 = vit_losses(ops::Precision::f32, steps);
  const std::vector<double> bf16 = vit_losses(ops::Precision::bf16, steps);
  std::printf(
      "[ bf16 ] ViT loss: start %.4f / %.4f, step 40 %.4f / %.4f, end %.4f / %.4f (f32 / bf16)\n",
      f32[0], bf16[0], f32[40], bf16[40], f32.back(), bf16.back());
  EXPECT_NEAR(bf16[0], f32[0], 0.01) << "the same start";
  EXPECT_LT(f32.back(), 0.1 * f32[0]) << "f32 memorises the batch";
  EXPECT_LT(bf16.back(), 0.1 * bf16[0]) << "bf16 memorises the batch";
  EXPECT_LT(bf16[40], 1.5 * f32[40] + 0.05) << "and about as fast";
}

// The translation model on the copy task: the loss curve of bf16 follows f32's.
std::vector<double> copy_losses(ops::Precision precision, int steps) {
  seq2seq::TransformerConfig c;
  c.vocab_size = 14;
  c.d_model = 64;
  c.heads = 1;
  c.d_ff = 128;
  c.encoder_layers = 2;
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

TEST(Bf16Training, TheCopyTaskLossFallsAsInF32) {
  SKIP_WITHOUT_BF16();
  const OneThread one_thread;
  const int steps = 300;
  const std::vector<double> f32 = copy_losses(ops::Precision::f32, steps);
  const std::vector<double> bf16 = copy_losses(ops::Precision::bf16, steps);
  auto tail = [&](const std::vector<double>& l) {
    double s = 0;
    for (int i = steps - 20; i < steps; ++i) s += l[static_cast<size_t>(i)];
    return s / 20;
  };
  std::printf(
      "[ bf16 ] copy task loss: start %.4f / %.4f, last 20 steps %.4f / %.4f (f32 / bf16)\n",
      f32[0], bf16[0], tail(f32), tail(bf16));
  EXPECT_LT(tail(f32), 0.25 * f32[0]);
  EXPECT_LT(tail(bf16), 0.25 * bf16[0]);
  EXPECT_LT(tail(bf16), 1.5 * tail(f32) + 0.05);
}

}  // namespace

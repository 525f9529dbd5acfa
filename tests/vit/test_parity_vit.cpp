// Parity of the Vision Transformer (vit/vit.h) with PyTorch: a re-implementation of timm's
// VisionTransformer in tests/parity/make_vit_fixtures.py writes the parameters under timm's names,
// images, targets, the logits, the mean cross-entropy and its gradients w.r.t. the images and
// every parameter (computed in float64, stored as float32). Each case builds vitk's model from
// the file's configuration, checks that its parameter names are exactly the fixture's, loads
// them, runs forward and backward in training mode (dropout 0; with patch_drop, replaying the
// fixture's draw of kept patches; with pos_conv_blocks, through the positional convolutions)
// and compares everything, in each precision of the products. In f32, with the tolerance rule of
// the core's parity test (util/parity.h):
//   |vitk − PyTorch| ≤ 1e-5·|PyTorch| + 1e-6·max(1, max|PyTorch| over the tensor).
// With bf16 products, with the bound bf16's rounding gives (util/parity.h): the logits within
// 2u·P·max(1, max|logit|), the gradients within a relative L2 difference of 2u·3P, and both
// further from PyTorch than the f32 tolerance allows (bf16 cases are skipped on CPUs without
// AVX512_BF16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/ops/ops.h"
#include "common/params.h"
#include "common/tensor.h"
#include "util/fixture_io.h"
#include "util/model_fixtures.h"
#include "util/parity.h"
#include "util/test_util.h"
#include "vit/vit.h"

using namespace vitk;

namespace {

using test::compare;
using test::Errors;
using test::kAbsTol;
using test::kRelTol;

std::string fixture_path(const std::string& name) {
  return std::string(VITK_SOURCE_DIR) + "/tests/fixtures/vit/" + name + ".h5";
}

// The logits and every gradient of a bf16 run against the fixture's, within bf16's bound.
void expect_bf16_bound(const std::string& name, const vit::VitConfig& config, const Tensor& logits,
                       const ParamStore& store, const test::FixtureFile& f) {
  const int products =
      6 * static_cast<int>(config.layers) + 2 + static_cast<int>(config.stem_channels.size());
  const double u = test::kBf16Roundoff;
  const test::OutputDiff d = test::output_diff(logits, f.read_f32("output/logits"));
  const double bound = 2 * u * products * d.scale;
  std::printf("[ bf16 ] %s logits: max |diff| %.3g (bound %.3g), relative L2 %.3g\n", name.c_str(),
              d.max_abs, bound, d.rel_l2);
  EXPECT_LE(d.max_abs, bound);
  EXPECT_GT(d.max_abs, kRelTol * d.scale)
      << "bf16 within f32's tolerance: were the products rounded?";
  double worst = 0;
  std::string worst_name;
  for (const auto& p : store.params()) {
    const test::OutputDiff dg = test::output_diff(p.grad, f.read_f32("grad/param/" + p.name));
    if (dg.rel_l2 > worst) worst = dg.rel_l2, worst_name = p.name;
  }
  std::printf("[ bf16 ] %s gradients: worst relative L2 difference %.3g (%s; bound %.3g)\n",
              name.c_str(), worst, worst_name.c_str(), 2 * u * 3 * products);
  EXPECT_LE(worst, 2 * u * 3 * products) << worst_name;
  EXPECT_GT(worst, 1e-6);
}

class ParityVit : public ::testing::TestWithParam<std::tuple<const char*, ops::Precision>> {};

TEST_P(ParityVit, MatchesPyTorch) {
  const std::string name = std::get<0>(GetParam());
  const ops::Precision precision = std::get<1>(GetParam());
  SKIP_UNLESS_SUPPORTED(precision);
  test::FixtureFile f(fixture_path(name));
  const vit::VitConfig config = test::vit_config_of(f);
  ParamStore store;
  vit::VisionTransformer model(store, config);
  store.finalize();

  // The names prove the mapping: vitk registers exactly timm's names.
  ASSERT_NO_FATAL_FAILURE(test::load_fixture_params(f, store));
  store.zero_grad();

  const Tensor images = f.read_f32("input/images");  // [B, C, H, W]
  const Tensor targets = f.read_i32("input/targets");
  Arena arena;
  nn::Context ctx{true, &arena, nullptr};
  ctx.precision = precision;
  // Patch dropout: replay the fixture's draw (without it, a forward with no Rng would throw).
  const bool dropped = f.has("input/kept");
  if (dropped) model.force_kept_patches(f.read_i32("input/kept"));
  const Tensor logits = model.forward(ctx, images);  // [B, classes]
  if (dropped) {
    ASSERT_EQ(model.kept_patches().shape(), f.read_i32("input/kept").shape());
    EXPECT_EQ(model.kept_patches().dim(1), config.kept_patches());
  }
  Tensor dlogits = ctx.alloc(logits.shape());
  ops::cross_entropy_backward(logits, targets, 0.f, -100, 1.f, dlogits);
  Tensor dimages;
  if (precision != ops::Precision::f32) {
    model.backward(ctx, dlogits, &dimages);
    expect_bf16_bound(name, config, logits, store, f);
    return;
  }
  Errors e_logits = compare("logits", logits, f.read_f32("output/logits"));
  const ops::CrossEntropyStats loss = ops::cross_entropy_forward(logits, targets);
  const double want_loss = f.read_f32("output/loss").f32()[0];
  EXPECT_NEAR(loss.loss, want_loss, kRelTol * std::fabs(want_loss) + kAbsTol);

  model.backward(ctx, dlogits, &dimages);
  const Errors e_images = compare("grad/images", dimages, f.read_f32("grad/images"));
  Errors e_params;
  for (const auto& p : store.params())
    e_params.merge(compare("grad/param/" + p.name, p.grad, f.read_f32("grad/param/" + p.name)));

  // vitk's errors next to those of PyTorch's own float32 run against the same reference.
  std::printf("[ parity ] %s (vitk | PyTorch float32: max|err|, fraction of the tolerance)\n",
              name.c_str());
  auto line = [&](const char* group, const Errors& e) {
    const std::string g = group;
    std::printf("[ parity ]   %-8s %.2e, %.3f at %s | %.2e, %.3f\n", group, e.max_abs, e.ratio,
                e.where.c_str(), f.attr_float("torch_float32_max_abs_" + g),
                f.attr_float("torch_float32_error_" + g));
  };
  line("logits", e_logits);
  line("dimages", e_images);
  line("dparams", e_params);
}

INSTANTIATE_TEST_SUITE_P(
    Vit, ParityVit,
    ::testing::Combine(::testing::ValuesIn(test::kVitFixtures),
                       ::testing::ValuesIn(test::kPrecisions)),
    [](const ::testing::TestParamInfo<std::tuple<const char*, ops::Precision>>& p) {
      // f32 keeps the name the case had before precisions: case<fixture>.
      const ops::Precision precision = std::get<1>(p.param);
      return std::string("case") + std::get<0>(p.param) +
             (precision == ops::Precision::f32 ? ""
                                               : std::string("_") + ops::precision_name(precision));
    });

}  // namespace

// The ViT's claims that a gradient is final (nn::Context::grads_final), checked by train::Step
// (StepOptions::check_final_claims) on two real steps in every layout that moves parameters around:
// stem, positional and MLP convolutions, patch dropout, avg pooling, the diagonal mask. (What the
// claims are for and the check itself: common/test_grad_claims.cpp.)
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "util/grad_claims.h"
#include "util/test_util.h"
#include "vit/train_task.h"

namespace {

using vitk::DType;
using vitk::Tensor;
using vitk::test::checked_steps;

struct VitCase {
  std::string name;
  void (*set)(vitk::vit::VitConfig&);
};

class GradClaimsVit : public ::testing::TestWithParam<VitCase> {};

TEST_P(GradClaimsVit, NoGradientChangesAfterItIsDeclaredFinal) {
  vitk::test::OneThread one_thread;
  vitk::vit::VitConfig c;
  c.image_height = c.image_width = 16;
  c.patch_size = 4;
  c.channels = 1;
  c.num_classes = 5;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.layers = 3;
  c.preprocess.mean = {0.5f};
  c.preprocess.std = {0.5f};
  GetParam().set(c);
  vitk::ops::Rng rng(3);
  vitk::datasets::Batch batch;
  const int64_t B = 4;
  batch.images = Tensor({B, 1, 16, 16});
  batch.labels = Tensor({B}, DType::i32);
  for (int64_t i = 0; i < batch.images.numel(); ++i)
    batch.images.f32()[i] = static_cast<float>(rng.normal());
  for (int64_t i = 0; i < B; ++i) batch.labels.i32()[i] = static_cast<int32_t>(i % 5);
  vitk::vit::TrainOptions options;
  options.batch_size = B;
  vitk::vit::VitTask task(c, options, std::move(batch));
  int64_t claims = 0;
  ASSERT_NO_THROW(claims = checked_steps(task));
  EXPECT_EQ(claims, 2 * c.layers);  // one per block and step
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, GradClaimsVit,
    ::testing::Values(VitCase{"plain", [](vitk::vit::VitConfig&) {}},
                      VitCase{"pos_conv",
                              [](vitk::vit::VitConfig& c) {
                                c.pos_conv_blocks = {0, 2};
                              }},
                      VitCase{"ffn_conv", [](vitk::vit::VitConfig& c) { c.ffn_conv_blocks = {1}; }},
                      VitCase{"stem",
                              [](vitk::vit::VitConfig& c) {
                                c.stem_channels = {8};
                                c.stem_strides = {2};
                              }},
                      VitCase{"patch_drop_drop_path",
                              [](vitk::vit::VitConfig& c) {
                                c.patch_drop = 0.25f;
                                c.drop_path = 0.1f;
                                c.dropout = 0.1f;
                              }},
                      VitCase{"avg_pool", [](vitk::vit::VitConfig& c) { c.pool = "avg"; }},
                      VitCase{"diag_mask", [](vitk::vit::VitConfig& c) { c.diag_mask = true; }}),
    [](const ::testing::TestParamInfo<VitCase>& p) { return p.param.name; });

}  // namespace

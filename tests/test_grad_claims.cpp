// The claims a model's backward makes for data parallelism (nn::Context::grads_final: "every
// gradient from this parameter's offset on is final"), checked on the real steps of the ViT and
// the translation model in every layout that moves parameters around (stem, positional and MLP
// convolutions, patch dropout, avg pooling, tied and untied embeddings, pre- and post-norm). A
// claim made too early would have the ranks sum a gradient before backward is done with it, and
// the run would silently train on part of it: train::Step's check (StepOptions::
// check_final_claims) keeps a copy of every range at its claim and compares it afterwards.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/dist/world.h"
#include "common/seq2seq/train_task.h"
#include "common/train/step.h"
#include "test_util.h"
#include "vit/train_task.h"

namespace {

using vitk::DType;
using vitk::Tensor;
namespace train = vitk::train;

// Two steps of `task` with the check on; returns the claims made.
int64_t checked_steps(train::Task& task) {
  task.setup(nullptr, 1, train::Partition{});
  const std::unique_ptr<vitk::optim::Optimizer> optimizer = task.make_optimizer();
  const train::ConstantRate schedule(1e-3f);
  vitk::dist::World one;
  train::StepOptions so;
  so.world = &one;
  so.check_final_claims = true;
  train::Step step(task, *optimizer, schedule, so);
  vitk::ops::Rng rng(7);
  for (int i = 0; i < 2; ++i) {
    task.next_batch();
    step.run(rng);
  }
  return step.final_claims();
}

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

struct MtCase {
  std::string name;
  bool tied, pre_norm;
};

class GradClaimsTranslation : public ::testing::TestWithParam<MtCase> {};

TEST_P(GradClaimsTranslation, NoGradientChangesAfterItIsDeclaredFinal) {
  vitk::test::OneThread one_thread;
  vitk::seq2seq::TransformerConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.layers = 2;
  c.decoder_layers = 3;
  c.tied_embeddings = GetParam().tied;
  c.pre_norm = GetParam().pre_norm;
  vitk::ops::Rng rng(5);
  const int64_t B = 3, T = 5;
  auto ids = [&] {
    Tensor t({B, T}, DType::i32);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.i32()[i] = static_cast<int32_t>(4 + rng.next_u64() % 28);
    return t;
  };
  vitk::seq2seq::TokenBatch batch;
  batch.source = ids();
  batch.target_in = ids();
  batch.target_out = ids();
  batch.source_lengths = Tensor({B}, DType::i32);
  batch.target_lengths = Tensor({B}, DType::i32);
  for (int64_t i = 0; i < B; ++i)
    batch.source_lengths.i32()[i] = batch.target_lengths.i32()[i] = static_cast<int32_t>(T);
  batch.target_tokens = B * T;
  vitk::seq2seq::TrainOptions options;
  vitk::seq2seq::TranslationTask task(c, options, std::move(batch));
  int64_t claims = 0;
  ASSERT_NO_THROW(claims = checked_steps(task));
  EXPECT_EQ(claims, 2 * (c.layers + c.decoder_layers));
}

INSTANTIATE_TEST_SUITE_P(Layouts, GradClaimsTranslation,
                         ::testing::Values(MtCase{"tied_pre_norm", true, true},
                                           MtCase{"untied_post_norm", false, false},
                                           MtCase{"untied_pre_norm", false, true}),
                         [](const ::testing::TestParamInfo<MtCase>& p) { return p.param.name; });

// The check itself: a model that claims its second parameter final and then writes it again.
class EarlyClaim : public train::Task {
 public:
  train::TaskInfo info() const override { return {}; }
  void setup(const vitk::io::CheckpointMeta*, uint64_t, const train::Partition&) override {
    params_.add("a", {4});
    params_.add("b", {4});
    params_.finalize();
  }
  vitk::ParamStore& params() override { return params_; }
  std::unique_ptr<vitk::optim::Optimizer> make_optimizer() override {
    return std::make_unique<vitk::optim::Sgd>(params_, vitk::optim::SgdOptions{});
  }
  std::unique_ptr<vitk::optim::Schedule> make_schedule() override {
    return std::make_unique<train::ConstantRate>(0.1f);
  }
  int64_t batches_in_epoch(int64_t) override { return 1; }
  void start_epoch(int64_t, int64_t) override {}
  bool next_batch() override { return true; }
  std::pair<std::string, int64_t> batching() const override { return {"batch-size", 1}; }
  train::StepStats forward_loss(vitk::nn::Context&, int64_t, int) override {
    train::StepStats s;
    s.loss = s.loss_sum = 1;
    s.items = s.units = 1;
    return s;
  }
  void backward(vitk::nn::Context& ctx) override {
    vitk::Parameter& b = params_.get("b");
    b.grad.f32()[0] += 1;
    ctx.gradients_final_from(b);
    b.grad.f32()[1] += 1;  // too late: b was declared final
    ctx.gradients_final_from(params_.get("a"));
  }
  train::Metrics validate(const train::ValidateContext&) override { return {}; }
  std::string describe(const train::Metrics&) const override { return ""; }
  std::string describe_best(double) const override { return ""; }
  vitk::io::CheckpointMeta checkpoint_meta() const override { return {}; }
  void log_setup(std::ostream&) const override {}

 private:
  vitk::ParamStore params_;
};

TEST(GradClaims, AWriteAfterAClaimIsCaughtAndNamed) {
  EarlyClaim task;
  const std::string e = vitk::test::error_of([&] { checked_steps(task); });
  EXPECT_TRUE(vitk::test::contains(e, "b: its gradient changed after")) << e;
}

}  // namespace

// The claims a model's backward makes for data parallelism (nn::Context::grads_final: "every
// gradient from this parameter's offset on is final"). A claim made too early would have the ranks
// sum a gradient before backward is done with it, and the run would silently train on part of it:
// train::Step's check (StepOptions::check_final_claims) keeps a copy of every range at its claim
// and compares it afterwards. Here the check itself catches a model that claims early; the claims
// of the real models, in every layout that moves parameters around: vit/test_grad_claims.cpp and
// seq2seq/test_grad_claims.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "common/train/step.h"
#include "util/grad_claims.h"
#include "util/test_util.h"

namespace {

namespace train = vitk::train;
using vitk::test::checked_steps;

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

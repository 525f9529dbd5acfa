// Training: the soft-target cross-entropy against a naive loop and finite differences, the model
// options, and `vitk train` / `vitk eval` end to end on a tiny generated dataset (learning, exact
// resume, Ctrl-C, reports, errors).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/ops.h"
#include "op_test_util.h"
#include "tools/vit_options.h"

using namespace vitk;
using namespace vitk::test;

namespace {

struct SoftRef {
  double loss = 0;
  int64_t correct = 0;
  std::vector<double> dlogits;
};

// −Σ_c t_c·log softmax(z)_c per row, mean over rows, in double.
SoftRef naive_soft_ce(const Tensor& logits, const Tensor& targets) {
  const int64_t M = logits.dim(0), C = logits.dim(1);
  std::vector<double> z = to_double(logits), t = to_double(targets);
  SoftRef r;
  r.dlogits.assign(z.size(), 0.0);
  for (int64_t m = 0; m < M; ++m) {
    const double* row = &z[m * C];
    const double* tr = &t[m * C];
    double mx = row[0];
    int64_t arg = 0, targ = 0;
    for (int64_t c = 1; c < C; ++c) {
      if (row[c] > mx) mx = row[c], arg = c;
      if (tr[c] > tr[targ]) targ = c;
    }
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(row[c] - mx);
    const double lse = mx + std::log(sum);
    double mass = 0;
    for (int64_t c = 0; c < C; ++c) {
      r.loss -= tr[c] * (row[c] - lse);
      mass += tr[c];
    }
    for (int64_t c = 0; c < C; ++c)
      r.dlogits[m * C + c] = (std::exp(row[c] - lse) * mass - tr[c]) / static_cast<double>(M);
    r.correct += arg == targ;
  }
  r.loss /= static_cast<double>(M);
  return r;
}

// Rows of random distributions, like mixed and smoothed one-hot targets.
Tensor soft_targets(int64_t M, int64_t C, std::mt19937& gen) {
  Tensor t({M, C});
  std::uniform_int_distribution<int64_t> cls(0, C - 1);
  std::uniform_real_distribution<float> lam(0.f, 1.f);
  const float eps = 0.1f;
  for (int64_t m = 0; m < M; ++m) {
    float* row = t.f32() + m * C;
    const float l = lam(gen);
    for (int64_t c = 0; c < C; ++c) row[c] = eps / C;
    row[cls(gen)] += l * (1 - eps);
    row[cls(gen)] += (1 - l) * (1 - eps);
  }
  return t;
}

}  // namespace

TEST(SoftCrossEntropy, ForwardAndBackwardMatchNaive) {
  std::mt19937 gen(811);
  for (int64_t C : {2, 7, 1000}) {
    SCOPED_TRACE("C " + std::to_string(C));
    const int64_t M = 13;
    Tensor logits = random_tensor({M, C}, gen, -4.f, 4.f);
    Tensor targets = soft_targets(M, C, gen);
    const SoftRef ref = naive_soft_ce(logits, targets);
    const ops::CrossEntropyStats s = ops::soft_cross_entropy_forward(logits, targets);
    EXPECT_NEAR(s.loss, ref.loss, 1e-5 * std::max(1.0, ref.loss));
    EXPECT_EQ(s.count, M);
    EXPECT_EQ(s.correct, ref.correct);
    for (float scale : {1.f, 2.5f}) {
      Tensor d = garbage_tensor({M, C});
      ops::soft_cross_entropy_backward(logits, targets, scale, d);
      std::vector<double> want = ref.dlogits;
      for (double& g : want) g *= scale;
      EXPECT_TRUE(all_close(d, want, 1e-7, 1e-5)) << "scale " << scale;
    }
  }
}

TEST(SoftCrossEntropy, OneHotTargetsEqualHardCrossEntropy) {
  std::mt19937 gen(812);
  const int64_t M = 9, C = 6;
  Tensor logits = random_tensor({M, C}, gen, -3.f, 3.f);
  Tensor labels = ids_tensor({0, 5, 2, 2, 1, 4, 3, 0, 5});
  for (float eps : {0.f, 0.1f}) {
    Tensor targets({M, C});
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c)
        targets.f32()[m * C + c] = (c == labels.i32()[m] ? 1 - eps : 0.f) + eps / C;
    const auto soft = ops::soft_cross_entropy_forward(logits, targets);
    const auto hard = ops::cross_entropy_forward(logits, labels, eps);
    EXPECT_NEAR(soft.loss, hard.loss, 1e-5);
    EXPECT_EQ(soft.correct, hard.correct);
    Tensor ds({M, C}), dh({M, C});
    ops::soft_cross_entropy_backward(logits, targets, 1.f, ds);
    ops::cross_entropy_backward(logits, labels, eps, -100, 1.f, dh);
    EXPECT_TRUE(all_close(ds, dh, 1e-6, 1e-5));
  }
}

TEST(SoftCrossEntropy, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(813);
  const int64_t M = 5, C = 4;
  Tensor logits = random_tensor({M, C}, gen, -2.f, 2.f);
  Tensor targets = soft_targets(M, C, gen);
  // Not a distribution: the gradient must use the row's mass, p·Σt − t.
  targets.f32()[0] += 0.5f;
  auto loss = [&] { return ops::soft_cross_entropy_forward(logits, targets).loss; };
  Tensor d({M, C});
  ops::soft_cross_entropy_backward(logits, targets, 1.f, d);
  FdOptions opt;
  opt.atol = 2e-4;
  EXPECT_GRAD_OK(check_gradient("dlogits", logits, d, loss, opt));
  // And the gradient with respect to the targets is not ours to give, but the loss is linear in
  // them: a check that the forward really weighs each class by its target.
  const double before = loss();
  targets.f32()[1] += 1.f;
  const double after = loss();
  const double lse_minus_z1 = [&] {
    double mx = -1e30, sum = 0;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, static_cast<double>(logits.f32()[c]));
    for (int64_t c = 0; c < C; ++c) sum += std::exp(logits.f32()[c] - mx);
    return mx + std::log(sum) - logits.f32()[1];
  }();
  EXPECT_NEAR(after - before, lse_minus_z1 / M, 1e-5);
}

TEST(SoftCrossEntropy, StableForLargeLogitsAndChecksShapes) {
  std::mt19937 gen(814);
  Tensor logits = random_tensor({4, 5}, gen, -1.f, 1.f);
  for (int64_t i = 0; i < logits.numel(); ++i) logits.f32()[i] += i % 2 ? 3000.f : -3000.f;
  Tensor targets = soft_targets(4, 5, gen);
  const auto s = ops::soft_cross_entropy_forward(logits, targets);
  EXPECT_TRUE(std::isfinite(s.loss));
  EXPECT_NEAR(s.loss, naive_soft_ce(logits, targets).loss, 1e-3);
  Tensor d({4, 5});
  ops::soft_cross_entropy_backward(logits, targets, 1.f, d);
  for (int64_t i = 0; i < d.numel(); ++i) ASSERT_TRUE(std::isfinite(d.f32()[i]));
  Tensor wrong({4, 6});
  EXPECT_THROW(ops::soft_cross_entropy_forward(logits, wrong), Error);
  EXPECT_THROW(ops::soft_cross_entropy_backward(logits, targets, 1.f, wrong), Error);
  EXPECT_THROW(ops::soft_cross_entropy_forward(logits, Tensor({4, 5}, DType::i32)), Error);
}

// ---- Model options ------------------------------------------------------------------------------

namespace {

namespace po = boost::program_options;

po::variables_map parse_model_options(const std::vector<std::string>& args) {
  po::options_description d;
  tools::add_vit_options(d);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(d).run(), vm);
  po::notify(vm);
  return vm;
}

std::string usage_error(const std::vector<std::string>& args) {
  try {
    tools::vit_config_from(parse_model_options(args), vit::VitConfig{});
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(VitOptions, GivenOptionsOverrideTheBase) {
  auto vm = parse_model_options({"--model.image_size", "28", "--model.patch_size", "4",
                                 "--model.channels", "1", "--model.mean", "0.286", "--model.std",
                                 "0.353", "--model.d_model", "64", "--model.heads", "2",
                                 "--model.drop_path", "0.1"});
  vit::VitConfig base;
  base.layers = 3;  // not given: kept
  const vit::VitConfig c = tools::vit_config_from(vm, base);
  EXPECT_EQ(c.image_height, 28);
  EXPECT_EQ(c.image_width, 28);
  EXPECT_EQ(c.patch_size, 4);
  EXPECT_EQ(c.channels, 1);
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.heads, 2);
  EXPECT_EQ(c.layers, 3);
  EXPECT_FLOAT_EQ(c.drop_path, 0.1f);
  ASSERT_EQ(c.preprocess.mean.size(), 1u);
  EXPECT_FLOAT_EQ(c.preprocess.std[0], 0.353f);
  auto given = tools::given_vit_options(vm);
  EXPECT_EQ(given.size(), 8u);
  EXPECT_NE(std::find(given.begin(), given.end(), "patch_size"), given.end());
}

TEST(VitOptions, EveryConfigKeyIsAnOption) {
  po::options_description d;
  tools::add_vit_options(d);
  for (const auto& [key, value] : vit::to_config_map(vit::VitConfig{}))
    EXPECT_NE(d.find_nothrow("model." + key, false), nullptr) << key;
}

TEST(VitOptions, BadValuesNameTheOption) {
  EXPECT_NE(usage_error({"--model.patch_size", "5"}).find("model.patch_size"), std::string::npos);
  EXPECT_NE(usage_error({"--model.image_size", "abc"}).find("--model.image_size"),
            std::string::npos);
  EXPECT_NE(usage_error({"--model.mean", "0.5,x,0.5"}).find("--model.mean"), std::string::npos);
  EXPECT_NE(usage_error({"--model.heads", "5"}).find("heads"), std::string::npos);
  EXPECT_NE(usage_error({"--model.type", "transformer"}).find("--model.type"), std::string::npos);
  EXPECT_NE(usage_error({"--model.channels", "1"}).find("mean"), std::string::npos)
      << "one channel with three mean values";
  EXPECT_EQ(usage_error({"--model.channels", "1", "--model.mean", "0.5", "--model.std", "0.5"}),
            "");
}

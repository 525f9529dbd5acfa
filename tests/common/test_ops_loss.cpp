// Cross-entropy (with class labels and with soft targets), L2 norm and gradient clipping against
// double-precision references and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/ops.h"
#include "util/isa_levels.h"
#include "util/op_test_util.h"

using namespace vitk;
using namespace vitk::test;

namespace {

struct CeRef {
  double loss = 0;
  int64_t count = 0, correct = 0;
  std::vector<double> dlogits;  // d(mean loss)/d(logits)
};

// Per row: (1 − ε)·(−log p_t) + ε·mean_c(−log p_c), mean over rows whose target is not ignored.
CeRef naive_cross_entropy(const Tensor& logits, const Tensor& targets, double eps, int ignore) {
  const int64_t M = logits.dim(0), C = logits.dim(1);
  std::vector<double> z = to_double(logits);
  CeRef r;
  r.dlogits.assign(z.size(), 0.0);
  double total = 0;
  for (int64_t m = 0; m < M; ++m) {
    const int t = targets.i32()[m];
    if (t == ignore) continue;
    const double* row = &z[m * C];
    double mx = row[0];
    int64_t arg = 0;
    for (int64_t c = 1; c < C; ++c)
      if (row[c] > mx) mx = row[c], arg = c;
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(row[c] - mx);
    const double lse = mx + std::log(sum);
    double mean_nll = 0;
    for (int64_t c = 0; c < C; ++c) mean_nll += (lse - row[c]) / C;
    total += (1 - eps) * (lse - row[t]) + eps * mean_nll;
    r.count += 1;
    r.correct += arg == t;
    for (int64_t c = 0; c < C; ++c)
      r.dlogits[m * C + c] = std::exp(row[c] - lse) - eps / C - (c == t ? 1 - eps : 0.0);
  }
  if (r.count > 0) {
    r.loss = total / r.count;
    for (double& g : r.dlogits) g /= r.count;
  }
  return r;
}

std::vector<double> scaled(std::vector<double> v, double s) {
  for (double& e : v) e *= s;
  return v;
}

// Targets in [0, C) with every fourth row set to `ignore`, and a few rows made correct.
Tensor make_targets(int64_t M, int64_t C, int ignore, std::mt19937& gen) {
  std::vector<int32_t> t(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) t[m] = m % 4 == 3 ? ignore : static_cast<int32_t>(gen() % C);
  return ids_tensor(t);
}

}  // namespace

// ---- Cross-entropy
// --------------------------------------------------------------------------------

VITK_AT_EVERY_ISA_LEVEL(CrossEntropy);

TEST_P(CrossEntropy, ForwardMatchesNaiveLogSoftmax) {
  std::mt19937 gen(701);
  struct Case {
    int64_t M, C;
  };
  for (Case c : {Case{13, 7}, Case{9, 1000}, Case{5, 2}})
    for (float eps : {0.f, 0.1f}) {
      SCOPED_TRACE("M " + std::to_string(c.M) + " C " + std::to_string(c.C) + " eps " +
                   std::to_string(eps));
      Tensor logits = random_tensor({c.M, c.C}, gen, -4.f, 4.f);
      Tensor targets = make_targets(c.M, c.C, -100, gen);
      // Make rows 0 and 1 correct: their target gets the largest logit.
      for (int64_t m = 0; m < 2; ++m) logits.f32()[m * c.C + targets.i32()[m]] = 10.f;
      const CeRef ref = naive_cross_entropy(logits, targets, eps, -100);
      const ops::CrossEntropyStats s = ops::cross_entropy_forward(logits, targets, eps);
      EXPECT_NEAR(s.loss, ref.loss, 1e-5 * std::max(1.0, ref.loss));
      EXPECT_EQ(s.count, ref.count);
      EXPECT_EQ(s.correct, ref.correct);
      EXPECT_GE(s.correct, 2);
    }
}

TEST_P(CrossEntropy, IgnoreIndexCanBeAValidClass) {
  // With ignore_index = 0 (a padding id) rows with target 0 do not count.
  std::mt19937 gen(702);
  Tensor logits = random_tensor({8, 5}, gen, -3.f, 3.f);
  Tensor targets = ids_tensor({0, 1, 2, 0, 4, 0, 3, 1});
  const CeRef ref = naive_cross_entropy(logits, targets, 0.1, 0);
  const ops::CrossEntropyStats s = ops::cross_entropy_forward(logits, targets, 0.1f, 0);
  EXPECT_EQ(s.count, 5);
  EXPECT_NEAR(s.loss, ref.loss, 1e-5);
  EXPECT_EQ(s.correct, ref.correct);
  Tensor d = garbage_tensor({8, 5});
  ops::cross_entropy_backward(logits, targets, 0.1f, 0, 1.f, d);
  EXPECT_TRUE(all_close(d, ref.dlogits, 1e-6, 1e-5));
}

TEST_P(CrossEntropy, AllRowsIgnoredGivesZeroLossAndZeroGradient) {
  std::mt19937 gen(703);
  Tensor logits = random_tensor({4, 6}, gen), targets = ids_tensor({-100, -100, -100, -100});
  const ops::CrossEntropyStats s = ops::cross_entropy_forward(logits, targets, 0.1f);
  EXPECT_EQ(s.loss, 0.0);
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.correct, 0);
  Tensor d = garbage_tensor({4, 6});
  ops::cross_entropy_backward(logits, targets, 0.1f, -100, 1.f, d);
  for (int64_t i = 0; i < d.numel(); ++i) ASSERT_EQ(d.f32()[i], 0.f) << i;
}

TEST_P(CrossEntropy, ForwardBackwardInOnePassMatchesNaiveAlsoInPlace) {
  // The fused op: the loss, count and correct of the forward and the gradient of the backward,
  // into a separate tensor and over the logits themselves; large enough to run in parallel.
  std::mt19937 gen(705);
  for (int64_t C : {int64_t{7}, int64_t{8000}}) {
    const int64_t M = C == 7 ? 11 : 37;
    SCOPED_TRACE("C " + std::to_string(C));
    Tensor logits = random_tensor({M, C}, gen, -4.f, 4.f);
    Tensor targets = make_targets(M, C, 0, gen);
    // Row 0: the target ties with an earlier maximum (not correct, as torch.argmax); row 1: the
    // target is the first of two maxima (correct).
    const int32_t t0 = targets.i32()[0] = static_cast<int32_t>(C - 1);
    logits.f32()[t0] = logits.f32()[1] = 9.f;
    const int32_t t1 = targets.i32()[1] = 2;
    logits.f32()[C + t1] = logits.f32()[C + C - 1] = 9.f;
    const CeRef ref = naive_cross_entropy(logits, targets, 0.1, 0);
    ASSERT_GE(ref.correct, 1);

    Tensor d = garbage_tensor({M, C});
    const ops::CrossEntropyStats s =
        ops::cross_entropy_forward_backward(logits, targets, 0.1f, 0, 2.f, d);
    EXPECT_EQ(s.count, ref.count);
    EXPECT_EQ(s.correct, ref.correct);
    EXPECT_NEAR(s.loss, ref.loss, 1e-5 * std::max(1.0, ref.loss));
    EXPECT_TRUE(all_close(d, scaled(ref.dlogits, 2.0), 1e-6, 1e-5));

    Tensor in_place = logits.clone();
    const ops::CrossEntropyStats s2 =
        ops::cross_entropy_forward_backward(in_place, targets, 0.1f, 0, 2.f, in_place);
    EXPECT_EQ(s2.loss, s.loss);
    EXPECT_EQ(s2.correct, s.correct);
    for (int64_t i = 0; i < d.numel(); ++i) ASSERT_EQ(in_place.f32()[i], d.f32()[i]) << i;
  }
}

TEST_P(CrossEntropy, OutOfRangeTargetThrows) {
  Tensor logits({3, 5});
  EXPECT_NO_THROW(ops::cross_entropy_forward(logits, ids_tensor({0, 4, -100})));
  EXPECT_THROW(ops::cross_entropy_forward(logits, ids_tensor({0, 5, 1})), Error);
  EXPECT_THROW(ops::cross_entropy_forward(logits, ids_tensor({-1, 0, 1})), Error);
  EXPECT_THROW(ops::cross_entropy_forward(logits, ids_tensor({0, -100, 1}), 0.f, -1), Error)
      << "-100 is not the ignore index here";
  EXPECT_NO_THROW(ops::cross_entropy_forward(logits, ids_tensor({0, -1, 1}), 0.f, -1));
}

TEST_P(CrossEntropy, StableForLargeLogits) {
  std::mt19937 gen(704);
  Tensor logits = random_tensor({6, 9}, gen, -2.f, 2.f);
  for (int64_t i = 0; i < logits.numel(); ++i) logits.f32()[i] += (i / 9) % 2 ? 2000.f : -2000.f;
  Tensor targets = ids_tensor({1, 2, 3, 4, 5, 6});
  for (float eps : {0.f, 0.1f}) {
    const CeRef ref = naive_cross_entropy(logits, targets, eps, -100);
    const ops::CrossEntropyStats s = ops::cross_entropy_forward(logits, targets, eps);
    EXPECT_TRUE(std::isfinite(s.loss));
    EXPECT_NEAR(s.loss, ref.loss, 1e-4 * std::max(1.0, ref.loss)) << "eps " << eps;
    Tensor d({6, 9});
    ops::cross_entropy_backward(logits, targets, eps, -100, 1.f, d);
    EXPECT_TRUE(all_close(d, ref.dlogits, 1e-5, 1e-4)) << "eps " << eps;
  }
}

TEST_P(CrossEntropy, BackwardMatchesNaiveAndOverwrites) {
  std::mt19937 gen(705);
  for (int64_t C : {7, 1000})
    for (float eps : {0.f, 0.1f})
      for (float scale : {1.f, 2.5f}) {
        SCOPED_TRACE("C " + std::to_string(C) + " eps " + std::to_string(eps) + " scale " +
                     std::to_string(scale));
        const int64_t M = 13;
        Tensor logits = random_tensor({M, C}, gen, -4.f, 4.f);
        Tensor targets = make_targets(M, C, -100, gen);
        Tensor d = garbage_tensor({M, C});
        ops::cross_entropy_backward(logits, targets, eps, -100, scale, d);
        const CeRef ref = naive_cross_entropy(logits, targets, eps, -100);
        EXPECT_TRUE(all_close(d, scaled(ref.dlogits, scale), 1e-7, 1e-5));
        for (int64_t m = 3; m < M; m += 4)
          for (int64_t c = 0; c < C; ++c) ASSERT_EQ(d.f32()[m * C + c], 0.f) << "ignored row " << m;
      }
}

TEST_P(CrossEntropy, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(706);
  const int64_t M = 6, C = 5;
  for (float eps : {0.f, 0.1f}) {
    SCOPED_TRACE("eps " + std::to_string(eps));
    Tensor logits = random_tensor({M, C}, gen, -2.f, 2.f);
    Tensor targets = ids_tensor({1, 4, -100, 0, 2, 2});
    auto loss = [&] { return ops::cross_entropy_forward(logits, targets, eps).loss; };
    Tensor d({M, C});
    ops::cross_entropy_backward(logits, targets, eps, -100, 1.f, d);
    FdOptions opt;
    opt.atol = 2e-4;
    EXPECT_GRAD_OK(check_gradient("dlogits", logits, d, loss, opt));
    if (eps > 0) {
      // Forgetting the smoothing term in the gradient must fail the same check.
      std::vector<double> wrong = naive_cross_entropy(logits, targets, 0.0, -100).dlogits;
      EXPECT_FALSE(check_gradient("wrong", logits, wrong, loss, opt).ok());
    }
  }
}

TEST_P(CrossEntropy, LargeInputUsesParallelPath) {
  std::mt19937 gen(707);
  const int64_t M = 40, C = 1000;  // 40000 logits: above any serial threshold
  Tensor logits = random_tensor({M, C}, gen, -4.f, 4.f);
  Tensor targets = make_targets(M, C, -100, gen);
  for (int64_t m = 0; m < M; m += 5) logits.f32()[m * C + targets.i32()[m]] = 10.f;
  const CeRef ref = naive_cross_entropy(logits, targets, 0.1, -100);
  const ops::CrossEntropyStats s = ops::cross_entropy_forward(logits, targets, 0.1f);
  EXPECT_NEAR(s.loss, ref.loss, 1e-5 * ref.loss);
  EXPECT_EQ(s.count, ref.count);
  EXPECT_EQ(s.correct, ref.correct);
  Tensor d = garbage_tensor({M, C});
  ops::cross_entropy_backward(logits, targets, 0.1f, -100, 3.f, d);
  EXPECT_TRUE(all_close(d, scaled(ref.dlogits, 3.0), 1e-8, 1e-5));
}

TEST_P(CrossEntropy, ShapeOrDtypeMismatchThrows) {
  Tensor logits({4, 5}), targets = ids_tensor({0, 1, 2, 3}), d({4, 5});
  EXPECT_NO_THROW(ops::cross_entropy_forward(logits, targets));
  EXPECT_THROW(ops::cross_entropy_forward(logits, ids_tensor({0, 1, 2})), Error);
  Tensor targets_f32({4});
  EXPECT_THROW(ops::cross_entropy_forward(logits, targets_f32), Error);
  Tensor d_bad({4, 6});
  EXPECT_NO_THROW(ops::cross_entropy_backward(logits, targets, 0.f, -100, 1.f, d));
  EXPECT_THROW(ops::cross_entropy_backward(logits, targets, 0.f, -100, 1.f, d_bad), Error);
  EXPECT_THROW(ops::cross_entropy_backward(logits, ids_tensor({0, 1}), 0.f, -100, 1.f, d), Error);
}

// ---- L2 norm and gradient clipping
// -----------------------------------------------------------------

VITK_AT_EVERY_ISA_LEVEL(L2Norm);

TEST_P(L2Norm, MatchesDouble) {
  std::mt19937 gen(801);
  Tensor t = random_tensor({1001, 37}, gen);
  double s = 0;
  for (double v : to_double(t)) s += v * v;
  EXPECT_NEAR(ops::l2_norm(t), std::sqrt(s), 1e-9 * std::sqrt(s));
  EXPECT_EQ(ops::l2_norm(Tensor({5})), 0.0);
}

TEST_P(L2Norm, AccumulatesInDouble) {
  // One large value first, then a million ones: a float sum of squares stalls at 1e8 and loses
  // them (each 1 is below half an ulp of 1e8).
  const int64_t n = 1000001;
  Tensor t({n});
  t.fill(1.f);
  t.f32()[0] = 1e4f;
  const double want = std::sqrt(1e8 + static_cast<double>(n - 1));
  EXPECT_NEAR(ops::l2_norm(t), want, 1e-9 * want);
}

VITK_AT_EVERY_ISA_LEVEL(ClipGradNorm);

TEST_P(ClipGradNorm, ScalesByMaxOverNormPlusEpsWhenAbove) {
  std::mt19937 gen(802);
  // Small norms make the +1e-6 of torch.nn.utils.clip_grad_norm_ visible (a 1e-3 relative effect).
  for (double target : {5.0, 1e-3}) {
    SCOPED_TRACE("norm " + std::to_string(target));
    Tensor g = random_tensor({17, 23}, gen);
    const double raw = ops::l2_norm(g);
    for (int64_t i = 0; i < g.numel(); ++i) g.f32()[i] *= static_cast<float>(target / raw);
    const double norm = std::sqrt([&] {
      double s = 0;
      for (double v : to_double(g)) s += v * v;
      return s;
    }());
    const double max_norm = norm / 10;
    const std::vector<double> before = to_double(g);
    const double returned = ops::clip_grad_norm(g, max_norm);
    EXPECT_NEAR(returned, norm, 1e-9 * norm) << "returns the norm before clipping";
    EXPECT_TRUE(all_close(g, scaled(before, max_norm / (norm + 1e-6)), 0, 1e-6));
    EXPECT_NEAR(ops::l2_norm(g), max_norm * norm / (norm + 1e-6), 1e-6 * max_norm);
  }
}

TEST_P(ClipGradNorm, LeavesGradientsBelowMaxUntouched) {
  std::mt19937 gen(803);
  Tensor g = random_tensor({17, 23}, gen);
  const Tensor before = g.clone();
  const double norm = ops::l2_norm(g);
  EXPECT_NEAR(ops::clip_grad_norm(g, 2 * norm), norm, 1e-12 * norm);
  EXPECT_TRUE(bitwise_equal(g, before));
  Tensor large = random_tensor({300007}, gen);  // parallel path
  const Tensor large_before = large.clone();
  const double large_norm = ops::l2_norm(large);
  EXPECT_NEAR(ops::clip_grad_norm(large, large_norm * 1.5), large_norm, 1e-12 * large_norm);
  EXPECT_TRUE(bitwise_equal(large, large_before));
  EXPECT_NEAR(ops::clip_grad_norm(large, large_norm / 4), large_norm, 1e-12 * large_norm);
  EXPECT_TRUE(all_close(
      large, scaled(to_double(large_before), large_norm / 4 / (large_norm + 1e-6)), 0, 1e-6));
  Tensor zero({100});
  EXPECT_EQ(ops::clip_grad_norm(zero, 1.0), 0.0);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(zero.f32()[i], 0.f);
}

// ---- Soft targets (Mixup, CutMix and smoothing as distributions)
// ---------------------------------

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

VITK_AT_EVERY_ISA_LEVEL(SoftCrossEntropy);

TEST_P(SoftCrossEntropy, ForwardAndBackwardMatchNaive) {
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

TEST_P(SoftCrossEntropy, OneHotTargetsEqualHardCrossEntropy) {
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

TEST_P(SoftCrossEntropy, BackwardMatchesFiniteDifferences) {
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

TEST_P(SoftCrossEntropy, StableForLargeLogitsAndChecksShapes) {
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

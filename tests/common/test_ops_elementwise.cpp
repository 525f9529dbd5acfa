// Activations, random numbers, dropout, embeddings and residual adds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/ops.h"
#include "util/isa_levels.h"
#include "util/op_test_util.h"
#include "util/test_util.h"
#include "util/vitk_process.h"

using namespace vitk;
using namespace vitk::test;

namespace {

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
double gelu_grad_ref(double x, bool with_pdf_term = true) {
  const double cdf = 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  return cdf + (with_pdf_term ? x * pdf : 0.0);
}
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Values bounded away from 0, where relu has its kink.
Tensor away_from_zero(const Shape& shape, std::mt19937& gen) {
  Tensor t = random_tensor(shape, gen, 0.05f, 2.f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (sign(gen)) t.f32()[i] = -t.f32()[i];
  return t;
}

std::vector<double> map(const Tensor& t, double (*f)(double)) {
  std::vector<double> v = to_double(t);
  for (double& e : v) e = f(e);
  return v;
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

double kept_fraction(const Tensor& mask) {
  int64_t kept = 0;
  for (int64_t i = 0; i < mask.numel(); ++i) kept += mask.u8()[i];
  return static_cast<double>(kept) / static_cast<double>(mask.numel());
}

}  // namespace

// ---- Activations
// ---------------------------------------------------------------------------------

VITK_AT_EVERY_ISA_LEVEL(Activation);

TEST_P(Activation, ParseAndName) {
  EXPECT_EQ(ops::parse_activation("relu"), ops::Activation::relu);
  EXPECT_EQ(ops::parse_activation("gelu"), ops::Activation::gelu);
  EXPECT_STREQ(ops::activation_name(ops::Activation::relu), "relu");
  EXPECT_STREQ(ops::activation_name(ops::Activation::gelu), "gelu");
  EXPECT_THROW(ops::parse_activation("tanh"), UsageError);
  EXPECT_THROW(ops::parse_activation(""), UsageError);
}

VITK_AT_EVERY_ISA_LEVEL(Relu);

TEST_P(Relu, ForwardAndBackwardMatchNaive) {
  std::mt19937 gen(301);
  const Shape shape{7, 13, 5};
  Tensor x = away_from_zero(shape, gen), y = garbage_tensor(shape);
  ops::activation_forward(ops::Activation::relu, x, y);
  EXPECT_TRUE(all_close(y, map(x, [](double v) { return v > 0 ? v : 0.0; }), 0, 0));
  Tensor dy = random_tensor(shape, gen), dx = garbage_tensor(shape);
  ops::activation_backward(ops::Activation::relu, x, dy, dx);
  std::vector<double> want = to_double(dy);
  for (int64_t i = 0; i < x.numel(); ++i)
    if (x.f32()[i] <= 0) want[i] = 0;
  EXPECT_TRUE(all_close(dx, want, 0, 0)) << "dx = dy where x > 0";
  ops::activation_backward(ops::Activation::relu, x, dy, dy);
  EXPECT_TRUE(all_close(dy, want, 0, 0)) << "dx aliasing dy";
  Tensor x2 = x.clone();
  ops::activation_forward(ops::Activation::relu, x2, x2);
  EXPECT_TRUE(all_close(x2, y, 0, 0)) << "y aliasing x";
}

TEST_P(Relu, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(302);
  Tensor x = away_from_zero({5, 9}, gen), y({5, 9}), w = random_tensor({5, 9}, gen);
  auto loss = [&] {
    ops::activation_forward(ops::Activation::relu, x, y);
    return weighted_sum(y, w);
  };
  Tensor dx({5, 9});
  ops::activation_backward(ops::Activation::relu, x, w, dx);
  FdOptions opt;
  opt.atol = 1e-4;
  EXPECT_GRAD_OK(check_gradient("dx", x, dx, loss, opt));
}

VITK_AT_EVERY_ISA_LEVEL(Gelu);

TEST_P(Gelu, ForwardMatchesExactErfForm) {
  std::vector<float> v;
  for (int i = -1600; i <= 1600; ++i) v.push_back(static_cast<float>(i) * 0.005f);
  for (float e : {-30.f, -20.f, -10.f, -6.f, 6.f, 10.f, 20.f, 30.f, 1e-6f, -1e-6f}) v.push_back(e);
  std::mt19937 gen(303);
  std::normal_distribution<float> nd(0.f, 3.f);
  while (v.size() % 37 != 0) v.push_back(nd(gen));
  const Shape shape{static_cast<int64_t>(v.size() / 37), 37};
  Tensor x = from_vector(shape, v), y = garbage_tensor(shape);
  ops::activation_forward(ops::Activation::gelu, x, y);
  const std::vector<double> want = map(x, gelu_ref);
  EXPECT_TRUE(all_close(y, want, 1e-5, 1e-5));
  // The tanh approximation is off by up to ~5e-4: the tolerance above tells the two apart.
  Tensor approx = from_vector(shape, std::vector<float>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) approx.f32()[i] = static_cast<float>(gelu_tanh(v[i]));
  EXPECT_FALSE(all_close(approx, want, 1e-5, 1e-5)) << "tolerance too loose to catch tanh form";
  ops::activation_forward(ops::Activation::gelu, x, x);
  EXPECT_TRUE(all_close(x, want, 1e-5, 1e-5)) << "y aliasing x";
}

TEST_P(Gelu, BackwardMatchesNaive) {
  std::mt19937 gen(304);
  const Shape shape{11, 29};
  Tensor x = random_tensor(shape, gen, -6.f, 6.f), dy = random_tensor(shape, gen);
  Tensor dx = garbage_tensor(shape);
  ops::activation_backward(ops::Activation::gelu, x, dy, dx);
  std::vector<double> want = to_double(dy), xd = to_double(x);
  for (size_t i = 0; i < want.size(); ++i) want[i] *= gelu_grad_ref(xd[i]);
  EXPECT_TRUE(all_close(dx, want, 1e-5, 1e-5));
  ops::activation_backward(ops::Activation::gelu, x, dy, dy);
  EXPECT_TRUE(all_close(dy, want, 1e-5, 1e-5)) << "dx aliasing dy";
}

TEST_P(Gelu, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(305);
  Tensor x = random_tensor({6, 7}, gen, -4.f, 4.f), y({6, 7}), w = random_tensor({6, 7}, gen);
  auto loss = [&] {
    ops::activation_forward(ops::Activation::gelu, x, y);
    return weighted_sum(y, w);
  };
  Tensor dx({6, 7});
  ops::activation_backward(ops::Activation::gelu, x, w, dx);
  FdOptions opt;
  opt.atol = 1e-3;
  EXPECT_GRAD_OK(check_gradient("dx", x, dx, loss, opt));
  // Without the x·φ(x) term the same check must fail.
  std::vector<double> wrong = to_double(w), xd = to_double(x);
  for (size_t i = 0; i < wrong.size(); ++i) wrong[i] *= gelu_grad_ref(xd[i], false);
  EXPECT_FALSE(check_gradient("wrong", x, wrong, loss, opt).ok());
}

// A bf16 output holds the f32 result rounded to nearest even, element for element (the fused
// rounding a bf16 product's input gets), over a range that includes GELU's tails, zeros and a
// size that runs in parallel; a bf16 output of another shape, or a bf16 input, is refused.
TEST_P(Activation, Bf16OutputIsTheRoundedF32Output) {
  std::mt19937 gen(17);
  Tensor x = random_tensor({300, 257}, gen, -9.f, 9.f);
  x.f32()[0] = 0.f;
  x.f32()[1] = -0.f;
  for (ops::Activation a : {ops::Activation::relu, ops::Activation::gelu}) {
    SCOPED_TRACE(ops::activation_name(a));
    Tensor y({300, 257}), yb({300, 257}, DType::bf16), want({300, 257}, DType::bf16);
    ops::activation_forward(a, x, y);
    ops::activation_forward(a, x, yb);
    ops::round_to_bf16(y, want);
    EXPECT_TRUE(bitwise_equal(yb, want));
    Tensor bad({300, 256}, DType::bf16);
    EXPECT_THROW(ops::activation_forward(a, x, bad), Error);
    EXPECT_THROW(ops::activation_forward(a, want, yb), Error);
  }
}

// The fused backward for a bf16 product with a bias: bitwise the gradient of activation_backward
// rounded, and bitwise the bias gradient linear_backward_weights sums from the f32 gradient (the
// same blocks in the same order), added to what dsum held; for a matrix summed in parallel blocks
// and a small one summed serially.
TEST_P(Activation, RoundedBackwardIsTheF32BackwardRoundedAndSummed) {
  std::mt19937 gen(18);
  for (const Shape& shape : {Shape{300, 257}, Shape{5, 7}}) {
    const Tensor x = random_tensor(shape, gen, -6.f, 6.f), dy = random_tensor(shape, gen);
    const Tensor start = random_tensor({shape[1]}, gen);
    for (ops::Activation a : {ops::Activation::relu, ops::Activation::gelu}) {
      SCOPED_TRACE(std::string(ops::activation_name(a)) + " " + shape_str(shape));
      Tensor g(shape), want(shape, DType::bf16), want_sum = start.clone(), no_dw;
      ops::activation_backward(a, x, dy, g);
      ops::round_to_bf16(g, want);
      ops::linear_backward_weights(g, g, no_dw, want_sum);
      Tensor got(shape, DType::bf16), sum = start.clone();
      ops::activation_backward_rounded(a, x, dy, got, sum);
      EXPECT_TRUE(bitwise_equal(got, want));
      EXPECT_TRUE(bitwise_equal(sum, want_sum));
      Tensor f32_out(shape), short_sum({shape[1] - 1});
      EXPECT_THROW(ops::activation_backward_rounded(a, x, dy, f32_out, sum), Error);
      EXPECT_THROW(ops::activation_backward_rounded(a, x, dy, got, short_sum), Error);

      // With the transpose written too (dx_t, poisoned first): the same dx and sums, and dx_t
      // is dx's transpose.
      Tensor got2(shape, DType::bf16), got_t({shape[1], shape[0]}, DType::bf16);
      std::fill(got_t.bf16(), got_t.bf16() + got_t.numel(), uint16_t{0xFFFF});
      Tensor sum2 = start.clone();
      ops::activation_backward_rounded(a, x, dy, got2, sum2, got_t);
      EXPECT_TRUE(bitwise_equal(got2, want));
      EXPECT_TRUE(bitwise_equal(sum2, want_sum));
      EXPECT_TRUE(bitwise_equal(got_t, naive_transpose_bf16(want)));
      Tensor not_transposed(shape, DType::bf16), f32_t({shape[1], shape[0]});
      EXPECT_THROW(ops::activation_backward_rounded(a, x, dy, got2, sum2, not_transposed), Error);
      EXPECT_THROW(ops::activation_backward_rounded(a, x, dy, got2, sum2, f32_t), Error);
    }
  }
}

TEST_P(Activation, ShapeMismatchThrows) {
  Tensor x({4, 6}), y({4, 6}), bad({4, 5});
  for (ops::Activation a : {ops::Activation::relu, ops::Activation::gelu}) {
    EXPECT_NO_THROW(ops::activation_forward(a, x, y));
    EXPECT_THROW(ops::activation_forward(a, x, bad), Error);
    EXPECT_THROW(ops::activation_backward(a, x, y, bad), Error);
    EXPECT_THROW(ops::activation_backward(a, x, bad, y), Error);
  }
}

// ---- Rng
// -------------------------------------------------------------------------------------------

TEST(Rng, ReserveReturnsFirstCounterAndAdvances) {
  ops::Rng r(5);
  EXPECT_EQ(r.seed(), 5u);
  EXPECT_EQ(r.counter(), 0u);
  EXPECT_EQ(r.reserve(10), 0u);
  EXPECT_EQ(r.counter(), 10u);
  EXPECT_EQ(r.reserve(3), 10u);
  EXPECT_EQ(r.counter(), 13u);
  EXPECT_EQ(r.seed(), 5u);
}

TEST(Rng, NextU64IsHashOfSeedAndCounter) {
  ops::Rng r;
  r.set_state(7, 100);
  EXPECT_EQ(r.next_u64(), ops::Rng::hash(7, 100));
  EXPECT_EQ(r.counter(), 101u);
  EXPECT_EQ(r.next_u64(), ops::Rng::hash(7, 101));
  const float u = r.uniform();
  EXPECT_EQ(u, ops::Rng::to_uniform(ops::Rng::hash(7, 102)));
}

TEST(Rng, SetStateReproducesDraws) {
  auto draw = [](ops::Rng& r) {
    std::vector<double> v;
    for (int i = 0; i < 50; ++i) {
      v.push_back(static_cast<double>(r.next_u64() >> 11));
      v.push_back(r.uniform());
      v.push_back(r.normal());
    }
    return v;
  };
  ops::Rng a(123);
  for (int i = 0; i < 7; ++i) a.normal();
  const uint64_t seed = a.seed(), counter = a.counter();
  const std::vector<double> first = draw(a);
  ops::Rng b(999);
  b.set_state(seed, counter);
  EXPECT_EQ(draw(b), first);
  EXPECT_EQ(a.counter(), b.counter());
  ops::Rng c(123), d(124);
  for (int i = 0; i < 7; ++i) c.normal(), d.normal();
  EXPECT_EQ(draw(c), first) << "same seed, same stream";
  EXPECT_NE(draw(d), first) << "another seed, another stream";
}

TEST(Rng, UniformAndNormalHaveRightMoments) {
  ops::Rng r(2024);
  const int n = 200000;
  double su = 0, su2 = 0, sn = 0, sn2 = 0;
  int tails = 0;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u, su2 += u * u;
    const double z = r.normal();
    ASSERT_TRUE(std::isfinite(z));
    sn += z, sn2 += z * z;
    tails += std::fabs(z) > 1.959964;
  }
  const double mu = su / n, vu = su2 / n - mu * mu, mn = sn / n, vn = sn2 / n - mn * mn;
  EXPECT_NEAR(mu, 0.5, 3.5e-3);
  EXPECT_NEAR(vu, 1.0 / 12, 2e-3);
  EXPECT_NEAR(mn, 0.0, 1.2e-2);
  EXPECT_NEAR(vn, 1.0, 2e-2);
  EXPECT_NEAR(static_cast<double>(tails) / n, 0.05, 3e-3) << "two-sided 5% tails";
  EXPECT_EQ(ops::Rng::to_uniform(0), 0.f);
  EXPECT_EQ(ops::Rng::to_uniform(~0ull), 1.f - 0x1p-24f);
}

TEST(Rng, HashBitsAreBalanced) {
  std::vector<int> ones(64, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const uint64_t h = ops::Rng::hash(3, static_cast<uint64_t>(i));
    for (int b = 0; b < 64; ++b) ones[b] += (h >> b) & 1;
  }
  for (int b = 0; b < 64; ++b)
    EXPECT_NEAR(ones[b] / static_cast<double>(n), 0.5, 0.02) << "bit " << b;
  EXPECT_NE(ops::Rng::hash(1, 0), ops::Rng::hash(2, 0));
  EXPECT_NE(ops::Rng::hash(1, 0), ops::Rng::hash(1, 1));
}

TEST(Rng, AdjacentSeedsAreNotShiftedStreams) {
  // hash(seed + counter) would make seed s+1 replay seed s one step later.
  int collisions = 0;
  for (uint64_t s = 0; s < 8; ++s)
    for (uint64_t c = 0; c < 64; ++c)
      collisions += ops::Rng::hash(s, c + 1) == ops::Rng::hash(s + 1, c);
  EXPECT_EQ(collisions, 0);
}

// ---- Dropout
// ---------------------------------------------------------------------------------------

TEST(Dropout, ZeroProbabilityIsIdentity) {
  std::mt19937 gen(401);
  Tensor x = random_tensor({37, 29}, gen), y = garbage_tensor({37, 29}), mask({37, 29}, DType::u8);
  for (int64_t i = 0; i < mask.numel(); ++i) mask.u8()[i] = 7;
  ops::Rng rng(1);
  ops::dropout_forward(x, 0.f, rng, y, mask);
  EXPECT_TRUE(bitwise_equal(y, x));
  for (int64_t i = 0; i < mask.numel(); ++i) ASSERT_EQ(mask.u8()[i], 1) << i;
  Tensor x2 = x.clone();
  ops::dropout_forward(x2, 0.f, rng, x2, mask);
  EXPECT_TRUE(bitwise_equal(x2, x)) << "in place";
}

TEST(Dropout, KeepsAboutOneMinusPAndScalesBy1OverOneMinusP) {
  std::mt19937 gen(402);
  const int64_t n = 100003;
  Tensor x = random_tensor({n}, gen, 0.5f, 2.f);  // never zero, so y tells kept from dropped
  for (float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    SCOPED_TRACE("p " + std::to_string(p));
    ops::Rng rng(77);
    Tensor y = garbage_tensor({n}), mask({n}, DType::u8);
    ops::dropout_forward(x, p, rng, y, mask);
    std::vector<double> want(static_cast<size_t>(n));
    int64_t not_binary = 0;
    for (int64_t i = 0; i < n; ++i) {
      not_binary += mask.u8()[i] > 1;
      want[i] = mask.u8()[i] ? x.f32()[i] / (1.0 - p) : 0.0;
    }
    EXPECT_EQ(not_binary, 0) << "mask holds 0 or 1";
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(kept_fraction(mask), 1 - p, 5 * sigma);
    EXPECT_TRUE(all_close(y, want, 0, 1e-6));
  }
}

TEST(Dropout, MaskBitsLookIndependent) {
  ops::Rng rng(5);
  const int64_t n = 100000;
  Tensor x({n}), y({n}), mask({n}, DType::u8);
  x.fill(1.f);
  ops::dropout_forward(x, 0.5f, rng, y, mask);
  for (int64_t lag : {1, 2, 8, 64}) {
    int64_t same = 0;
    for (int64_t i = 0; i + lag < n; ++i) same += mask.u8()[i] == mask.u8()[i + lag];
    EXPECT_NEAR(same / static_cast<double>(n - lag), 0.5, 5 * 0.5 / std::sqrt(n)) << "lag " << lag;
  }
}

TEST(Dropout, SameSeedAndStateGiveSameMask) {
  std::mt19937 gen(403);
  const Shape shape{64, 129};
  Tensor x = random_tensor(shape, gen);
  auto run = [&](ops::Rng& rng) {
    Tensor y(shape), mask(shape, DType::u8);
    ops::dropout_forward(x, 0.25f, rng, y, mask);
    return std::make_pair(y, mask);
  };
  ops::Rng a(42), b(42), c(43);
  auto [ya, ma] = run(a);
  auto [yb, mb] = run(b);
  EXPECT_TRUE(bitwise_equal(ma, mb));
  EXPECT_TRUE(bitwise_equal(ya, yb));
  EXPECT_GT(a.counter(), 0u) << "dropout must consume counters";
  EXPECT_EQ(a.counter(), b.counter());
  auto [yc, mc] = run(c);
  EXPECT_FALSE(bitwise_equal(ma, mc)) << "another seed";
  auto [ya2, ma2] = run(a);
  EXPECT_FALSE(bitwise_equal(ma, ma2)) << "the next call draws fresh counters";
  ops::Rng d(0);
  d.set_state(42, 0);
  auto [yd, md] = run(d);
  EXPECT_TRUE(bitwise_equal(ma, md)) << "set_state replays";
  // In place gives the same values.
  ops::Rng e(42);
  Tensor x2 = x.clone(), me(shape, DType::u8);
  ops::dropout_forward(x2, 0.25f, e, x2, me);
  EXPECT_TRUE(bitwise_equal(me, ma));
  EXPECT_TRUE(bitwise_equal(x2, ya));
}

TEST(Dropout, BackwardAppliesMaskAndScale) {
  std::mt19937 gen(404);
  const Shape shape{13, 31};
  const float p = 0.3f;
  Tensor x = random_tensor(shape, gen), y(shape), mask(shape, DType::u8);
  ops::Rng rng(9);
  ops::dropout_forward(x, p, rng, y, mask);
  Tensor dy = random_tensor(shape, gen), dx = garbage_tensor(shape);
  ops::dropout_backward(dy, mask, p, dx);
  std::vector<double> want = to_double(dy);
  for (int64_t i = 0; i < dy.numel(); ++i) want[i] = mask.u8()[i] ? want[i] / (1.0 - p) : 0.0;
  EXPECT_TRUE(all_close(dx, want, 0, 1e-6));
  ops::dropout_backward(dy, mask, p, dy);
  EXPECT_TRUE(all_close(dy, want, 0, 1e-6)) << "dx aliasing dy";
  // The backward is the forward's Jacobian: with the mask fixed, y = J x and dx = Jᵀ dy agree.
  Tensor ones(shape), dx1(shape);
  ones.fill(1.f);
  ops::dropout_backward(ones, mask, p, dx1);
  std::vector<double> jx = to_double(dx1), xd = to_double(x);
  for (size_t i = 0; i < jx.size(); ++i) jx[i] *= xd[i];
  EXPECT_TRUE(all_close(y, jx, 1e-7, 1e-6));
}

TEST(Dropout, ShapeMismatchThrows) {
  Tensor x({4, 6}), y({4, 6}), mask({4, 6}, DType::u8);
  ops::Rng rng(1);
  EXPECT_NO_THROW(ops::dropout_forward(x, 0.5f, rng, y, mask));
  Tensor y_bad({4, 5}), mask_bad({4, 5}, DType::u8), mask_f32({4, 6});
  EXPECT_THROW(ops::dropout_forward(x, 0.5f, rng, y_bad, mask), Error);
  EXPECT_THROW(ops::dropout_forward(x, 0.5f, rng, y, mask_bad), Error);
  EXPECT_THROW(ops::dropout_forward(x, 0.5f, rng, y, mask_f32), Error);
  EXPECT_THROW(ops::dropout_backward(x, mask_bad, 0.5f, y), Error);
  EXPECT_THROW(ops::dropout_backward(x, mask, 0.5f, y_bad), Error);
}

// The thread count can be set only before the first op, so this test runs itself twice in fresh
// processes with 1 and 2 threads and compares what they draw.
TEST(Dropout, MaskIndependentOfThreadCount) {
  const char* kEnv = "VITK_OPS_TEST_CHILD_THREADS";
  if (const char* env = std::getenv(kEnv)) {
    const int n = std::atoi(env);
    ops::set_num_threads(n);
    ASSERT_EQ(ops::num_threads(), n);
    const int64_t numel = 100003;
    Tensor x({numel}), y({numel}), mask({numel}, DType::u8);
    for (int64_t i = 0; i < numel; ++i) x.f32()[i] = static_cast<float>(i % 97) - 48.f;
    ops::Rng rng(31337);
    uint64_t h = 0;
    for (int call = 0; call < 3; ++call) {
      ops::dropout_forward(x, 0.3f, rng, y, mask);
      h = fnv1a(mask.data(), mask.nbytes(), h ? h : 1469598103934665603ull);
      h = fnv1a(y.data(), y.nbytes(), h);
    }
    std::printf("VITK_CHILD threads=%d counter=%llu digest=%016llx\n", ops::num_threads(),
                static_cast<unsigned long long>(rng.counter()), static_cast<unsigned long long>(h));
    return;
  }
  const vitk::test::TempDir dir("vitk_dropout_child");
  auto child = [&](int threads) {
    vitk::testing::Command c;
    c.argv = {vitk::testing::self_executable(),
              "--gtest_filter=Dropout.MaskIndependentOfThreadCount"};
    c.dir = dir.path();
    c.tag = "threads" + std::to_string(threads);
    c.env = {{kEnv, std::to_string(threads)}};
    const vitk::testing::ProcessResult r = vitk::testing::run_process(c);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    const size_t at = r.out.find("VITK_CHILD ");
    if (at == std::string::npos) {
      ADD_FAILURE() << "child printed no digest:\n" << r.out << r.err;
      return std::string();
    }
    return r.out.substr(at, r.out.find('\n', at) - at);
  };
  const std::string one = child(1), two = child(2);
  EXPECT_NE(one.find("threads=1 "), std::string::npos) << one;
  EXPECT_NE(two.find("threads=2 "), std::string::npos) << two;
  EXPECT_EQ(one.substr(one.find("counter=")), two.substr(two.find("counter=")));
}

// ---- Embedding
// ------------------------------------------------------------------------------------

TEST(Embedding, ForwardGathersRowsAndScales) {
  std::mt19937 gen(501);
  const int64_t V = 11, D = 7;
  Tensor table = random_tensor({V, D}, gen);
  Tensor ids = ids_tensor({3, 0, 10, 3, 5, 9});
  for (float scale : {1.f, 2.5f}) {
    Tensor y = garbage_tensor({6, D});
    ops::embedding_forward(ids, table, y, scale);
    std::vector<double> want;
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t d = 0; d < D; ++d) want.push_back(scale * table.f32()[ids.i32()[i] * D + d]);
    EXPECT_TRUE(all_close(y, want, 0, 1e-7)) << "scale " << scale;
  }
}

TEST(Embedding, OutOfRangeIdThrowsNamingTheId) {
  Tensor table({11, 7}), y({3, 7});
  for (int32_t bad : {-1, 11, 37}) {
    Tensor ids = ids_tensor({1, bad, 2});
    try {
      ops::embedding_forward(ids, table, y);
      ADD_FAILURE() << "id " << bad << " did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

TEST(Embedding, BackwardScatterAddsRepeatedIdsAndAccumulates) {
  std::mt19937 gen(502);
  const int64_t V = 6, D = 5;
  Tensor ids = ids_tensor({2, 5, 2, 2, 0, 5, 1});
  Tensor dy = random_tensor({7, D}, gen);
  Tensor dtable = random_tensor({V, D}, gen);
  const std::vector<double> t0 = to_double(dtable);
  const float scale = 0.5f;
  std::vector<double> g(static_cast<size_t>(V * D), 0.0);
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t d = 0; d < D; ++d) g[ids.i32()[i] * D + d] += scale * dy.f32()[i * D + d];
  for (int call = 1; call <= 2; ++call) {
    ops::embedding_backward(ids, dy, dtable, scale);
    std::vector<double> want = t0;
    for (size_t i = 0; i < want.size(); ++i) want[i] += call * g[i];
    EXPECT_TRUE(all_close(dtable, want, 1e-6, 1e-6)) << "after " << call << " calls";
  }
  for (int64_t d = 0; d < D; ++d)  // id 3 and 4 never occur
    EXPECT_EQ(dtable.f32()[3 * D + d], static_cast<float>(t0[3 * D + d]));
}

TEST(Embedding, BackwardIsDeterministicWithManyRepeats) {
  std::mt19937 gen(503);
  const int64_t M = 5000, V = 3, D = 16;
  std::vector<int32_t> v(M);
  for (auto& e : v) e = static_cast<int32_t>(gen() % V);
  Tensor ids = ids_tensor(v), dy = random_tensor({M, D}, gen);
  Tensor t1({V, D}), t2({V, D});
  ops::embedding_backward(ids, dy, t1);
  ops::embedding_backward(ids, dy, t2);
  EXPECT_TRUE(bitwise_equal(t1, t2));
  std::vector<double> want(static_cast<size_t>(V * D), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t d = 0; d < D; ++d) want[v[i] * D + d] += dy.f32()[i * D + d];
  EXPECT_TRUE(all_close(t1, want, 1e-4, 1e-5));
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(504);
  const int64_t V = 5, D = 4;
  Tensor table = random_tensor({V, D}, gen), ids = ids_tensor({4, 1, 4, 0});
  Tensor y({4, D}), w = random_tensor({4, D}, gen);
  auto loss = [&] {
    ops::embedding_forward(ids, table, y, 1.5f);
    return weighted_sum(y, w);
  };
  Tensor dtable({V, D});
  ops::embedding_backward(ids, w, dtable, 1.5f);
  FdOptions opt;
  opt.atol = 1e-4;
  EXPECT_GRAD_OK(check_gradient("dtable", table, dtable, loss, opt));
}

TEST(Embedding, LargeInputUsesParallelPath) {
  std::mt19937 gen(505);
  const int64_t M = 600, V = 50, D = 200;  // M·D above any serial threshold, D over several blocks
  std::vector<int32_t> v(M);
  for (auto& e : v) e = static_cast<int32_t>(gen() % V);
  Tensor ids = ids_tensor(v), table = random_tensor({V, D}, gen), y = garbage_tensor({M, D});
  ops::embedding_forward(ids, table, y, 0.5f);
  std::vector<double> want;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t d = 0; d < D; ++d) want.push_back(0.5 * table.f32()[v[i] * D + d]);
  EXPECT_TRUE(all_close(y, want, 0, 1e-7)) << "forward";
  Tensor dy = random_tensor({M, D}, gen), t1({V, D}), t2({V, D});
  ops::embedding_backward(ids, dy, t1, 2.f);
  ops::embedding_backward(ids, dy, t2, 2.f);
  EXPECT_TRUE(bitwise_equal(t1, t2));
  std::vector<double> g(static_cast<size_t>(V * D), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t d = 0; d < D; ++d) g[v[i] * D + d] += 2.0 * dy.f32()[i * D + d];
  EXPECT_TRUE(all_close(t1, g, 1e-5, 1e-5)) << "backward";
}

TEST(Embedding, ShapeOrDtypeMismatchThrows) {
  Tensor table({11, 7}), ids = ids_tensor({1, 2, 3}), y({3, 7});
  EXPECT_NO_THROW(ops::embedding_forward(ids, table, y));
  Tensor y_bad({3, 6}), y_rows({4, 7}), ids_f32({3});
  EXPECT_THROW(ops::embedding_forward(ids, table, y_bad), Error);
  EXPECT_THROW(ops::embedding_forward(ids, table, y_rows), Error);
  EXPECT_THROW(ops::embedding_forward(ids_f32, table, y), Error);
  Tensor dtable({11, 7}), dtable_bad({11, 6});
  EXPECT_NO_THROW(ops::embedding_backward(ids, y, dtable));
  EXPECT_THROW(ops::embedding_backward(ids, y, dtable_bad), Error);
  EXPECT_THROW(ops::embedding_backward(ids, y_rows, dtable), Error);
}

// ---- Residual add and accumulate
// ----------------------------------------------------------------------

VITK_AT_EVERY_ISA_LEVEL(Add);

TEST_P(Add, MatchesNaiveAndAllowsAliasing) {
  std::mt19937 gen(601);
  const Shape shape{3, 5, 7};
  Tensor a = random_tensor(shape, gen), b = random_tensor(shape, gen), y = garbage_tensor(shape);
  std::vector<double> want = to_double(a), bd = to_double(b);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bd[i];
  ops::add(a, b, y);
  EXPECT_TRUE(all_close(y, want, 0, 1.2e-7));
  Tensor a2 = a.clone(), b2 = b.clone();
  ops::add(a2, b, a2);
  EXPECT_TRUE(bitwise_equal(a2, y)) << "y is a";
  ops::add(a, b2, b2);
  EXPECT_TRUE(bitwise_equal(b2, y)) << "y is b";
}

VITK_AT_EVERY_ISA_LEVEL(Accumulate);

TEST_P(Accumulate, AddsScaledInput) {
  std::mt19937 gen(602);
  const Shape shape{9, 13};
  Tensor y = random_tensor(shape, gen), x = random_tensor(shape, gen);
  const std::vector<double> y0 = to_double(y), xd = to_double(x);
  ops::accumulate(y, x);
  std::vector<double> want(y0.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = y0[i] + xd[i];
  EXPECT_TRUE(all_close(y, want, 1e-7, 1.2e-7)) << "alpha 1";
  ops::accumulate(y, x, -0.5f);
  for (size_t i = 0; i < want.size(); ++i) want[i] -= 0.5 * xd[i];
  EXPECT_TRUE(all_close(y, want, 1e-7, 3e-7)) << "alpha -0.5";
}

TEST_P(Add, SizeOrDtypeMismatchThrows) {
  Tensor a({4, 6}), b({4, 6}), y({4, 6}), bad({4, 5});
  EXPECT_NO_THROW(ops::add(a, b, y));
  EXPECT_THROW(ops::add(a, bad, y), Error);
  EXPECT_THROW(ops::add(a, b, bad), Error);
  EXPECT_THROW(ops::accumulate(y, bad), Error);
  Tensor i32({4, 6}, DType::i32);
  EXPECT_THROW(ops::add(a, i32, y), Error);
}

TEST_P(Add, LargeInputUsesParallelPath) {
  std::mt19937 gen(603);
  const Shape shape{100003};
  Tensor a = random_tensor(shape, gen), b = random_tensor(shape, gen), y = garbage_tensor(shape);
  std::vector<double> want = to_double(a), bd = to_double(b);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bd[i];
  ops::add(a, b, y);
  EXPECT_TRUE(all_close(y, want, 0, 1.2e-7));
  ops::accumulate(y, b, -1.f);
  EXPECT_TRUE(all_close(y, a, 1e-7, 1.2e-7));
}

// ops.h: "a wrong shape or dtype throws vitk::Error naming the op and both shapes". An output with
// the right number of elements but another shape is still the wrong shape.
TEST(ElementwiseOps, SameSizeButDifferentShapeThrows) {
  Tensor a({4, 6}), b({4, 6}), y({4, 6}), transposed({6, 4}), mask({4, 6}, DType::u8);
  EXPECT_THROW(ops::add(a, b, transposed), Error) << "add: y [6, 4] for a [4, 6]";
  EXPECT_THROW(ops::add(a, transposed, y), Error) << "add: b [6, 4] for a [4, 6]";
  EXPECT_THROW(ops::accumulate(transposed, a), Error) << "accumulate: y [6, 4] += x [4, 6]";
  EXPECT_THROW(ops::activation_forward(ops::Activation::gelu, a, transposed), Error)
      << "activation_forward: y [6, 4] for x [4, 6]";
  EXPECT_THROW(ops::activation_backward(ops::Activation::gelu, a, b, transposed), Error)
      << "activation_backward: dx [6, 4] for x [4, 6]";
  ops::Rng rng(1);
  EXPECT_THROW(ops::dropout_forward(a, 0.5f, rng, transposed, mask), Error)
      << "dropout_forward: y [6, 4] for x [4, 6]";
  EXPECT_THROW(ops::dropout_backward(a, mask, 0.5f, transposed), Error)
      << "dropout_backward: dx [6, 4] for dy [4, 6]";
}

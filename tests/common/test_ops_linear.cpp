// ops::linear_* in each precision of the products (f32, bf16 with f32 accumulation) against naive
// double loops (util/matmul_reference.h) and finite differences, and the packed weights the bf16
// products read (ops::WeightCache). bf16 cases are skipped on CPUs without AVX512_BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "common/optim/optim.h"
#include "common/params.h"
#include "util/matmul_reference.h"
#include "util/op_test_util.h"
#include "util/test_util.h"

using namespace vitk;
using namespace vitk::test;

namespace {

constexpr ops::Precision kBf16 = ops::Precision::bf16;

struct Mkn {
  int64_t m, k, n;
};

// Small odd shapes, shapes that pad oneDNN's 16×64 weight blocks, ViT-sized ones that run the
// blocked kernels on both threads, and square weights (K = N), whose forward (wᵀ) and
// backward-data (w) forms share dims and layout but not contents.
const std::vector<Mkn> kShapes = {{1, 1, 1},      {3, 5, 7},       {17, 33, 65}, {64, 96, 130},
                                  {197, 768, 96}, {300, 200, 256}, {33, 64, 64}, {197, 192, 192}};

std::string shape_case_name(const Mkn& s) {
  return "m" + std::to_string(s.m) + "k" + std::to_string(s.k) + "n" + std::to_string(s.n);
}

}  // namespace

// ---- Linear ------------------------------------------------------------------------------------

TEST(Linear, ForwardMatchesNaive) {
  std::mt19937 gen(1);
  struct Case {
    int64_t M, K, N;
  };
  for (Case c : {Case{7, 13, 5}, Case{1, 1, 1}, Case{16, 16, 16}, Case{33, 17, 3}, Case{2, 64, 31}})
    for (bool bias : {false, true}) {
      SCOPED_TRACE("M " + std::to_string(c.M) + " K " + std::to_string(c.K) + " N " +
                   std::to_string(c.N) + " bias " + std::to_string(bias));
      Tensor x = random_tensor({c.M, c.K}, gen), w = random_tensor({c.N, c.K}, gen);
      Tensor b = bias ? random_tensor({c.N}, gen) : Tensor();
      Tensor y = garbage_tensor({c.M, c.N});
      ops::linear_forward(x, w, b, y);
      const double tol = product_tol(c.K);
      EXPECT_TRUE(all_close(y, naive_linear(x, w, b), tol, tol));
    }
}

TEST(Linear, ForwardFlattensLeadingAxes) {
  std::mt19937 gen(2);
  Tensor x = random_tensor({2, 3, 13}, gen), w = random_tensor({5, 13}, gen);
  Tensor b = random_tensor({5}, gen);
  Tensor y({2, 3, 5});
  ops::linear_forward(x, w, b, y);
  EXPECT_TRUE(all_close(y, naive_linear(x, w, b), product_tol(13), product_tol(13)));
}

TEST(Linear, ForwardLargeShapeUsesBlockedPath) {
  std::mt19937 gen(3);
  const int64_t M = 300, K = 257, N = 129;
  Tensor x = random_tensor({M, K}, gen), w = random_tensor({N, K}, gen),
         b = random_tensor({N}, gen);
  Tensor y({M, N});
  ops::linear_forward(x, w, b, y);
  EXPECT_TRUE(all_close(y, naive_linear(x, w, b), product_tol(K), product_tol(K)));
}

TEST(Linear, BackwardDataMatchesNaiveAndOverwrites) {
  std::mt19937 gen(4);
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{7, 13, 5}, {300, 257, 129}}) {
    SCOPED_TRACE("M " + std::to_string(M));
    Tensor w = random_tensor({N, K}, gen), dy = random_tensor({M, N}, gen);
    Tensor dx = garbage_tensor({M, K});
    ops::linear_backward_data(dy, w, dx);
    EXPECT_TRUE(all_close(dx, naive_linear_dx(dy, w), product_tol(N), product_tol(N)));
  }
}

TEST(Linear, BackwardWeightsMatchesNaiveAndAccumulates) {
  std::mt19937 gen(5);
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{7, 13, 5}, {300, 257, 129}}) {
    SCOPED_TRACE("M " + std::to_string(M));
    Tensor x = random_tensor({M, K}, gen), dy = random_tensor({M, N}, gen);
    Tensor dw = random_tensor({N, K}, gen), db = random_tensor({N}, gen);
    const std::vector<double> dw0 = to_double(dw), db0 = to_double(db);
    std::vector<double> gw, gb;
    naive_linear_dw(x, dy, gw, gb);
    const double tol = product_tol(M);
    ops::linear_backward_weights(x, dy, dw, db);
    EXPECT_TRUE(all_close(dw, plus(dw0, gw), tol, tol)) << "dw after one call";
    EXPECT_TRUE(all_close(db, plus(db0, gb), tol, tol)) << "db after one call";
    ops::linear_backward_weights(x, dy, dw, db);
    EXPECT_TRUE(all_close(dw, plus(dw0, gw, 2), tol, tol)) << "dw after two calls";
    EXPECT_TRUE(all_close(db, plus(db0, gb, 2), tol, tol)) << "db after two calls";
  }
}

TEST(Linear, BackwardWeightsWithoutBiasGradient) {
  std::mt19937 gen(6);
  Tensor x = random_tensor({2, 4, 13}, gen), dy = random_tensor({2, 4, 5}, gen);
  Tensor dw({5, 13}), db;
  std::vector<double> gw, gb;
  naive_linear_dw(x, dy, gw, gb);
  ops::linear_backward_weights(x, dy, dw, db);
  EXPECT_TRUE(all_close(dw, gw, product_tol(8), product_tol(8)));
}

TEST(Linear, CombinedBackwardMatchesNaiveAndSkipsEmptyOutputs) {
  std::mt19937 gen(7);
  const int64_t M = 7, K = 13, N = 5;
  Tensor x = random_tensor({M, K}, gen), w = random_tensor({N, K}, gen),
         dy = random_tensor({M, N}, gen);
  std::vector<double> gw, gb;
  naive_linear_dw(x, dy, gw, gb);
  const std::vector<double> gx = naive_linear_dx(dy, w);
  const double tol = product_tol(M);
  for (int which = 0; which < 8; ++which) {
    const bool want_dx = which & 1, want_dw = which & 2, want_db = which & 4;
    SCOPED_TRACE("dx " + std::to_string(want_dx) + " dw " + std::to_string(want_dw) + " db " +
                 std::to_string(want_db));
    Tensor dx = want_dx ? garbage_tensor({M, K}) : Tensor();
    Tensor dw = want_dw ? Tensor({N, K}) : Tensor();
    Tensor db = want_db ? Tensor({N}) : Tensor();
    if (want_dw) dw.fill(1.f);  // accumulates onto existing values
    if (want_db) db.fill(-1.f);
    ops::linear_backward(x, w, dy, dx, dw, db);
    if (want_dx) {
      EXPECT_TRUE(all_close(dx, gx, tol, tol)) << "dx";
    }
    if (want_dw) {
      std::vector<double> want = gw;
      for (double& v : want) v += 1;
      EXPECT_TRUE(all_close(dw, want, tol, tol)) << "dw";
    }
    if (want_db) {
      std::vector<double> want = gb;
      for (double& v : want) v -= 1;
      EXPECT_TRUE(all_close(db, want, tol, tol)) << "db";
    }
    EXPECT_TRUE(dx.empty() == !want_dx && dw.empty() == !want_dw && db.empty() == !want_db);
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(8);
  const int64_t M = 4, K = 7, N = 3;
  Tensor x = random_tensor({M, K}, gen), w = random_tensor({N, K}, gen),
         b = random_tensor({N}, gen);
  Tensor wy = random_tensor({M, N}, gen);  // L = Σ wy ⊙ y, so dy = wy
  Tensor y({M, N});
  auto loss = [&] {
    ops::linear_forward(x, w, b, y);
    return weighted_sum(y, wy);
  };
  Tensor dx({M, K}), dw({N, K}), db({N});
  ops::linear_backward(x, w, wy, dx, dw, db);
  EXPECT_GRAD_OK(check_gradient("dx", x, dx, loss));
  EXPECT_GRAD_OK(check_gradient("dw", w, dw, loss));
  EXPECT_GRAD_OK(check_gradient("db", b, db, loss));
}

TEST(Linear, ShapeOrDtypeMismatchThrows) {
  Tensor x({4, 6}), w({3, 6}), b({3}), y({4, 3});
  Tensor none;
  EXPECT_NO_THROW(ops::linear_forward(x, w, b, y));
  Tensor w_bad({3, 5}), b_bad({4}), y_bad({4, 4}), y_bad2({3, 3});
  EXPECT_THROW(ops::linear_forward(x, w_bad, b, y), Error);
  EXPECT_THROW(ops::linear_forward(x, w, b_bad, y), Error);
  EXPECT_THROW(ops::linear_forward(x, w, b, y_bad), Error);
  EXPECT_THROW(ops::linear_forward(x, w, b, y_bad2), Error);
  Tensor w16({3, 6}, DType::bf16);
  EXPECT_THROW(ops::linear_forward(x, w16, none, y), Error) << "x f32 with w bf16";
  Tensor y_i32({4, 3}, DType::i32);
  EXPECT_THROW(ops::linear_forward(x, w, b, y_i32), Error);

  Tensor dy({4, 3}), dx({4, 6}), dw({3, 6}), db({3});
  EXPECT_NO_THROW(ops::linear_backward(x, w, dy, dx, dw, db));
  Tensor dx_bad({4, 5}), dw_bad({6, 3}), db_bad({6}), dy_bad({4, 4});
  EXPECT_THROW(ops::linear_backward_data(dy, w, dx_bad), Error);
  EXPECT_THROW(ops::linear_backward_data(dy_bad, w, dx), Error);
  EXPECT_THROW(ops::linear_backward_weights(x, dy, dw_bad, db), Error);
  EXPECT_THROW(ops::linear_backward_weights(x, dy, dw, db_bad), Error);
  EXPECT_THROW(ops::linear_backward_weights(x, dy_bad, dw, db), Error);
  EXPECT_THROW(ops::linear_backward(x, w, dy, dx_bad, dw, db), Error);
  EXPECT_THROW(ops::linear_backward(x, w, dy, dx, dw_bad, db), Error);
}

TEST(Linear, Bf16InputsMatchF32OnRoundedInputs) {
  SKIP_WITHOUT_BF16();  // oneDNN has no bf16 products without AVX512_BF16
  std::mt19937 gen(9);
  struct Case {
    int64_t M, K, N;
  };
  for (Case c : {Case{7, 13, 5}, Case{300, 257, 129}}) {
    SCOPED_TRACE("M " + std::to_string(c.M));
    Tensor x = random_tensor({c.M, c.K}, gen), w = random_tensor({c.N, c.K}, gen);
    Tensor x16 = to_bf16(x), w16 = to_bf16(w);
    // The reference sees exactly the bf16 values, so only f32 accumulation error remains.
    const std::vector<double> want = naive_linear(x16, w16, Tensor());
    Tensor y({c.M, c.N});
    ops::linear_forward(x16, w16, Tensor(), y);
    EXPECT_TRUE(all_close(y, want, 1e-4, 1e-4)) << "f32 output";

    Tensor y16({c.M, c.N}, DType::bf16);
    ops::linear_forward(x16, w16, Tensor(), y16);
    // One bf16 rounding of the f32 result: relative error at most 2^-9, allow one ulp (2^-8).
    EXPECT_TRUE(all_close(y16, want, 1e-6, 1.0 / 256)) << "bf16 output";

    // The weight gradient from bf16 x and dy, read in their own type.
    Tensor dy16 = to_bf16(random_tensor({c.M, c.N}, gen));
    Tensor dw({c.N, c.K}), no_db;
    std::vector<double> gw, gb;
    naive_linear_dw(x16, dy16, gw, gb);
    ops::linear_backward_weights(x16, dy16, dw, no_db);
    EXPECT_TRUE(all_close(dw, gw, 1e-4, 1e-4)) << "weight gradient";
  }
}

TEST(Linear, Bf16WithF32BiasMatchesF32OnRoundedInputs) {
  SKIP_WITHOUT_BF16();  // oneDNN has no bf16 products without AVX512_BF16
  std::mt19937 gen(10);
  const int64_t M = 7, K = 13, N = 5;
  Tensor x16 = to_bf16(random_tensor({M, K}, gen)), w16 = to_bf16(random_tensor({N, K}, gen));
  Tensor b = random_tensor({N}, gen);
  Tensor y({M, N});
  ops::linear_forward(x16, w16, b, y);
  EXPECT_TRUE(all_close(y, naive_linear(x16, w16, b), 1e-4, 1e-4));
}

// ---- Linear in each precision

class LinearProducts : public ::testing::TestWithParam<std::tuple<ops::Precision, Mkn>> {};

TEST_P(LinearProducts, ForwardAndBackwardMatchNaiveOnTheOperandsAsRead) {
  const auto [precision, s] = GetParam();
  SKIP_UNLESS_SUPPORTED(precision);
  std::mt19937 gen(static_cast<unsigned>(s.m * 7919 + s.k * 31 + s.n));
  const Tensor x = random_tensor({s.m, s.k}, gen), w = random_tensor({s.n, s.k}, gen);
  const Tensor b = random_tensor({s.n}, gen), dy = random_tensor({s.m, s.n}, gen);
  const Tensor dw0 = random_tensor({s.n, s.k}, gen), db0 = random_tensor({s.n}, gen);
  const Tensor xr = as_read(x, precision), wr = as_read(w, precision), dyr = as_read(dy, precision);
  ops::WeightCache cache;
  const ops::Weight weight{w, &cache, 1};

  Tensor y = garbage_tensor({s.m, s.n});
  ops::linear_forward(x, weight, b, y, precision);
  const std::vector<double> want_y = naive_linear(xr, wr, b);
  EXPECT_TRUE(all_close(y, want_y, product_tol(s.k), product_tol(s.k))) << "forward";

  Tensor dx = garbage_tensor({s.m, s.k});
  ops::linear_backward_data(dy, weight, dx, precision);
  const std::vector<double> want_dx = naive_linear_dx(dyr, wr);
  EXPECT_TRUE(all_close(dx, want_dx, product_tol(s.n), product_tol(s.n))) << "backward-data";

  // dw accumulates dyᵀ·x in f32 on the operands as read; db sums the unrounded dy.
  Tensor dw = dw0.clone(), db = db0.clone();
  ops::linear_backward_weights(x, dy, dw, db, precision);
  const std::vector<double> want_dw = accumulated_dw(xr, dyr, dw0);
  EXPECT_TRUE(all_close(dw, want_dw, product_tol(s.m), product_tol(s.m))) << "backward-weights";
  EXPECT_TRUE(all_close(db, accumulated_db(dy, db0), product_tol(s.m), product_tol(s.m)))
      << "bias gradient";

  // Both at once give the same bits.
  Tensor dx2 = garbage_tensor({s.m, s.k}), dw2 = dw0.clone(), db2 = db0.clone();
  ops::linear_backward(x, weight, dy, dx2, dw2, db2, precision);
  EXPECT_TRUE(bitwise_equal(dx2, dx));
  EXPECT_TRUE(bitwise_equal(dw2, dw));
  EXPECT_TRUE(bitwise_equal(db2, db));

  // Against the unrounded operands, within what the precision's rounding allows (the bias is
  // added in f32: it is not part of Σ|x·w|).
  const double u = unit_roundoff(precision);
  const Tensor ax = absolute(x), aw = absolute(w), ady = absolute(dy);
  EXPECT_TRUE(within_rounding_bound(y, naive_linear(x, w, b), naive_linear(ax, aw, Tensor()), u,
                                    product_tol(s.k)))
      << "forward";
  EXPECT_TRUE(within_rounding_bound(dx, naive_linear_dx(dy, w), naive_linear_dx(ady, aw), u,
                                    product_tol(s.n)))
      << "backward-data";
  EXPECT_TRUE(within_rounding_bound(dw, accumulated_dw(x, dy, dw0),
                                    accumulated_dw(ax, ady, Tensor({s.n, s.k})), u,
                                    product_tol(s.m)))
      << "backward-weights";

  // The tolerance tells rounded operands from unrounded ones (big enough shapes only: a single
  // product can round to nothing).
  if (u > 0 && s.k >= 17) {
    EXPECT_GT(max_abs_diff(naive_linear(x, w, b), want_y), 10 * product_tol(s.k));
    EXPECT_GT(max_abs_diff(naive_linear_dx(dy, w), want_dx), 10 * product_tol(s.n));
    EXPECT_GT(max_abs_diff(accumulated_dw(x, dy, dw0), want_dw), 10 * product_tol(s.m));
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, LinearProducts,
                         ::testing::Combine(::testing::ValuesIn(kPrecisions),
                                            ::testing::ValuesIn(kShapes)),
                         [](const ::testing::TestParamInfo<std::tuple<ops::Precision, Mkn>>& p) {
                           return std::string(ops::precision_name(std::get<0>(p.param))) + "_" +
                                  shape_case_name(std::get<1>(p.param));
                         });

// bf16 products also take a gradient already rounded to bf16 (no bias gradient then): the weight
// gradient transposes it itself or reads the transpose given as dy_t; both give the bits of the
// f32 dy's pass, which rounds and transposes in one go.
class LinearBf16Gradient : public ::testing::TestWithParam<Mkn> {};

TEST_P(LinearBf16Gradient, ARoundedGradientGivesTheBitsOfTheF32One) {
  SKIP_WITHOUT_BF16();
  const Mkn s = GetParam();
  std::mt19937 gen(static_cast<unsigned>(s.m * 7919 + s.k * 31 + s.n));
  const Tensor x = random_tensor({s.m, s.k}, gen), w = random_tensor({s.n, s.k}, gen);
  const Tensor dy = random_tensor({s.m, s.n}, gen), dw0 = random_tensor({s.n, s.k}, gen);
  ops::WeightCache cache;
  const ops::Weight weight{w, &cache, 1};
  Tensor dx = garbage_tensor({s.m, s.k}), dw = dw0.clone(), none;
  ops::linear_backward(x, weight, dy, dx, dw, none, ops::Precision::bf16);

  const Tensor dyb = to_bf16(dy), dyb_t = naive_transpose_bf16(dyb);
  for (const Tensor& given : {Tensor(), dyb_t}) {
    SCOPED_TRACE(given.empty() ? "transposed here" : "dy_t given");
    Tensor dx3 = garbage_tensor({s.m, s.k}), dw3 = dw0.clone();
    ops::linear_backward(x, weight, dyb, dx3, dw3, none, ops::Precision::bf16, given);
    EXPECT_TRUE(bitwise_equal(dx3, dx));
    EXPECT_TRUE(bitwise_equal(dw3, dw));
  }
  Tensor dw4 = dw0.clone();
  ops::linear_backward_weights(x, dyb, dw4, none, ops::Precision::bf16);
  EXPECT_TRUE(bitwise_equal(dw4, dw));
  // A dy_t that is not dy's transpose in shape and type, or with f32 products, is refused.
  Tensor dx4({s.m, s.k});
  EXPECT_THROW(ops::linear_backward(x, weight, dyb, dx4, dw4, none, ops::Precision::bf16,
                                    Tensor({s.n, s.m + 1}, DType::bf16)),
               Error);
  EXPECT_THROW(ops::linear_backward(x, weight, dyb, dx4, dw4, none, ops::Precision::bf16,
                                    Tensor({s.n, s.m})),
               Error);
  EXPECT_THROW(ops::linear_backward(x, weight, dy, dx4, dw4, none, ops::Precision::bf16, dyb_t),
               Error);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearBf16Gradient, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Mkn>& p) {
                           return shape_case_name(p.param);
                         });

TEST(LinearBf16, WithoutACacheAndOnBf16InputsGivesTheSame) {
  SKIP_WITHOUT_BF16();
  std::mt19937 gen(5);
  const Tensor x = random_tensor({40, 70, 24}, gen), w = random_tensor({90, 24}, gen);
  const Tensor b = random_tensor({90}, gen);
  ops::WeightCache cache;
  Tensor y1({40, 70, 90}), y2({40, 70, 90}), y3({40, 70, 90});
  ops::linear_forward(x, ops::Weight{w, &cache, 3}, b, y1, ops::Precision::bf16);
  ops::linear_forward(x, ops::Weight{w}, b, y2, ops::Precision::bf16);
  // A layer's own rounded copy of x, as nn::Linear keeps for its backward.
  Tensor xb(x.shape(), DType::bf16);
  ops::round_to_bf16(x, xb);
  ops::linear_forward(xb, ops::Weight{w, &cache, 3}, b, y3, ops::Precision::bf16);
  EXPECT_TRUE(bitwise_equal(y1, y2));
  EXPECT_TRUE(bitwise_equal(y1, y3));
  EXPECT_EQ(cache.packs(), 1);
}

TEST(LinearBf16, BadOperandsAreNamed) {
  std::mt19937 gen(1);
  const Tensor x = random_tensor({4, 8}, gen), w = random_tensor({6, 8}, gen);
  Tensor y({4, 6}), wrong({4, 5});
  EXPECT_THROW(ops::linear_forward(x, ops::Weight{w}, Tensor(), wrong, ops::Precision::bf16),
               Error);
  Tensor xb(x.shape(), DType::bf16);
  // An f32 product does not take bf16 operands.
  EXPECT_THROW(ops::linear_forward(xb, ops::Weight{w}, Tensor(), y, ops::Precision::f32), Error);
}

// ---- The weight cache ----

TEST(WeightCache, PacksOncePerVersionAndOrientation) {
  SKIP_WITHOUT_BF16();
  std::mt19937 gen(21);
  const Tensor x = random_tensor({50, 96}, gen), w = random_tensor({160, 96}, gen);
  const Tensor dy = random_tensor({50, 160}, gen);
  ops::WeightCache cache;
  Tensor y({50, 160}), dx({50, 96});
  const int64_t primitives = ops::primitive_count();
  for (int i = 0; i < 3; ++i) {  // inference: one form, packed once
    ops::linear_forward(x, ops::Weight{w, &cache, 1}, Tensor(), y, ops::Precision::bf16);
    EXPECT_EQ(cache.packs(), 1);
  }
  const size_t bytes = cache.bytes();
  EXPECT_EQ(cache.forms(), 1);
  EXPECT_GE(bytes, static_cast<size_t>(160 * 96 * 2));
  // Training: forward (wᵀ) and backward-data (w) are two layouts, each packed once per version.
  for (uint64_t version = 2; version < 6; ++version) {
    for (int use = 0; use < 2; ++use) {
      ops::linear_forward(x, ops::Weight{w, &cache, version}, Tensor(), y, ops::Precision::bf16);
      ops::linear_backward_data(dy, ops::Weight{w, &cache, version}, dx, ops::Precision::bf16);
    }
    EXPECT_EQ(cache.packs(), 1 + 2 * static_cast<int64_t>(version - 1));
  }
  EXPECT_EQ(cache.forms(), 2);
  const size_t two_forms = cache.bytes();
  const int64_t warm = ops::primitive_count();
  ops::linear_forward(x, ops::Weight{w, &cache, 6}, Tensor(), y, ops::Precision::bf16);
  ops::linear_backward_data(dy, ops::Weight{w, &cache, 6}, dx, ops::Precision::bf16);
  EXPECT_EQ(cache.bytes(), two_forms) << "re-packing reuses the forms' memory";
  EXPECT_EQ(ops::primitive_count(), warm) << "no primitive is created once warm";
  EXPECT_GT(warm, primitives - 1);
  cache.clear();
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(WeightCache, AStaleFormIsRebuiltAfterAVersionBumpAndOnlyThen) {
  SKIP_WITHOUT_BF16();
  std::mt19937 gen(22);
  const Tensor x = random_tensor({30, 64}, gen);
  Tensor w = random_tensor({128, 64}, gen);
  const Tensor w_old = w.clone();
  ops::WeightCache cache;
  Tensor y({30, 128});
  ops::linear_forward(x, ops::Weight{w, &cache, 1}, Tensor(), y, ops::Precision::bf16);
  w.copy_from(random_tensor({128, 64}, gen));  // the owner writes w ...
  // ... without a new version the packed form is what the product reads (the contract) ...
  ops::linear_forward(x, ops::Weight{w, &cache, 1}, Tensor(), y, ops::Precision::bf16);
  EXPECT_TRUE(all_close(y, naive_linear(as_read(x, kBf16), as_read(w_old, kBf16), Tensor()),
                        product_tol(64), product_tol(64)));
  // ... and with one, the new weight.
  ops::linear_forward(x, ops::Weight{w, &cache, 2}, Tensor(), y, ops::Precision::bf16);
  EXPECT_TRUE(all_close(y, naive_linear(as_read(x, kBf16), as_read(w, kBf16), Tensor()),
                        product_tol(64), product_tol(64)));
}

TEST(WeightCache, F32PackingIsUsedOnlyWhereItIsPreferredAndGivesTheSame) {
  std::mt19937 gen(23);
  const Tensor x = random_tensor({197, 64}, gen);
  for (const int64_t n : {192, 48}) {
    const Tensor w = random_tensor({n, 64}, gen), b = random_tensor({n}, gen);
    ops::WeightCache cache;
    ops::Weight packed{w, &cache, 1};
    packed.pack_f32 = true;
    Tensor y_plain({197, n}), y_packed({197, n});
    ops::linear_forward(x, w, b, y_plain);
    ops::linear_forward(x, packed, b, y_packed, ops::Precision::f32);
    EXPECT_EQ(cache.packs(), ops::prefer_packed_f32(197, 64, n) ? 1 : 0) << "n " << n;
    EXPECT_TRUE(all_close(y_packed, to_double(y_plain), product_tol(64), product_tol(64)));
  }
  // Wide outputs, and every shape from 512 rows on, on AVX-512 only (weight_cache.cpp says why).
  const bool avx512 = ops::cpu_isa().rfind("avx512", 0) == 0;
  EXPECT_EQ(ops::prefer_packed_f32(197, 64, 192), avx512);
  EXPECT_FALSE(ops::prefer_packed_f32(197, 64, 48));
  EXPECT_EQ(ops::prefer_packed_f32(577, 3072, 768), avx512);
  EXPECT_FALSE(ops::prefer_packed_f32(511, 3072, 768));
}

// One copy at inference: once the first form is packed the plain weight's memory is given back
// (Weight::plain_released); every later product, at any number of rows and whatever its version,
// reads the forms, a new layout made from one the cache holds. Zeroing the plain weight stands in
// for the memory given back (the pages then read as zeros).
TEST(WeightCache, AReleasedPlainWeightIsReadFromItsFormsAtAnyRowCount) {
  std::mt19937 gen(25);
  const Tensor w = random_tensor({192, 64}, gen), b = random_tensor({192}, gen);
  Tensor plain = w.clone();
  ops::WeightCache cache;
  ops::Weight weight{plain, &cache, 1};
  weight.force_pack_f32 = true;
  const Tensor x = random_tensor({197, 64}, gen);
  Tensor first({197, 192});
  ops::linear_forward(x, weight, b, first, ops::Precision::f32);
  ASSERT_EQ(cache.forms(), 1);
  plain.zero();
  weight.plain_released = true;
  weight.force_pack_f32 = false;  // where plain would be preferred, the forms are read all the same
  weight.version = 7;             // and a released weight's forms are never stale
  for (const int64_t rows : {197, 1, 5, 33}) {
    SCOPED_TRACE(rows);
    const Tensor xr = x.rows(0, rows).clone();
    Tensor y({rows, 192});
    ops::linear_forward(xr, weight, b, y, ops::Precision::f32);
    EXPECT_TRUE(all_close(y, naive_linear(xr, w, b), product_tol(64), product_tol(64)));
  }
  ops::WeightCache empty;
  const ops::Weight none{plain, &empty, 1, false, false, true};
  Tensor y({4, 192});
  const std::string e =
      error_of([&] { ops::linear_forward(x.rows(0, 4).clone(), none, b, y, ops::Precision::f32); });
  EXPECT_TRUE(contains(e, "released before any packed form")) << e;
}

// A Linear layer trained a step in bf16: the optimizer's step bumps the parameter versions, so
// the next forward reads the new weights, packed again (a stale form would give the old output).
TEST(WeightCache, OptimizerStepRepacksAndTheLayerReadsTheNewWeights) {
  SKIP_WITHOUT_BF16();
  std::mt19937 gen(24);
  ParamStore store;
  nn::Linear layer(store, "fc", 48, 80);
  store.finalize();
  store.params()[0].value.copy_from(random_tensor({80, 48}, gen));
  store.params()[1].value.copy_from(random_tensor({80}, gen));
  store.mark_changed();
  const Tensor x = random_tensor({6, 10, 48}, gen), dy = random_tensor({6, 10, 80}, gen);
  Arena arena;
  nn::Context ctx{true, &arena, nullptr};
  ctx.precision = ops::Precision::bf16;
  optim::AdamWOptions o;
  optim::AdamW adam(store, o);
  for (int step = 0; step < 3; ++step) {
    arena.reset();
    store.zero_grad();
    const Tensor w_before = layer.weight.value.clone();
    const Tensor y = layer.forward(ctx, x);
    EXPECT_TRUE(
        all_close(y, naive_linear(as_read(x, kBf16), as_read(w_before, kBf16), layer.bias->value),
                  product_tol(48), product_tol(48)))
        << "step " << step;
    layer.backward(ctx, dy);
    adam.step(0.05f);  // a large step: the weights move by far more than the tolerance
    EXPECT_EQ(layer.weight.packed->packs(), 2 * (step + 1)) << "forward and backward-data forms";
  }
  arena.reset();
  nn::Context infer{false, &arena, nullptr};
  infer.precision = ops::Precision::bf16;
  const Tensor y = layer.forward(infer, x);
  EXPECT_TRUE(all_close(
      y, naive_linear(as_read(x, kBf16), as_read(layer.weight.value, kBf16), layer.bias->value),
      product_tol(48), product_tol(48)));
}

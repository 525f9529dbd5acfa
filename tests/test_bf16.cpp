// The bf16 products and packed weights (ops::Precision::bf16, ops::WeightCache): each product
// against naive double loops, twice.
// 1. On bf16-rounded operands: the product of two bf16 values is exact in f32, so the only
//    difference is the f32 summation order, and the tolerance is the f32 one. Every such check
//    also shows that it could tell: the same reference on unrounded operands is further away.
// 2. On the unrounded operands, with the bound that bf16's 8-bit significand (7 stored bits and
//    the implicit one) gives: rounding to nearest changes a value by at most u = 2⁻⁸ of itself,
//    so each term x·w moves by at most (2u + u²)·|x·w|, and the sum by (2u + u²)·Σ|x·w|.
// Skipped on CPUs without AVX512_BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/nn/nn.h"
#include "common/ops/ops.h"
#include "common/optim/optim.h"
#include "common/params.h"
#include "op_test_util.h"
#include "test_util.h"

using namespace vitk;
using namespace vitk::test;

namespace {

// |err| ≤ tol·(1 + |want|) for an f32 sum of k exact products of values in [−1, 1].
double product_tol(int64_t k) {
  return 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
}

// An f32 tensor holding t's values rounded to bf16: what the bf16 products multiply.
Tensor rounded(const Tensor& t) {
  Tensor out(t.shape());
  const float* s = t.f32();
  float* d = out.f32();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = bf16_to_f32(f32_to_bf16(s[i]));
  return out;
}

std::vector<double> naive_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t K = x.dim(-1), M = x.numel() / K, N = w.dim(0);
  std::vector<double> xd = to_double(x), wd = to_double(w), y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = b.empty() ? 0.0 : b.f32()[n];
      for (int64_t k = 0; k < K; ++k) s += xd[m * K + k] * wd[n * K + k];
      y[m * N + n] = s;
    }
  return y;
}

std::vector<double> naive_dx(const Tensor& dy, const Tensor& w) {
  const int64_t N = w.dim(0), K = w.dim(1), M = dy.numel() / N;
  std::vector<double> g = to_double(dy), wd = to_double(w), dx(static_cast<size_t>(M * K), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) dx[m * K + k] += g[m * N + n] * wd[n * K + k];
  return dx;
}

// dw0 + dyᵀ·x
std::vector<double> naive_dw(const Tensor& x, const Tensor& dy, const Tensor& dw0) {
  const int64_t K = x.dim(-1), M = x.numel() / K, N = dy.dim(-1);
  std::vector<double> xd = to_double(x), g = to_double(dy), dw = to_double(dw0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) dw[n * K + k] += g[m * N + n] * xd[m * K + k];
  return dw;
}

// db0 + Σ_rows dy
std::vector<double> naive_db(const Tensor& dy, const Tensor& db0) {
  const int64_t N = dy.dim(-1), M = dy.numel() / N;
  std::vector<double> g = to_double(dy), db = to_double(db0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) db[n] += g[m * N + n];
  return db;
}

// bf16's unit roundoff: 8 significant bits, round to nearest.
constexpr double kBf16U = 1.0 / 256;

// |got − exact| ≤ (2u + u²)·Σ|x·w| + the f32 summation tolerance, elementwise, where `magnitude`
// holds Σ|x·w| of each output (the reference run on |x| and |w|).
::testing::AssertionResult within_bf16_bound(const Tensor& got, const std::vector<double>& exact,
                                             const std::vector<double>& magnitude, double f32_tol) {
  if (static_cast<size_t>(got.numel()) != exact.size() || exact.size() != magnitude.size())
    return ::testing::AssertionFailure() << "sizes differ";
  const std::vector<double> g = to_double(got);
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound =
        (2 * kBf16U + kBf16U * kBf16U) * magnitude[i] + f32_tol * (1 + std::fabs(exact[i]));
    const double err = std::fabs(g[i] - exact[i]);
    if (!(err <= bound))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << g[i] << ", exact " << exact[i] << ", |error| " << err
             << " > bound " << bound << " (Σ|x·w| = " << magnitude[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

Tensor absolute(const Tensor& t) {
  Tensor out(t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.f32()[i] = std::fabs(t.f32()[i]);
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

struct Mkn {
  int64_t m, k, n;
};

// Small odd shapes, shapes that pad oneDNN's 16×64 weight blocks, ViT-sized ones that run the
// blocked kernels on both threads, and square weights (K = N), whose forward (wᵀ) and
// backward-data (w) forms share dims and layout but not contents.
const std::vector<Mkn> kShapes = {{1, 1, 1},      {3, 5, 7},       {17, 33, 65}, {64, 96, 130},
                                  {197, 768, 96}, {300, 200, 256}, {33, 64, 64}, {197, 192, 192}};

class Bf16Linear : public ::testing::TestWithParam<Mkn> {};

TEST_P(Bf16Linear, ForwardBackwardDataAndWeightsMatchNaiveOnRoundedOperands) {
  SKIP_WITHOUT_BF16();
  const Mkn s = GetParam();
  std::mt19937 gen(static_cast<unsigned>(s.m * 7919 + s.k * 31 + s.n));
  const Tensor x = random_tensor({s.m, s.k}, gen), w = random_tensor({s.n, s.k}, gen);
  const Tensor b = random_tensor({s.n}, gen), dy = random_tensor({s.m, s.n}, gen);
  const Tensor dw0 = random_tensor({s.n, s.k}, gen), db0 = random_tensor({s.n}, gen);
  const Tensor xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
  ops::WeightCache cache;
  const ops::Weight weight{w, &cache, 1};

  Tensor y = garbage_tensor({s.m, s.n});
  ops::linear_forward(x, weight, b, y, ops::Precision::bf16);
  const std::vector<double> want_y = naive_linear(xr, wr, b);
  EXPECT_TRUE(all_close(y, want_y, product_tol(s.k), product_tol(s.k))) << "forward";

  Tensor dx = garbage_tensor({s.m, s.k});
  ops::linear_backward_data(dy, weight, dx, ops::Precision::bf16);
  const std::vector<double> want_dx = naive_dx(dyr, wr);
  EXPECT_TRUE(all_close(dx, want_dx, product_tol(s.n), product_tol(s.n))) << "backward-data";

  // dw accumulates dyᵀ·x in f32 on rounded operands; db sums the unrounded dy.
  Tensor dw = dw0.clone(), db = db0.clone();
  ops::linear_backward_weights(x, dy, dw, db, ops::Precision::bf16);
  const std::vector<double> want_dw = naive_dw(xr, dyr, dw0);
  const std::vector<double> want_db = naive_db(dy, db0);
  EXPECT_TRUE(all_close(dw, want_dw, product_tol(s.m), product_tol(s.m))) << "backward-weights";
  EXPECT_TRUE(all_close(db, want_db, product_tol(s.m), product_tol(s.m))) << "bias gradient";

  // Both at once round dy once and give the same.
  Tensor dx2 = garbage_tensor({s.m, s.k}), dw2 = dw0.clone(), db2 = db0.clone();
  ops::linear_backward(x, weight, dy, dx2, dw2, db2, ops::Precision::bf16);
  EXPECT_TRUE(bitwise_equal(dx2, dx));
  EXPECT_TRUE(bitwise_equal(dw2, dw));
  EXPECT_TRUE(bitwise_equal(db2, db));

  // From dy already rounded to bf16 (no bias gradient then): the weight gradient transposes it
  // itself or reads the transpose given as dy_t; both give the bits of the f32 dy's pass, which
  // rounds and transposes in one go.
  const Tensor dyb = to_bf16(dy), dyb_t = naive_transpose_bf16(dyb);
  Tensor none;
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

  // Against the unrounded operands, within what the 8-bit significand allows (the bias is added
  // in f32: it is not part of Σ|x·w|).
  const Tensor ax = absolute(x), aw = absolute(w), ady = absolute(dy);
  EXPECT_TRUE(
      within_bf16_bound(y, naive_linear(x, w, b), naive_linear(ax, aw, Tensor()), product_tol(s.k)))
      << "forward";
  EXPECT_TRUE(within_bf16_bound(dx, naive_dx(dy, w), naive_dx(ady, aw), product_tol(s.n)))
      << "backward-data";
  EXPECT_TRUE(within_bf16_bound(dw, naive_dw(x, dy, dw0), naive_dw(ax, ady, Tensor({s.n, s.k})),
                                product_tol(s.m)))
      << "backward-weights";

  // The tolerance tells rounded operands from unrounded ones (big enough shapes only: a single
  // product can round to nothing).
  if (s.k >= 17) {
    EXPECT_GT(max_abs_diff(naive_linear(x, w, b), want_y), 10 * product_tol(s.k));
    EXPECT_GT(max_abs_diff(naive_dx(dy, w), want_dx), 10 * product_tol(s.n));
    EXPECT_GT(max_abs_diff(naive_dw(x, dy, dw0), want_dw), 10 * product_tol(s.m));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16Linear, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Mkn>& p) {
                           return "m" + std::to_string(p.param.m) + "k" +
                                  std::to_string(p.param.k) + "n" + std::to_string(p.param.n);
                         });

TEST(Bf16Linear, WithoutACacheAndOnBf16InputsGivesTheSame) {
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

TEST(Bf16Linear, BadOperandsAreNamed) {
  std::mt19937 gen(1);
  const Tensor x = random_tensor({4, 8}, gen), w = random_tensor({6, 8}, gen);
  Tensor y({4, 6}), wrong({4, 5});
  EXPECT_THROW(ops::linear_forward(x, ops::Weight{w}, Tensor(), wrong, ops::Precision::bf16),
               Error);
  Tensor xb(x.shape(), DType::bf16);
  // An f32 product does not take bf16 operands.
  EXPECT_THROW(ops::linear_forward(xb, ops::Weight{w}, Tensor(), y, ops::Precision::f32), Error);
}

// ---- Batched products ----

// c [batch, M, N] = alpha · op(a) · op(b) over stored a, b [batch, rows, cols], in double.
std::vector<double> naive_bmm(const Tensor& a, bool ta, const Tensor& b, bool tb, int64_t batch,
                              int64_t M, int64_t K, int64_t N, double alpha) {
  std::vector<double> ad = to_double(a), bd = to_double(b), c(static_cast<size_t>(batch * M * N));
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = ta ? ad[(i * K + k) * M + m] : ad[(i * M + m) * K + k];
          const double bv = tb ? bd[(i * N + n) * K + k] : bd[(i * K + k) * N + n];
          s += av * bv;
        }
        c[(i * M + m) * N + n] = alpha * s;
      }
  return c;
}

TEST(Bf16Bmm, TensorsWithTransposesMatchNaiveOnRoundedOperands) {
  SKIP_WITHOUT_BF16();
  std::mt19937 gen(11);
  const int64_t B = 2, H = 3, M = 50, K = 64, N = 45;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const Tensor a = random_tensor(ta ? Shape{B, H, K, M} : Shape{B, H, M, K}, gen);
      const Tensor b = random_tensor(tb ? Shape{B, H, N, K} : Shape{B, H, K, N}, gen);
      Tensor c = garbage_tensor({B, H, M, N});
      ops::bmm(a, ta, b, tb, c, 0.125f, 0.f, ops::Precision::bf16);
      const auto want = naive_bmm(rounded(a), ta, rounded(b), tb, B * H, M, K, N, 0.125);
      EXPECT_TRUE(all_close(c, want, product_tol(K), product_tol(K)))
          << "ta " << ta << " tb " << tb;
      EXPECT_GT(max_abs_diff(naive_bmm(a, ta, b, tb, B * H, M, K, N, 0.125), want),
                10 * product_tol(K));
      EXPECT_TRUE(within_bf16_bound(
          c, naive_bmm(a, ta, b, tb, B * H, M, K, N, 0.125),
          naive_bmm(absolute(a), ta, absolute(b), tb, B * H, M, K, N, 0.125), product_tol(K)))
          << "ta " << ta << " tb " << tb << ": against the unrounded operands";
    }
}

TEST(Bf16Bmm, HeadViewsOfAFusedProjectionMatchNaive) {
  SKIP_WITHOUT_BF16();
  // q·kᵀ per head read in place from qkv [B, T, 3·H·dh], f32 and pre-rounded bf16 views.
  std::mt19937 gen(12);
  const int64_t B = 2, T = 37, H = 3, dh = 64, d = H * dh;
  const Tensor qkv = random_tensor({B, T, 3 * d}, gen);
  Tensor qkv_b(qkv.shape(), DType::bf16);
  ops::round_to_bf16(qkv, qkv_b);
  const Tensor r = rounded(qkv);
  std::vector<double> want(static_cast<size_t>(B * H * T * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (int64_t c = 0; c < dh; ++c)
            s += static_cast<double>(r.f32()[(b * T + i) * 3 * d + h * dh + c]) *
                 r.f32()[(b * T + j) * 3 * d + d + h * dh + c];
          want[static_cast<size_t>(((b * H + h) * T + i) * T + j)] = s * 0.125;
        }
  for (const Tensor* src : {&qkv, static_cast<const Tensor*>(&qkv_b)}) {
    Tensor scores = garbage_tensor({B, H, T, T});
    ops::bmm(ops::heads_view(*src, H, dh, 0), ops::heads_view(*src, H, dh, 1).t(),
             ops::matrix_view(scores), 0.125f, 0.f, ops::Precision::bf16);
    EXPECT_TRUE(all_close(scores, want, product_tol(dh), product_tol(dh)))
        << dtype_name(src->dtype()) << " views";
  }
}

TEST(Bf16Bmm, BackwardMatchesNaiveOnRoundedOperands) {
  SKIP_WITHOUT_BF16();
  std::mt19937 gen(13);
  const int64_t B = 4, M = 33, K = 20, N = 70;
  const Tensor a = random_tensor({B, M, K}, gen), b = random_tensor({B, N, K}, gen);
  const Tensor dc = random_tensor({B, M, N}, gen);
  Tensor da = garbage_tensor({B, M, K}), db = garbage_tensor({B, N, K});
  ops::bmm_backward(a, false, b, true, dc, 0.5f, da, db, ops::Precision::bf16);
  // da = 0.5·dc·b, db = 0.5·dcᵀ·a on rounded operands.
  EXPECT_TRUE(all_close(da, naive_bmm(rounded(dc), false, rounded(b), false, B, M, N, K, 0.5),
                        product_tol(N), product_tol(N)));
  EXPECT_TRUE(all_close(db, naive_bmm(rounded(dc), true, rounded(a), false, B, N, M, K, 0.5),
                        product_tol(M), product_tol(M)));
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
  EXPECT_TRUE(all_close(y, naive_linear(rounded(x), rounded(w_old), Tensor()), product_tol(64),
                        product_tol(64)));
  // ... and with one, the new weight.
  ops::linear_forward(x, ops::Weight{w, &cache, 2}, Tensor(), y, ops::Precision::bf16);
  EXPECT_TRUE(all_close(y, naive_linear(rounded(x), rounded(w), Tensor()), product_tol(64),
                        product_tol(64)));
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
  EXPECT_TRUE(ops::prefer_packed_f32(197, 64, 192));
  EXPECT_FALSE(ops::prefer_packed_f32(197, 64, 48));
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
    EXPECT_TRUE(all_close(y, naive_linear(rounded(x), rounded(w_before), layer.bias->value),
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
  EXPECT_TRUE(all_close(y, naive_linear(rounded(x), rounded(layer.weight.value), layer.bias->value),
                        product_tol(48), product_tol(48)));
}

}  // namespace

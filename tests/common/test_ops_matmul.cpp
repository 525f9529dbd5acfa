// ops::bmm and ops::bmm_backward in each precision of the products (f32, bf16 with f32
// accumulation) against naive double loops (util/matmul_reference.h) and finite differences; the
// primitive cache and the CPU report. bf16 cases are skipped on CPUs without AVX512_BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iomanip>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/ops.h"
#include "util/matmul_reference.h"
#include "util/op_test_util.h"
#include "util/test_util.h"

using namespace vitk;
using namespace vitk::test;

namespace {

const std::vector<Shape> kBatches = {{}, {3}, {2, 3}};  // ranks 2, 3 and 4

std::string combo_name(const Shape& batch, bool ta, bool tb) {
  return "rank " + std::to_string(batch.size() + 2) + " trans_a " + std::to_string(ta) +
         " trans_b " + std::to_string(tb);
}

}  // namespace

// ---- Batched matrix product
// ------------------------------------------------------------------------

TEST(Bmm, AllTransposeCombinationsAndRanksMatchNaive) {
  std::mt19937 gen(11);
  const int64_t M = 7, K = 13, N = 5;
  for (const Shape& batch : kBatches)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(combo_name(batch, ta, tb));
        Tensor a = random_tensor(a_shape(batch, ta, M, K), gen);
        Tensor b = random_tensor(b_shape(batch, tb, K, N), gen);
        const double tol = product_tol(K);
        // beta = 0: old contents of c are ignored.
        Tensor c(batched(batch, M, N));
        c.fill(1e6f);
        ops::bmm(a, ta, b, tb, c);
        EXPECT_TRUE(all_close(c, naive_bmm(a, ta, b, tb, 1.0, {}, 0.0), tol, tol)) << "defaults";
        // alpha and beta.
        Tensor c2 = random_tensor(batched(batch, M, N), gen);
        const std::vector<double> c0 = to_double(c2);
        ops::bmm(a, ta, b, tb, c2, 0.7f, 0.5f);
        EXPECT_TRUE(all_close(c2, naive_bmm(a, ta, b, tb, 0.7, c0, 0.5), tol, tol))
            << "alpha 0.7 beta 0.5";
        Tensor c3 = random_tensor(batched(batch, M, N), gen);
        const std::vector<double> c30 = to_double(c3);
        ops::bmm(a, ta, b, tb, c3, -1.5f, 1.f);
        EXPECT_TRUE(all_close(c3, naive_bmm(a, ta, b, tb, -1.5, c30, 1.0), tol, tol))
            << "alpha -1.5 beta 1";
      }
}

TEST(Bmm, AttentionScoresExampleFromHeader) {
  // scores [B, H, Tq, Tk] = q [B, H, Tq, D] · k [B, H, Tk, D]ᵀ, scaled by 1/√D.
  std::mt19937 gen(12);
  const int64_t B = 2, H = 3, Tq = 6, Tk = 9, D = 16;
  Tensor q = random_tensor({B, H, Tq, D}, gen), k = random_tensor({B, H, Tk, D}, gen);
  Tensor s({B, H, Tq, Tk});
  const float scale = 0.25f;
  ops::bmm(q, false, k, true, s, scale);
  std::vector<double> want(static_cast<size_t>(s.numel()));
  std::vector<double> qd = to_double(q), kd = to_double(k);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < D; ++d)
          acc += qd[(bh * Tq + i) * D + d] * kd[(bh * Tk + j) * D + d];
        want[(bh * Tq + i) * Tk + j] = scale * acc;
      }
  EXPECT_TRUE(all_close(s, want, product_tol(D), product_tol(D)));
}

TEST(Bmm, LargeShapeUsesBlockedPath) {
  std::mt19937 gen(13);
  const int64_t M = 300, K = 257, N = 129;
  for (auto [ta, tb] : {std::pair<bool, bool>{false, true}, {true, false}}) {
    SCOPED_TRACE(combo_name({2}, ta, tb));
    Tensor a = random_tensor(a_shape({2}, ta, M, K), gen);
    Tensor b = random_tensor(b_shape({2}, tb, K, N), gen);
    Tensor c = random_tensor({2, M, N}, gen);
    const std::vector<double> c0 = to_double(c);
    ops::bmm(a, ta, b, tb, c, 0.5f, 2.f);
    EXPECT_TRUE(
        all_close(c, naive_bmm(a, ta, b, tb, 0.5, c0, 2.0), product_tol(K), product_tol(K)));
  }
}

TEST(Bmm, NearbyAlphaAndBetaValuesAreNotConfused) {
  // Products of small integers are exact, so any difference below comes from alpha or beta.
  Tensor a = from_vector({1, 4}, {1, 2, 3, 4}), b = from_vector({4, 1}, {1, 1, 1, 1});  // a·b = 10
  Tensor c({1, 1});
  for (float alpha : {1.f, 1.000004f, 0.1250004f, 0.1249996f}) {
    ops::bmm(a, false, b, false, c, alpha);
    EXPECT_NEAR(c.f32()[0], 10.0 * alpha, 1e-7 * 10) << "alpha " << std::setprecision(9) << alpha;
  }
  for (float beta : {2.f, 2.000004f}) {
    c.f32()[0] = 1000.f;
    ops::bmm(a, false, b, false, c, 1.f, beta);
    EXPECT_NEAR(c.f32()[0], 10.0 + 1000.0 * beta, 2e-4) << "beta " << std::setprecision(9) << beta;
  }
}

TEST(Bmm, BackwardMatchesNaiveAndOverwrites) {
  std::mt19937 gen(14);
  const int64_t M = 7, K = 13, N = 5;
  for (const Shape& batch : kBatches)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(combo_name(batch, ta, tb));
        Tensor a = random_tensor(a_shape(batch, ta, M, K), gen);
        Tensor b = random_tensor(b_shape(batch, tb, K, N), gen);
        Tensor dc = random_tensor(batched(batch, M, N), gen);
        Tensor da = garbage_tensor(a.shape()), db = garbage_tensor(b.shape());
        ops::bmm_backward(a, ta, b, tb, dc, 0.7f, da, db);
        std::vector<double> wa, wb;
        naive_bmm_backward(a, ta, b, tb, dc, 0.7, wa, wb);
        EXPECT_TRUE(all_close(da, wa, product_tol(N), product_tol(N))) << "da";
        EXPECT_TRUE(all_close(db, wb, product_tol(M), product_tol(M))) << "db";
      }
}

TEST(Bmm, BackwardLargeShape) {
  std::mt19937 gen(15);
  const int64_t M = 300, K = 257, N = 129;
  Tensor a = random_tensor({2, M, K}, gen), b = random_tensor({2, N, K}, gen);
  Tensor dc = random_tensor({2, M, N}, gen);
  Tensor da = garbage_tensor(a.shape()), db = garbage_tensor(b.shape());
  ops::bmm_backward(a, false, b, true, dc, 1.f, da, db);
  std::vector<double> wa, wb;
  naive_bmm_backward(a, false, b, true, dc, 1.0, wa, wb);
  EXPECT_TRUE(all_close(da, wa, product_tol(N), product_tol(N))) << "da";
  EXPECT_TRUE(all_close(db, wb, product_tol(M), product_tol(M))) << "db";
}

TEST(Bmm, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(16);
  const int64_t M = 4, K = 6, N = 3;
  for (const Shape& batch : {Shape{}, Shape{2}, Shape{2, 2}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(combo_name(batch, ta, tb));
        Tensor a = random_tensor(a_shape(batch, ta, M, K), gen);
        Tensor b = random_tensor(b_shape(batch, tb, K, N), gen);
        Tensor wc = random_tensor(batched(batch, M, N), gen);
        Tensor c(wc.shape());
        const float alpha = 0.7f;
        auto loss = [&] {
          ops::bmm(a, ta, b, tb, c, alpha);
          return weighted_sum(c, wc);
        };
        Tensor da(a.shape()), db(b.shape());
        ops::bmm_backward(a, ta, b, tb, wc, alpha, da, db);
        EXPECT_GRAD_OK(check_gradient("da", a, da, loss));
        EXPECT_GRAD_OK(check_gradient("db", b, db, loss));
      }
}

TEST(Bmm, BackwardSkipsEmptyOutputs) {
  std::mt19937 gen(17);
  Tensor a = random_tensor({3, 7, 13}, gen), b = random_tensor({3, 5, 13}, gen);
  Tensor dc = random_tensor({3, 7, 5}, gen);
  std::vector<double> wa, wb;
  naive_bmm_backward(a, false, b, true, dc, 2.0, wa, wb);
  Tensor da = garbage_tensor(a.shape()), db = garbage_tensor(b.shape()), none;
  ops::bmm_backward(a, false, b, true, dc, 2.f, da, none);
  EXPECT_TRUE(all_close(da, wa, product_tol(5), product_tol(5))) << "da alone";
  ops::bmm_backward(a, false, b, true, dc, 2.f, none, db);
  EXPECT_TRUE(all_close(db, wb, product_tol(7), product_tol(7))) << "db alone";
  EXPECT_TRUE(none.empty());
}

TEST(Bmm, ShapeMismatchThrows) {
  Tensor a({2, 4, 6}), b({2, 6, 3}), c({2, 4, 3});
  EXPECT_NO_THROW(ops::bmm(a, false, b, false, c));
  Tensor b_inner({2, 5, 3}), b_batch({3, 6, 3}), c_bad({2, 4, 4}), c_batch({3, 4, 3});
  EXPECT_THROW(ops::bmm(a, false, b_inner, false, c), Error) << "inner dimensions 6 vs 5";
  EXPECT_THROW(ops::bmm(a, false, b_batch, false, c), Error) << "batch 2 vs 3";
  EXPECT_THROW(ops::bmm(a, false, b, false, c_bad), Error) << "c [2, 4, 4]";
  EXPECT_THROW(ops::bmm(a, false, b, false, c_batch), Error) << "c batch 3";
  EXPECT_THROW(ops::bmm(a, true, b, false, c), Error) << "op(a) is [6, 4]";
  EXPECT_THROW(ops::bmm(a, false, b, true, c), Error) << "op(b) is [3, 6]";
  Tensor a1({6}), b1({6}), c1({1});
  EXPECT_THROW(ops::bmm(a1, false, b1, false, c1), Error) << "rank 1";
  Tensor a5({1, 1, 1, 4, 6}), b5({1, 1, 1, 6, 3}), c5({1, 1, 1, 4, 3});
  EXPECT_THROW(ops::bmm(a5, false, b5, false, c5), Error) << "rank 5";
  Tensor b2({6, 3});
  EXPECT_THROW(ops::bmm(a, false, b2, false, c), Error) << "leading axes [2] vs []";
  Tensor da({2, 4, 6}), db({2, 6, 3}), da_bad({2, 6, 4});
  EXPECT_NO_THROW(ops::bmm_backward(a, false, b, false, c, 1.f, da, db));
  EXPECT_THROW(ops::bmm_backward(a, false, b, false, c, 1.f, da_bad, db), Error);
  EXPECT_THROW(ops::bmm_backward(a, false, b, false, c_bad, 1.f, da, db), Error);
}

// ---- Batched products in each precision

class BmmProducts : public ::testing::TestWithParam<ops::Precision> {};

TEST_P(BmmProducts, TensorsWithTransposesMatchNaiveOnTheOperandsAsRead) {
  const ops::Precision precision = GetParam();
  SKIP_UNLESS_SUPPORTED(precision);
  std::mt19937 gen(11);
  const int64_t B = 2, H = 3, M = 50, K = 64, N = 45;
  const double u = unit_roundoff(precision), tol = product_tol(K);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(combo_name({B, H}, ta, tb));
      const Tensor a = random_tensor(a_shape({B, H}, ta, M, K), gen);
      const Tensor b = random_tensor(b_shape({B, H}, tb, K, N), gen);
      Tensor c = garbage_tensor({B, H, M, N});
      ops::bmm(a, ta, b, tb, c, 0.125f, 0.f, precision);
      const auto want =
          naive_bmm(as_read(a, precision), ta, as_read(b, precision), tb, 0.125, {}, 0.0);
      EXPECT_TRUE(all_close(c, want, tol, tol));
      EXPECT_TRUE(within_rounding_bound(c, naive_bmm(a, ta, b, tb, 0.125, {}, 0.0),
                                        naive_bmm(absolute(a), ta, absolute(b), tb, 0.125, {}, 0.0),
                                        u, tol))
          << "against the unrounded operands";
      if (u > 0) {
        EXPECT_GT(max_abs_diff(naive_bmm(a, ta, b, tb, 0.125, {}, 0.0), want), 10 * tol);
      }
    }
}

TEST_P(BmmProducts, HeadViewsOfAFusedProjectionMatchNaive) {
  const ops::Precision precision = GetParam();
  SKIP_UNLESS_SUPPORTED(precision);
  // q·kᵀ per head read in place from qkv [B, T, 3·H·dh]; bf16 products also read the views of a
  // copy already rounded to bf16.
  std::mt19937 gen(12);
  const int64_t B = 2, T = 37, H = 3, dh = 64, d = H * dh;
  const Tensor qkv = random_tensor({B, T, 3 * d}, gen);
  Tensor qkv_b(qkv.shape(), DType::bf16);
  ops::round_to_bf16(qkv, qkv_b);
  const Tensor r = as_read(qkv, precision);
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
  std::vector<const Tensor*> sources = {&qkv};
  if (precision == ops::Precision::bf16) sources.push_back(&qkv_b);
  for (const Tensor* src : sources) {
    Tensor scores = garbage_tensor({B, H, T, T});
    ops::bmm(ops::heads_view(*src, H, dh, 0), ops::heads_view(*src, H, dh, 1).t(),
             ops::matrix_view(scores), 0.125f, 0.f, precision);
    EXPECT_TRUE(all_close(scores, want, product_tol(dh), product_tol(dh)))
        << dtype_name(src->dtype()) << " views";
  }
}

TEST_P(BmmProducts, BackwardMatchesNaiveOnTheOperandsAsRead) {
  const ops::Precision precision = GetParam();
  SKIP_UNLESS_SUPPORTED(precision);
  std::mt19937 gen(13);
  const int64_t B = 4, M = 33, K = 20, N = 70;
  const Tensor a = random_tensor({B, M, K}, gen), b = random_tensor({B, N, K}, gen);
  const Tensor dc = random_tensor({B, M, N}, gen);
  Tensor da = garbage_tensor({B, M, K}), db = garbage_tensor({B, N, K});
  ops::bmm_backward(a, false, b, true, dc, 0.5f, da, db, precision);
  // da = 0.5·dc·b, db = 0.5·dcᵀ·a on the operands as read.
  std::vector<double> wa, wb;
  naive_bmm_backward(as_read(a, precision), false, as_read(b, precision), true,
                     as_read(dc, precision), 0.5, wa, wb);
  EXPECT_TRUE(all_close(da, wa, product_tol(N), product_tol(N))) << "da";
  EXPECT_TRUE(all_close(db, wb, product_tol(M), product_tol(M))) << "db";
}

INSTANTIATE_TEST_SUITE_P(Precisions, BmmProducts, ::testing::ValuesIn(kPrecisions),
                         precision_case_name);

// ---- Threads, CPU and the primitive cache
// --------------------------------------------------------------

TEST(Ops, PrimitivesAreCreatedOncePerShape) {
  std::mt19937 gen(18);
  Tensor x = random_tensor({9, 11}, gen), w = random_tensor({4, 11}, gen), y({9, 4});
  ops::linear_forward(x, w, Tensor(), y);
  const int64_t after_first = ops::primitive_count();
  EXPECT_GT(after_first, 0);
  for (int i = 0; i < 3; ++i) ops::linear_forward(x, w, Tensor(), y);
  EXPECT_EQ(ops::primitive_count(), after_first) << "same shape must reuse the primitive";
  Tensor x2 = random_tensor({10, 11}, gen), y2({10, 4});
  ops::linear_forward(x2, w, Tensor(), y2);
  EXPECT_GT(ops::primitive_count(), after_first) << "a new shape needs a new primitive";

  Tensor a = random_tensor({2, 5, 7}, gen), b = random_tensor({2, 7, 3}, gen), c({2, 5, 3});
  ops::bmm(a, false, b, false, c);
  const int64_t after_bmm = ops::primitive_count();
  ops::bmm(a, false, b, false, c);
  ops::bmm(a, false, b, false, c);
  EXPECT_EQ(ops::primitive_count(), after_bmm);
}

TEST(Ops, ReportsCpuIsaAndBf16Support) {
  const std::string isa = ops::cpu_isa();
  EXPECT_FALSE(isa.empty());
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string text((std::istreambuf_iterator<char>(cpuinfo)),
                         std::istreambuf_iterator<char>());
  if (text.find("avx512_bf16") != std::string::npos) {
    EXPECT_TRUE(ops::bf16_supported()) << "the CPU has avx512_bf16; oneDNN ISA " << isa;
  }
  RecordProperty("cpu_isa", isa);
}

// Linear and batched matrix products against naive double loops and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iomanip>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/ops.h"
#include "op_test_util.h"

using namespace vitk;
using namespace vitk::test;

namespace {

// Tolerance for a dot product of length k in f32 (relative and absolute).
double product_tol(int64_t k) {
  return 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
}

// y [M, N] = x [M, K] · w [N, K]ᵀ (+ b [N]), in double.
std::vector<double> naive_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t K = x.dim(-1), M = x.numel() / K, N = w.dim(0);
  std::vector<double> xd = to_double(x), wd = to_double(w), y(static_cast<size_t>(M * N));
  std::vector<double> bd = b.empty() ? std::vector<double>(N, 0.0) : to_double(b);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bd[n];
      for (int64_t k = 0; k < K; ++k) s += xd[m * K + k] * wd[n * K + k];
      y[m * N + n] = s;
    }
  return y;
}

// dx [M, K] = dy [M, N] · w [N, K].
std::vector<double> naive_linear_dx(const Tensor& dy, const Tensor& w) {
  const int64_t N = w.dim(0), K = w.dim(1), M = dy.numel() / N;
  std::vector<double> dyd = to_double(dy), wd = to_double(w), dx(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += dyd[m * N + n] * wd[n * K + k];
      dx[m * K + k] = s;
    }
  return dx;
}

// dw [N, K] = dyᵀ · x, db [N] = Σ_rows dy.
void naive_linear_dw(const Tensor& x, const Tensor& dy, std::vector<double>& dw,
                     std::vector<double>& db) {
  const int64_t K = x.dim(-1), M = x.numel() / K, N = dy.dim(-1);
  std::vector<double> xd = to_double(x), dyd = to_double(dy);
  dw.assign(static_cast<size_t>(N * K), 0.0);
  db.assign(static_cast<size_t>(N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      db[n] += dyd[m * N + n];
      for (int64_t k = 0; k < K; ++k) dw[n * K + k] += dyd[m * N + n] * xd[m * K + k];
    }
}

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b, double s = 1) {
  std::vector<double> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + s * b[i];
  return r;
}

Shape batched(const Shape& batch, int64_t rows, int64_t cols) {
  Shape s = batch;
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

// Stored shapes of a and b for op(a) [M, K], op(b) [K, N].
Shape a_shape(const Shape& batch, bool ta, int64_t M, int64_t K) {
  return ta ? batched(batch, K, M) : batched(batch, M, K);
}
Shape b_shape(const Shape& batch, bool tb, int64_t K, int64_t N) {
  return tb ? batched(batch, N, K) : batched(batch, K, N);
}

// Element (i, j) of op(t) for matrix `bt` of a stored [R, C] batch.
struct OpView {
  const std::vector<double>& v;
  bool t;
  int64_t rows, cols;  // of op(t)
  double at(int64_t bt, int64_t i, int64_t j) const {
    const int64_t base = bt * rows * cols;
    return t ? v[base + j * rows + i] : v[base + i * cols + j];
  }
};

struct BmmDims {
  int64_t batch, M, K, N;
};

BmmDims bmm_dims(const Tensor& a, bool ta, const Tensor& b, bool tb) {
  const int64_t M = ta ? a.dim(-1) : a.dim(-2), K = ta ? a.dim(-2) : a.dim(-1);
  const int64_t N = tb ? b.dim(-2) : b.dim(-1);
  return {a.numel() / (M * K), M, K, N};
}

// alpha · op(a) · op(b) + beta · c0.
std::vector<double> naive_bmm(const Tensor& a, bool ta, const Tensor& b, bool tb, double alpha,
                              const std::vector<double>& c0, double beta) {
  const BmmDims d = bmm_dims(a, ta, b, tb);
  std::vector<double> ad = to_double(a), bd = to_double(b);
  OpView A{ad, ta, d.M, d.K}, B{bd, tb, d.K, d.N};
  std::vector<double> c(static_cast<size_t>(d.batch * d.M * d.N));
  for (int64_t bt = 0; bt < d.batch; ++bt)
    for (int64_t m = 0; m < d.M; ++m)
      for (int64_t n = 0; n < d.N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < d.K; ++k) s += A.at(bt, m, k) * B.at(bt, k, n);
        const size_t i = static_cast<size_t>((bt * d.M + m) * d.N + n);
        c[i] = alpha * s + (beta != 0 ? beta * c0[i] : 0.0);
      }
  return c;
}

// Gradients of c = alpha · op(a) · op(b) in a's and b's stored layouts.
void naive_bmm_backward(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& dc,
                        double alpha, std::vector<double>& da, std::vector<double>& db) {
  const BmmDims d = bmm_dims(a, ta, b, tb);
  std::vector<double> ad = to_double(a), bd = to_double(b), dcd = to_double(dc);
  OpView A{ad, ta, d.M, d.K}, B{bd, tb, d.K, d.N};
  da.assign(ad.size(), 0.0);
  db.assign(bd.size(), 0.0);
  for (int64_t bt = 0; bt < d.batch; ++bt) {
    const double* g = dcd.data() + bt * d.M * d.N;
    for (int64_t m = 0; m < d.M; ++m)
      for (int64_t k = 0; k < d.K; ++k) {
        double s = 0;  // d op(a)[m, k]
        for (int64_t n = 0; n < d.N; ++n) s += g[m * d.N + n] * B.at(bt, k, n);
        const int64_t idx = ta ? k * d.M + m : m * d.K + k;
        da[bt * d.M * d.K + idx] = alpha * s;
      }
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t n = 0; n < d.N; ++n) {
        double s = 0;  // d op(b)[k, n]
        for (int64_t m = 0; m < d.M; ++m) s += A.at(bt, m, k) * g[m * d.N + n];
        const int64_t idx = tb ? n * d.K + k : k * d.N + n;
        db[bt * d.K * d.N + idx] = alpha * s;
      }
  }
}

const std::vector<Shape> kBatches = {{}, {3}, {2, 3}};  // ranks 2, 3 and 4

std::string combo_name(const Shape& batch, bool ta, bool tb) {
  return "rank " + std::to_string(batch.size() + 2) + " trans_a " + std::to_string(ta) +
         " trans_b " + std::to_string(tb);
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
  std::mt19937 gen(10);
  const int64_t M = 7, K = 13, N = 5;
  Tensor x16 = to_bf16(random_tensor({M, K}, gen)), w16 = to_bf16(random_tensor({N, K}, gen));
  Tensor b = random_tensor({N}, gen);
  Tensor y({M, N});
  ops::linear_forward(x16, w16, b, y);
  EXPECT_TRUE(all_close(y, naive_linear(x16, w16, b), 1e-4, 1e-4));
}

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

#pragma once
// Naive double-precision references for the matrix products (ops::linear_*, ops::bmm*) and what
// tests of a product in a precision need: the operands as the precision reads them and the bound
// its rounding gives. Shared by common/test_ops_linear.cpp and common/test_ops_matmul.cpp.
//
// A product in a precision is checked twice:
// 1. On the operands as that precision reads them (rounded to bf16 for bf16 products, unchanged
//    for f32): the product of two bf16 values is exact in f32, so the only difference is the f32
//    summation order, and the tolerance is the f32 one. In bf16, each such check also shows that
//    it could tell: the same reference on unrounded operands is further away.
// 2. On the unrounded operands, with the bound that the precision's rounding gives: rounding to
//    nearest changes a value by at most u of itself (bf16: 8 significant bits, u = 2⁻⁸; f32: 0
//    here, its rounding is in the summation tolerance), so each term x·w moves by at most
//    (2u + u²)·|x·w|, and the sum by (2u + u²)·Σ|x·w|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/ops/ops.h"
#include "common/tensor.h"
#include "util/op_test_util.h"

namespace vitk::test {

// Tolerance for a dot product of length k in f32 (relative and absolute).
inline double product_tol(int64_t k) {
  return 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
}

// y [M, N] = x [M, K] · w [N, K]ᵀ (+ b [N]), in double.
inline std::vector<double> naive_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
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
inline std::vector<double> naive_linear_dx(const Tensor& dy, const Tensor& w) {
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
inline void naive_linear_dw(const Tensor& x, const Tensor& dy, std::vector<double>& dw,
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

inline std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b,
                                double s = 1) {
  std::vector<double> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + s * b[i];
  return r;
}

inline Shape batched(const Shape& batch, int64_t rows, int64_t cols) {
  Shape s = batch;
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

// Stored shapes of a and b for op(a) [M, K], op(b) [K, N].
inline Shape a_shape(const Shape& batch, bool ta, int64_t M, int64_t K) {
  return ta ? batched(batch, K, M) : batched(batch, M, K);
}
inline Shape b_shape(const Shape& batch, bool tb, int64_t K, int64_t N) {
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

inline BmmDims bmm_dims(const Tensor& a, bool ta, const Tensor& b, bool tb) {
  const int64_t M = ta ? a.dim(-1) : a.dim(-2), K = ta ? a.dim(-2) : a.dim(-1);
  const int64_t N = tb ? b.dim(-2) : b.dim(-1);
  return {a.numel() / (M * K), M, K, N};
}

// alpha · op(a) · op(b) + beta · c0.
inline std::vector<double> naive_bmm(const Tensor& a, bool ta, const Tensor& b, bool tb,
                                     double alpha, const std::vector<double>& c0, double beta) {
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
inline void naive_bmm_backward(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& dc,
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

// ---- Precisions

// A tensor as a product in `precision` reads it: its values rounded to bf16, or unchanged.
inline Tensor as_read(const Tensor& t, ops::Precision precision) {
  if (precision == ops::Precision::f32) return t;
  Tensor out(t.shape());
  const float* s = t.f32();
  float* d = out.f32();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = bf16_to_f32(f32_to_bf16(s[i]));
  return out;
}

// The unit roundoff of the operands' rounding: bf16 keeps 8 significant bits.
inline double unit_roundoff(ops::Precision precision) {
  return precision == ops::Precision::bf16 ? 1.0 / 256 : 0.0;
}

// |got − exact| ≤ (2u + u²)·Σ|x·w| + the f32 summation tolerance, elementwise, where `magnitude`
// holds Σ|x·w| of each output (the reference run on |x| and |w|).
inline ::testing::AssertionResult within_rounding_bound(const Tensor& got,
                                                        const std::vector<double>& exact,
                                                        const std::vector<double>& magnitude,
                                                        double u, double f32_tol) {
  if (static_cast<size_t>(got.numel()) != exact.size() || exact.size() != magnitude.size())
    return ::testing::AssertionFailure() << "sizes differ";
  const std::vector<double> g = to_double(got);
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = (2 * u + u * u) * magnitude[i] + f32_tol * (1 + std::fabs(exact[i]));
    const double err = std::fabs(g[i] - exact[i]);
    if (!(err <= bound))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << g[i] << ", exact " << exact[i] << ", |error| " << err
             << " > bound " << bound << " (Σ|x·w| = " << magnitude[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

inline Tensor absolute(const Tensor& t) {
  Tensor out(t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.f32()[i] = std::fabs(t.f32()[i]);
  return out;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// dw0 + dyᵀ·x and db0 + Σ_rows dy: what a weight-gradient call leaves in dw and db.
inline std::vector<double> accumulated_dw(const Tensor& x, const Tensor& dy, const Tensor& dw0) {
  std::vector<double> gw, gb;
  naive_linear_dw(x, dy, gw, gb);
  return plus(to_double(dw0), gw);
}
inline std::vector<double> accumulated_db(const Tensor& dy, const Tensor& db0) {
  std::vector<double> db = to_double(db0);
  const std::vector<double> g = to_double(dy);
  for (size_t i = 0; i < g.size(); ++i) db[i % db.size()] += g[i];
  return db;
}

}  // namespace vitk::test

// Layer normalization over the last axis, forward and backward, as plain vectorised loops.
// (oneDNN 2.6's layer normalization would overwrite the scale and shift gradients instead of
// adding to them, and needs its own statistics layout.)
#include <omp.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/ops/kernel_functions.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"
#include "common/ops/vmath.h"

namespace vitk::ops::VITK_ISA_NAMESPACE {
namespace {

void check_vec(const char* op, const Tensor& t, int64_t n, const char* name) {
  if (t.dtype() != DType::f32 || t.numel() != n)
    throw Error(std::string(op) + ": " + name + " " + shape_str(t.shape()) + " should be f32 [" +
                std::to_string(n) + "]");
}

// y = (x − mean) · rstd · g + b per row of x [rows, n], y f32 or bf16 (detail::store); mean and
// rstd written when mp and sp are given.
template <typename Out>
void normalize_rows(const float* xp, const float* g, const float* b, float eps, int64_t rows,
                    int64_t n, Out* yp, float* mp, float* sp) {
  const bool save = mp != nullptr;
#pragma omp parallel for schedule(static) if (rows * n > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xp + r * n;
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) sum += xr[j];
    const float mu = sum / static_cast<float>(n);
    float sq = 0.f;  // two passes: the variance of centred values does not cancel
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < n; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    const float rs = 1.f / std::sqrt(sq / static_cast<float>(n) + eps);
    Out* yr = yp + r * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) detail::store(yr + j, (xr[j] - mu) * rs * g[j] + b[j]);
    if (save) mp[r] = mu, sp[r] = rs;
  }
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y, Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm_forward";
  if (x.shape() != y.shape() || x.rank() < 1 || x.dtype() != DType::f32 ||
      (y.dtype() != DType::f32 && y.dtype() != DType::bf16))
    throw Error(std::string(op) + ": x " + dtype_name(x.dtype()) + " " + shape_str(x.shape()) +
                " and y " + dtype_name(y.dtype()) + " " + shape_str(y.shape()) +
                ": want f32 x and an f32 or bf16 y of its shape");
  const int64_t n = x.dim(-1), rows = n ? x.numel() / n : 0;
  check_vec(op, gamma, n, "gamma");
  check_vec(op, beta, n, "beta");
  const bool save = !mean.empty();
  if (save) {
    check_vec(op, mean, rows, "mean");
    check_vec(op, rstd, rows, "rstd");
  }
  profile::Scope scope("layernorm_forward", rows, n);
  float* mp = save ? mean.f32() : nullptr;
  float* sp = save ? rstd.f32() : nullptr;
  if (y.dtype() == DType::bf16)  // the input of a bf16 product, rounded as it is written
    normalize_rows(x.f32(), gamma.f32(), beta.f32(), eps, rows, n, y.bf16(), mp, sp);
  else
    normalize_rows(x.f32(), gamma.f32(), beta.f32(), eps, rows, n, y.f32(), mp, sp);
}

void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta, const Tensor& add) {
  const char* op = "layernorm_backward";
  if (x.shape() != dy.shape() || x.rank() < 1 || (!dx.empty() && dx.shape() != x.shape()))
    throw Error(std::string(op) + ": x " + shape_str(x.shape()) + ", dy " + shape_str(dy.shape()) +
                " and dx " + shape_str(dx.shape()) + " differ");
  const int64_t n = x.dim(-1), rows = n ? x.numel() / n : 0;
  check_vec(op, gamma, n, "gamma");
  check_vec(op, mean, rows, "mean");
  check_vec(op, rstd, rows, "rstd");
  if (!add.empty() && (add.shape() != x.shape() || add.dtype() != DType::f32 || dx.empty()))
    throw Error(std::string(op) + ": add " + shape_str(add.shape()) + " should be f32 " +
                shape_str(x.shape()) + " with a dx");
  const bool want_dg = !dgamma.empty(), want_db = !dbeta.empty();
  if (want_dg) check_vec(op, dgamma, n, "dgamma");
  if (want_db) check_vec(op, dbeta, n, "dbeta");
  profile::Scope scope("layernorm_backward", rows, n);
  const float* xp = x.f32();
  const float* g = gamma.f32();
  const float* mp = mean.f32();
  const float* sp = rstd.f32();
  const float* gp = dy.f32();
  float* dxp = dx.empty() ? nullptr : dx.f32();
  const float* ap = add.empty() ? nullptr : add.f32();

  // Per-thread partial sums for dgamma and dbeta, reduced in thread order: deterministic for a
  // given thread count.
  const int threads = (rows * n > 16384) ? omp_get_max_threads() : 1;
  static std::vector<float> partial;
  partial.assign(static_cast<size_t>(threads) * 2 * n, 0.f);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    float* pg = partial.data() + static_cast<size_t>(t) * 2 * n;
    float* pb = pg + n;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = xp + r * n;
      const float* gr = gp + r * n;
      const float mu = mp[r], rs = sp[r];
      float sum_g = 0.f, sum_gx = 0.f;  // Σ dxhat and Σ dxhat·xhat
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t j = 0; j < n; ++j) {
        const float xhat = (xr[j] - mu) * rs;
        const float dxhat = gr[j] * g[j];
        sum_g += dxhat;
        sum_gx += dxhat * xhat;
        pg[j] += gr[j] * xhat;
        pb[j] += gr[j];
      }
      if (dxp) {
        float* dr = dxp + r * n;
        const float inv_n = 1.f / static_cast<float>(n);
        const float mg = sum_g * inv_n, mgx = sum_gx * inv_n;
        if (ap) {
          const float* ar = ap + r * n;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) {
            const float xhat = (xr[j] - mu) * rs;
            dr[j] = ar[j] + rs * (gr[j] * g[j] - mg - xhat * mgx);
          }
        } else {
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) {
            const float xhat = (xr[j] - mu) * rs;
            dr[j] = rs * (gr[j] * g[j] - mg - xhat * mgx);
          }
        }
      }
    }
  }
  float* dg = want_dg ? dgamma.f32() : nullptr;
  float* db = want_db ? dbeta.f32() : nullptr;
  for (int t = 0; t < threads; ++t) {
    const float* pg = partial.data() + static_cast<size_t>(t) * 2 * n;
    const float* pb = pg + n;
    for (int64_t j = 0; j < n; ++j) {
      if (dg) dg[j] += pg[j];
      if (db) db[j] += pb[j];
    }
  }
}

}  // namespace vitk::ops::VITK_ISA_NAMESPACE

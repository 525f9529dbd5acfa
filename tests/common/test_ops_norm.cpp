// Softmax (with additive masks) and layer normalization against naive double loops and finite
// differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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

constexpr float kInf = std::numeric_limits<float>::infinity();

// Flat index into a broadcast mask for flat index i of a tensor of shape `shape`.
int64_t broadcast_index(const Shape& shape, const Shape& mask_shape, int64_t i) {
  int64_t idx = 0, mask_stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const int64_t coord = i % shape[d];
    i /= shape[d];
    if (mask_shape[d] != 1) idx += coord * mask_stride;
    mask_stride *= mask_shape[d];
  }
  return idx;
}

// softmax(x + mask) over the last axis in double; a row with no finite entry gives zeros.
std::vector<double> naive_softmax(const Tensor& x, const Tensor& mask) {
  const int64_t N = x.dim(-1), rows = x.numel() / N;
  std::vector<double> xd = to_double(x), y(xd.size());
  std::vector<double> md = mask.empty() ? std::vector<double>() : to_double(mask);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> z(static_cast<size_t>(N));
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < N; ++j) {
      const int64_t i = r * N + j;
      z[j] = xd[i] + (mask.empty() ? 0.0 : md[broadcast_index(x.shape(), mask.shape(), i)]);
      mx = std::max(mx, z[j]);
    }
    if (std::isinf(mx)) {
      for (int64_t j = 0; j < N; ++j) y[r * N + j] = 0;
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < N; ++j) sum += z[j] = std::exp(z[j] - mx);
    for (int64_t j = 0; j < N; ++j) y[r * N + j] = z[j] / sum;
  }
  return y;
}

// dx = y ⊙ (dy − Σ dy ⊙ y); with_sum = false drops the Σ term (a deliberately wrong formula).
std::vector<double> naive_softmax_backward(const std::vector<double>& y, const Tensor& dy,
                                           int64_t N, bool with_sum = true) {
  std::vector<double> g = to_double(dy), dx(y.size());
  for (size_t r = 0; r < y.size() / N; ++r) {
    double dot = 0;
    for (int64_t j = 0; j < N; ++j) dot += g[r * N + j] * y[r * N + j];
    if (!with_sum) dot = 0;
    for (int64_t j = 0; j < N; ++j) dx[r * N + j] = y[r * N + j] * (g[r * N + j] - dot);
  }
  return dx;
}

Tensor padding_mask(int64_t B, int64_t T, const std::vector<int64_t>& lengths) {
  Tensor m({B, 1, 1, T});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) m.f32()[b * T + t] = t < lengths[b] ? 0.f : -kInf;
  return m;
}

Tensor causal_mask(int64_t T) {
  Tensor m({1, 1, T, T});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) m.f32()[i * T + j] = j <= i ? 0.f : -kInf;
  return m;
}

// Softmax outputs are in [0, 1]: an absolute tolerance is the meaningful one.
constexpr double kSoftmaxAtol = 2e-6, kSoftmaxRtol = 1e-5;

struct LnRef {
  std::vector<double> y, mean, rstd, xhat;
};

LnRef naive_layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  const int64_t N = x.dim(-1), M = x.numel() / N;
  std::vector<double> xd = to_double(x), g = to_double(gamma), b = to_double(beta);
  LnRef r;
  r.y.resize(xd.size());
  r.xhat.resize(xd.size());
  for (int64_t m = 0; m < M; ++m) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < N; ++j) mean += xd[m * N + j];
    mean /= N;
    for (int64_t j = 0; j < N; ++j) var += (xd[m * N + j] - mean) * (xd[m * N + j] - mean);
    var /= N;  // biased, as torch.nn.LayerNorm
    const double rstd = 1 / std::sqrt(var + eps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    for (int64_t j = 0; j < N; ++j) {
      const double xh = (xd[m * N + j] - mean) * rstd;
      r.xhat[m * N + j] = xh;
      r.y[m * N + j] = xh * g[j] + b[j];
    }
  }
  return r;
}

// dx = rstd · (dxhat − mean(dxhat) − xhat · mean(dxhat ⊙ xhat)), dxhat = dy ⊙ gamma;
// drop_term = 1 or 2 removes one of the two mean terms (a deliberately wrong formula).
void naive_layernorm_backward(const LnRef& ref, const Tensor& gamma, const Tensor& dy,
                              std::vector<double>& dx, std::vector<double>& dgamma,
                              std::vector<double>& dbeta, int drop_term = 0) {
  const int64_t N = gamma.numel(), M = dy.numel() / N;
  std::vector<double> g = to_double(gamma), d = to_double(dy);
  dx.assign(d.size(), 0.0);
  dgamma.assign(N, 0.0);
  dbeta.assign(N, 0.0);
  for (int64_t m = 0; m < M; ++m) {
    double mean_dxhat = 0, mean_dxhat_xhat = 0;
    for (int64_t j = 0; j < N; ++j) {
      const double dxh = d[m * N + j] * g[j];
      mean_dxhat += dxh;
      mean_dxhat_xhat += dxh * ref.xhat[m * N + j];
      dgamma[j] += d[m * N + j] * ref.xhat[m * N + j];
      dbeta[j] += d[m * N + j];
    }
    mean_dxhat /= N;
    mean_dxhat_xhat /= N;
    if (drop_term == 1) mean_dxhat = 0;
    if (drop_term == 2) mean_dxhat_xhat = 0;
    for (int64_t j = 0; j < N; ++j) {
      const double dxh = d[m * N + j] * g[j];
      dx[m * N + j] = ref.rstd[m] * (dxh - mean_dxhat - ref.xhat[m * N + j] * mean_dxhat_xhat);
    }
  }
}

}  // namespace

// ---- Softmax
// -------------------------------------------------------------------------------------

VITK_AT_EVERY_ISA_LEVEL(Softmax);

TEST_P(Softmax, ForwardMatchesNaive) {
  std::mt19937 gen(101);
  for (const Shape& shape : {Shape{7, 13}, Shape{2, 3, 5, 11}, Shape{4, 1}, Shape{3, 300}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor x = random_tensor(shape, gen, -5.f, 5.f);
    Tensor y = garbage_tensor(shape);
    ops::softmax_forward(x, Tensor(), y);
    EXPECT_TRUE(all_close(y, naive_softmax(x, Tensor()), kSoftmaxAtol, kSoftmaxRtol));
    const int64_t N = shape.back();
    for (int64_t r = 0; r < rows_of(y); ++r) {
      double s = 0;
      for (int64_t j = 0; j < N; ++j) s += y.f32()[r * N + j];
      EXPECT_NEAR(s, 1.0, 1e-5) << "row " << r;
    }
  }
}

TEST_P(Softmax, ForwardIsStableForLargeLogits) {
  std::mt19937 gen(102);
  Tensor x = random_tensor({5, 17}, gen, -3.f, 3.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += (i / 17) % 2 ? 1000.f : -1000.f;
  Tensor y({5, 17});
  ops::softmax_forward(x, Tensor(), y);
  EXPECT_TRUE(all_close(y, naive_softmax(x, Tensor()), kSoftmaxAtol, kSoftmaxRtol));
}

TEST_P(Softmax, ForwardInPlace) {
  std::mt19937 gen(103);
  Tensor x = random_tensor({6, 9}, gen, -4.f, 4.f);
  const std::vector<double> want = naive_softmax(x, Tensor());
  ops::softmax_forward(x, Tensor(), x);
  EXPECT_TRUE(all_close(x, want, kSoftmaxAtol, kSoftmaxRtol));
}

TEST_P(Softmax, PaddingMaskBroadcastsOverHeadsAndQueries) {
  std::mt19937 gen(104);
  const int64_t B = 2, H = 3, Tq = 4, Tk = 6;
  Tensor x = random_tensor({B, H, Tq, Tk}, gen, -3.f, 3.f);
  Tensor mask = padding_mask(B, Tk, {4, 2});
  Tensor y = garbage_tensor(x.shape());
  ops::softmax_forward(x, mask, y);
  EXPECT_TRUE(all_close(y, naive_softmax(x, mask), kSoftmaxAtol, kSoftmaxRtol));
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t b = i / (H * Tq * Tk), t = i % Tk;
    if (t >= (b == 0 ? 4 : 2)) {
      EXPECT_EQ(y.f32()[i], 0.f) << "masked position " << i;
    }
  }
}

TEST_P(Softmax, CausalMask) {
  std::mt19937 gen(105);
  const int64_t B = 2, H = 3, T = 5;
  Tensor x = random_tensor({B, H, T, T}, gen, -3.f, 3.f);
  Tensor mask = causal_mask(T);
  Tensor y = garbage_tensor(x.shape());
  ops::softmax_forward(x, mask, y);
  EXPECT_TRUE(all_close(y, naive_softmax(x, mask), kSoftmaxAtol, kSoftmaxRtol));
  for (int64_t r = 0; r < B * H * T; ++r) {
    const int64_t i = r % T;
    for (int64_t j = i + 1; j < T; ++j) EXPECT_EQ(y.f32()[r * T + j], 0.f) << "future position";
    if (i == 0) {
      EXPECT_NEAR(y.f32()[r * T], 1.f, 1e-6) << "first query sees only itself";
    }
  }
}

TEST_P(Softmax, FiniteAdditiveMaskBroadcastsOnAnyAxis) {
  std::mt19937 gen(106);
  const Shape shape{2, 3, 4, 6};
  Tensor x = random_tensor(shape, gen, -3.f, 3.f);
  for (const Shape& ms :
       {Shape{1, 3, 1, 6}, Shape{2, 1, 4, 1}, Shape{2, 3, 4, 6}, Shape{1, 1, 1, 1}}) {
    SCOPED_TRACE("mask " + shape_str(ms));
    Tensor mask = random_tensor(ms, gen, -4.f, 4.f);
    Tensor y(shape);
    ops::softmax_forward(x, mask, y);
    EXPECT_TRUE(all_close(y, naive_softmax(x, mask), kSoftmaxAtol, kSoftmaxRtol));
  }
  // A rank-2 input with a rank-2 mask.
  Tensor x2 = random_tensor({5, 7}, gen), m2 = random_tensor({1, 7}, gen), y2({5, 7});
  ops::softmax_forward(x2, m2, y2);
  EXPECT_TRUE(all_close(y2, naive_softmax(x2, m2), kSoftmaxAtol, kSoftmaxRtol));
}

TEST_P(Softmax, FullyMaskedRowGivesZerosNotNaN) {
  std::mt19937 gen(107);
  const int64_t B = 2, H = 2, Tq = 3, Tk = 5;
  Tensor x = random_tensor({B, H, Tq, Tk}, gen);
  Tensor mask = padding_mask(B, Tk, {3, 0});  // batch 1 sees nothing
  Tensor y = garbage_tensor(x.shape());
  ops::softmax_forward(x, mask, y);
  const int64_t half = y.numel() / 2;
  for (int64_t i = half; i < y.numel(); ++i) ASSERT_EQ(y.f32()[i], 0.f) << "element " << i;
  EXPECT_TRUE(all_close(y, naive_softmax(x, mask), kSoftmaxAtol, kSoftmaxRtol));

  // A single fully masked row inside a causal-style mask, and its backward.
  Tensor m2 = causal_mask(4);
  for (int64_t j = 0; j < 4; ++j) m2.f32()[j] = -kInf;  // query 0 sees nothing
  Tensor x2 = random_tensor({1, 2, 4, 4}, gen), y2 = garbage_tensor({1, 2, 4, 4});
  ops::softmax_forward(x2, m2, y2);
  EXPECT_TRUE(all_close(y2, naive_softmax(x2, m2), kSoftmaxAtol, kSoftmaxRtol));
  Tensor dy = random_tensor(y2.shape(), gen), dx = garbage_tensor(y2.shape());
  ops::softmax_backward(y2, dy, dx);
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_EQ(dx.f32()[j], 0.f);
    EXPECT_EQ(dx.f32()[16 + j], 0.f);
  }
}

TEST_P(Softmax, ShapeMismatchThrows) {
  Tensor x({2, 3, 4, 6}), y({2, 3, 4, 6});
  EXPECT_NO_THROW(ops::softmax_forward(x, Tensor({2, 1, 1, 6}), y));
  Tensor y_bad({2, 3, 4, 5}), dy({2, 3, 4, 6}), dx({2, 3, 4, 6});
  EXPECT_THROW(ops::softmax_forward(x, Tensor(), y_bad), Error) << "y shape";
  EXPECT_THROW(ops::softmax_forward(x, Tensor({2, 1, 6}), y), Error) << "mask rank 3";
  EXPECT_THROW(ops::softmax_forward(x, Tensor({2, 2, 1, 6}), y), Error) << "mask axis 1 is 2";
  EXPECT_THROW(ops::softmax_forward(x, Tensor({2, 1, 1, 5}), y), Error) << "mask last axis 5";
  EXPECT_THROW(ops::softmax_forward(x, Tensor({2, 1, 1, 6}, DType::bf16), y), Error) << "mask bf16";
  EXPECT_NO_THROW(ops::softmax_backward(y, dy, dx));
  EXPECT_THROW(ops::softmax_backward(y, y_bad, dx), Error) << "dy shape";
  EXPECT_THROW(ops::softmax_backward(y, dy, y_bad), Error) << "dx shape";
}

TEST_P(Softmax, LargeMaskedInputUsesParallelPath) {
  std::mt19937 gen(112);
  const int64_t B = 2, H = 4, T = 72;  // 41472 scores: above any serial threshold
  Tensor x = random_tensor({B, H, T, T}, gen, -3.f, 3.f);
  for (const Tensor& mask : {causal_mask(T), padding_mask(B, T, {50, 9})}) {
    SCOPED_TRACE("mask " + shape_str(mask.shape()));
    Tensor y = garbage_tensor(x.shape());
    ops::softmax_forward(x, mask, y);
    const std::vector<double> want = naive_softmax(x, mask);
    EXPECT_TRUE(all_close(y, want, kSoftmaxAtol, kSoftmaxRtol));
    Tensor dy = random_tensor(x.shape(), gen), dx = garbage_tensor(x.shape());
    ops::softmax_backward(y, dy, dx);
    EXPECT_TRUE(all_close(dx, naive_softmax_backward(want, dy, T), 1e-6, 1e-5));
  }
}

TEST_P(Softmax, BackwardMatchesNaiveAndOverwrites) {
  std::mt19937 gen(108);
  for (const Shape& shape : {Shape{7, 13}, Shape{2, 3, 5, 11}, Shape{2, 300}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor x = random_tensor(shape, gen, -3.f, 3.f), y(shape);
    ops::softmax_forward(x, Tensor(), y);
    Tensor dy = random_tensor(shape, gen), dx = garbage_tensor(shape);
    ops::softmax_backward(y, dy, dx);
    const std::vector<double> want = naive_softmax_backward(to_double(y), dy, shape.back());
    EXPECT_TRUE(all_close(dx, want, 1e-6, 1e-5));
    // In place: dx is dy.
    ops::softmax_backward(y, dy, dy);
    EXPECT_TRUE(all_close(dy, want, 1e-6, 1e-5)) << "dx aliasing dy";
  }
}

TEST_P(Softmax, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(109);
  Tensor x = random_tensor({3, 7}, gen, -2.f, 2.f), y({3, 7});
  Tensor w = random_tensor({3, 7}, gen);
  auto loss = [&] {
    ops::softmax_forward(x, Tensor(), y);
    return weighted_sum(y, w);
  };
  loss();
  Tensor dx({3, 7});
  ops::softmax_backward(y, w, dx);
  FdOptions opt;
  opt.atol = 5e-4;
  EXPECT_GRAD_OK(check_gradient("dx", x, dx, loss, opt));
}

TEST_P(Softmax, MaskedBackwardMatchesFiniteDifferences) {
  std::mt19937 gen(110);
  const int64_t T = 5;
  Tensor x = random_tensor({1, 2, T, T}, gen, -2.f, 2.f), y(x.shape());
  Tensor mask = causal_mask(T);
  Tensor w = random_tensor(x.shape(), gen);
  auto loss = [&] {
    ops::softmax_forward(x, mask, y);
    return weighted_sum(y, w);
  };
  loss();
  Tensor dx = garbage_tensor(x.shape());
  ops::softmax_backward(y, w, dx);
  FdOptions opt;
  opt.atol = 5e-4;
  opt.skip = [&](int64_t i) { return mask.f32()[i % (T * T)] != 0.f; };
  EXPECT_GRAD_OK(check_gradient("dx", x, dx, loss, opt));
  for (int64_t i = 0; i < dx.numel(); ++i)
    if (opt.skip(i)) {
      EXPECT_EQ(dx.f32()[i], 0.f) << "masked element " << i;
    }
}

TEST_P(Softmax, FiniteDifferenceCheckRejectsWrongBackward) {
  // The gradient check used above must fail for dx = y ⊙ dy (the Σ term forgotten).
  std::mt19937 gen(111);
  Tensor x = random_tensor({3, 7}, gen, -2.f, 2.f), y({3, 7});
  Tensor w = random_tensor({3, 7}, gen);
  auto loss = [&] {
    ops::softmax_forward(x, Tensor(), y);
    return weighted_sum(y, w);
  };
  const std::vector<double> yd = naive_softmax(x, Tensor());
  FdOptions opt;
  opt.atol = 5e-4;
  EXPECT_TRUE(check_gradient("right", x, naive_softmax_backward(yd, w, 7), loss, opt).ok());
  EXPECT_FALSE(check_gradient("wrong", x, naive_softmax_backward(yd, w, 7, false), loss, opt).ok());
}

// ---- Layer normalization
// ----------------------------------------------------------------------------

VITK_AT_EVERY_ISA_LEVEL(LayerNorm);

TEST_P(LayerNorm, ForwardMatchesNaiveAndSavesStatistics) {
  std::mt19937 gen(201);
  struct Case {
    Shape shape;
    float eps, spread;
  };
  for (const Case& c : {Case{{7, 13}, 1e-5f, 2.f}, Case{{2, 3, 37}, 1e-5f, 1.f},
                        Case{{5, 768}, 1e-6f, 3.f}, Case{{6, 10}, 0.1f, 0.3f}}) {
    SCOPED_TRACE(shape_str(c.shape) + " eps " + std::to_string(c.eps));
    const int64_t N = c.shape.back(), M = shape_numel(c.shape) / N;
    Tensor x = random_tensor(c.shape, gen, -c.spread, c.spread);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += 0.5f * static_cast<float>(i / N % 3);
    Tensor gamma = random_tensor({N}, gen, 0.5f, 1.5f), beta = random_tensor({N}, gen);
    Tensor y = garbage_tensor(c.shape), mean = garbage_tensor({M}), rstd = garbage_tensor({M});
    ops::layernorm_forward(x, gamma, beta, c.eps, y, mean, rstd);
    const LnRef ref = naive_layernorm(x, gamma, beta, c.eps);
    EXPECT_TRUE(all_close(y, ref.y, 1e-5, 1e-5)) << "y";
    EXPECT_TRUE(all_close(mean, ref.mean, 1e-6, 1e-6)) << "mean";
    EXPECT_TRUE(all_close(rstd, ref.rstd, 1e-6, 1e-5)) << "rstd = 1/sqrt(var + eps)";
  }
}

TEST_P(LayerNorm, InferenceWithoutStatisticsGivesSameOutput) {
  std::mt19937 gen(202);
  Tensor x = random_tensor({9, 21}, gen), gamma = random_tensor({21}, gen),
         beta = random_tensor({21}, gen);
  Tensor y_train({9, 21}), mean({9}), rstd({9});
  ops::layernorm_forward(x, gamma, beta, 1e-5f, y_train, mean, rstd);
  Tensor y_infer = garbage_tensor({9, 21}), no_mean, no_rstd;
  ops::layernorm_forward(x, gamma, beta, 1e-5f, y_infer, no_mean, no_rstd);
  EXPECT_TRUE(no_mean.empty() && no_rstd.empty());
  EXPECT_TRUE(all_close(y_infer, naive_layernorm(x, gamma, beta, 1e-5).y, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(y_infer, y_train, 1e-6, 1e-6));
}

// A bf16 y holds the f32 result rounded to nearest even, element for element, with the same
// statistics (the pre-norm block's input to its bf16 product); a bf16 x or a y of another type is
// refused.
TEST_P(LayerNorm, Bf16OutputIsTheRoundedF32Output) {
  std::mt19937 gen(204);
  Tensor x = random_tensor({300, 192}, gen, -3.f, 3.f), gamma = random_tensor({192}, gen),
         beta = random_tensor({192}, gen);
  Tensor y({300, 192}), mean({300}), rstd({300}), want({300, 192}, DType::bf16);
  ops::layernorm_forward(x, gamma, beta, 1e-6f, y, mean, rstd);
  ops::round_to_bf16(y, want);
  Tensor yb({300, 192}, DType::bf16), mean_b({300}), rstd_b({300});
  ops::layernorm_forward(x, gamma, beta, 1e-6f, yb, mean_b, rstd_b);
  EXPECT_TRUE(bitwise_equal(yb, want));
  EXPECT_TRUE(bitwise_equal(mean_b, mean));
  EXPECT_TRUE(bitwise_equal(rstd_b, rstd));
  Tensor y_i32({300, 192}, DType::i32);
  EXPECT_THROW(ops::layernorm_forward(want, gamma, beta, 1e-6f, yb, mean_b, rstd_b), Error);
  EXPECT_THROW(ops::layernorm_forward(x, gamma, beta, 1e-6f, y_i32, mean_b, rstd_b), Error);
}

TEST_P(LayerNorm, ConstantRowUsesEpsAndStaysFinite) {
  Tensor x({2, 8});
  x.fill(3.f);
  Tensor gamma({8}), beta({8});
  gamma.fill(2.f);
  for (int j = 0; j < 8; ++j) beta.f32()[j] = 0.1f * static_cast<float>(j);
  Tensor y = garbage_tensor({2, 8}), mean({2}), rstd({2});
  ops::layernorm_forward(x, gamma, beta, 1e-2f, y, mean, rstd);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(y.f32()[i], beta.f32()[i % 8], 1e-5) << i;
  EXPECT_NEAR(mean.f32()[0], 3.f, 1e-6);
  EXPECT_NEAR(rstd.f32()[1], 10.f, 1e-4) << "1/sqrt(0 + 0.01)";
}

TEST_P(LayerNorm, ForwardIsAccurateForLargeMean) {
  // A residual stream can drift far from zero; E[x²] − E[x]² in f32 would lose the variance.
  std::mt19937 gen(203);
  Tensor x = random_tensor({4, 256}, gen);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += 300.f;
  Tensor gamma({256}), beta({256}), y({4, 256}), mean({4}), rstd({4});
  gamma.fill(1.f);
  ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  const LnRef ref = naive_layernorm(x, gamma, beta, 1e-5);
  EXPECT_TRUE(all_close(y, ref.y, 1e-3, 1e-3));
  EXPECT_TRUE(all_close(rstd, ref.rstd, 0, 1e-3));
}

TEST_P(LayerNorm, BackwardMatchesNaiveAccumulatesAndOverwrites) {
  std::mt19937 gen(204);
  for (const Shape& shape : {Shape{7, 13}, Shape{2, 3, 37}, Shape{5, 768}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t N = shape.back(), M = shape_numel(shape) / N;
    Tensor x = random_tensor(shape, gen, -2.f, 2.f);
    Tensor gamma = random_tensor({N}, gen, 0.5f, 1.5f), beta = random_tensor({N}, gen);
    Tensor y(shape), mean({M}), rstd({M});
    ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
    Tensor dy = random_tensor(shape, gen), dx = garbage_tensor(shape);
    Tensor dgamma = random_tensor({N}, gen), dbeta = random_tensor({N}, gen);
    const std::vector<double> dgamma0 = to_double(dgamma), dbeta0 = to_double(dbeta);
    const LnRef ref = naive_layernorm(x, gamma, beta, 1e-5);
    std::vector<double> wx, wg, wb;
    naive_layernorm_backward(ref, gamma, dy, wx, wg, wb);
    const double tol = 1e-5 * std::sqrt(static_cast<double>(std::max(M, N)));
    for (int call = 1; call <= 2; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      ops::layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
      std::vector<double> eg = dgamma0, eb = dbeta0;
      for (int64_t j = 0; j < N; ++j) eg[j] += call * wg[j], eb[j] += call * wb[j];
      EXPECT_TRUE(all_close(dx, wx, tol, 1e-4)) << "dx is overwritten, not accumulated";
      EXPECT_TRUE(all_close(dgamma, eg, tol, tol)) << "dgamma accumulates";
      EXPECT_TRUE(all_close(dbeta, eb, tol, tol)) << "dbeta accumulates";
    }
  }
}

TEST_P(LayerNorm, LargeInputUsesParallelPath) {
  std::mt19937 gen(207);
  const int64_t M = 64, N = 384;  // 24576 elements: above any serial threshold
  Tensor x = random_tensor({M, N}, gen, -2.f, 2.f);
  Tensor gamma = random_tensor({N}, gen, 0.5f, 1.5f), beta = random_tensor({N}, gen);
  Tensor y = garbage_tensor({M, N}), mean({M}), rstd({M});
  ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  const LnRef ref = naive_layernorm(x, gamma, beta, 1e-5);
  EXPECT_TRUE(all_close(y, ref.y, 1e-5, 1e-5)) << "y";
  EXPECT_TRUE(all_close(rstd, ref.rstd, 1e-6, 1e-5)) << "rstd";
  Tensor dy = random_tensor({M, N}, gen), dx = garbage_tensor({M, N});
  Tensor dgamma({N}), dbeta({N});
  dgamma.fill(0.5f);
  dbeta.fill(-0.5f);
  ops::layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  std::vector<double> wx, wg, wb;
  naive_layernorm_backward(ref, gamma, dy, wx, wg, wb);
  for (int64_t j = 0; j < N; ++j) wg[j] += 0.5, wb[j] -= 0.5;
  const double tol = 1e-5 * std::sqrt(static_cast<double>(M));
  EXPECT_TRUE(all_close(dx, wx, tol, 1e-4)) << "dx";
  EXPECT_TRUE(all_close(dgamma, wg, tol, tol)) << "dgamma";
  EXPECT_TRUE(all_close(dbeta, wb, tol, tol)) << "dbeta";
}

TEST_P(LayerNorm, BackwardSkipsEmptyGradients) {
  std::mt19937 gen(205);
  const int64_t M = 4, N = 11;
  Tensor x = random_tensor({M, N}, gen), gamma = random_tensor({N}, gen),
         beta = random_tensor({N}, gen);
  Tensor y({M, N}), mean({M}), rstd({M});
  ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  Tensor dy = random_tensor({M, N}, gen);
  std::vector<double> wx, wg, wb;
  naive_layernorm_backward(naive_layernorm(x, gamma, beta, 1e-5), gamma, dy, wx, wg, wb);
  Tensor dx = garbage_tensor({M, N}), dgamma({N}), dbeta({N}), none;
  ops::layernorm_backward(x, gamma, mean, rstd, dy, dx, none, none);
  EXPECT_TRUE(all_close(dx, wx, 1e-5, 1e-4)) << "dx without parameter gradients";
  ops::layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, none);
  EXPECT_TRUE(all_close(dgamma, wg, 1e-5, 1e-5)) << "dgamma without dbeta";
  ops::layernorm_backward(x, gamma, mean, rstd, dy, dx, none, dbeta);
  EXPECT_TRUE(all_close(dbeta, wb, 1e-5, 1e-5)) << "dbeta without dgamma";
  Tensor dgamma2({N});
  ops::layernorm_backward(x, gamma, mean, rstd, dy, none, dgamma2, none);
  EXPECT_TRUE(all_close(dgamma2, wg, 1e-5, 1e-5)) << "parameter gradients without dx";
}

TEST_P(LayerNorm, BackwardMatchesFiniteDifferences) {
  std::mt19937 gen(206);
  const int64_t M = 4, N = 9;
  Tensor x = random_tensor({M, N}, gen, -2.f, 2.f);
  Tensor gamma = random_tensor({N}, gen, 0.5f, 1.5f), beta = random_tensor({N}, gen);
  Tensor w = random_tensor({M, N}, gen);
  Tensor y({M, N}), mean({M}), rstd({M});
  auto loss = [&] {
    ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
    return weighted_sum(y, w);
  };
  loss();
  Tensor dx({M, N}), dgamma({N}), dbeta({N});
  ops::layernorm_backward(x, gamma, mean, rstd, w, dx, dgamma, dbeta);
  EXPECT_GRAD_OK(check_gradient("dx", x, dx, loss));
  EXPECT_GRAD_OK(check_gradient("dgamma", gamma, dgamma, loss));
  EXPECT_GRAD_OK(check_gradient("dbeta", beta, dbeta, loss));
}

TEST_P(LayerNorm, FiniteDifferenceCheckRejectsMissingTerm) {
  // The gradient check used above must fail when either mean term is dropped from dx.
  std::mt19937 gen(206);  // the same data as BackwardMatchesFiniteDifferences
  const int64_t M = 4, N = 9;
  Tensor x = random_tensor({M, N}, gen, -2.f, 2.f);
  Tensor gamma = random_tensor({N}, gen, 0.5f, 1.5f), beta = random_tensor({N}, gen);
  Tensor w = random_tensor({M, N}, gen);
  Tensor y({M, N}), mean({M}), rstd({M});
  auto loss = [&] {
    ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
    return weighted_sum(y, w);
  };
  const LnRef ref = naive_layernorm(x, gamma, beta, 1e-5);
  std::vector<double> dx, dg, db;
  naive_layernorm_backward(ref, gamma, w, dx, dg, db);
  EXPECT_TRUE(check_gradient("right", x, dx, loss).ok());
  for (int drop : {1, 2}) {
    naive_layernorm_backward(ref, gamma, w, dx, dg, db, drop);
    EXPECT_FALSE(check_gradient("wrong", x, dx, loss).ok()) << "term " << drop << " dropped";
  }
}

TEST_P(LayerNorm, ShapeMismatchThrows) {
  Tensor x({4, 8}), gamma({8}), beta({8}), y({4, 8}), mean({4}), rstd({4});
  EXPECT_NO_THROW(ops::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd));
  Tensor g_bad({7}), y_bad({4, 7}), m_bad({8});
  EXPECT_THROW(ops::layernorm_forward(x, g_bad, beta, 1e-5f, y, mean, rstd), Error);
  EXPECT_THROW(ops::layernorm_forward(x, gamma, g_bad, 1e-5f, y, mean, rstd), Error);
  EXPECT_THROW(ops::layernorm_forward(x, gamma, beta, 1e-5f, y_bad, mean, rstd), Error);
  EXPECT_THROW(ops::layernorm_forward(x, gamma, beta, 1e-5f, y, m_bad, rstd), Error);
  Tensor dx({4, 8}), dgamma({8}), dbeta({8}), dx_bad({4, 7}), dg_bad({4});
  EXPECT_NO_THROW(ops::layernorm_backward(x, gamma, mean, rstd, y, dx, dgamma, dbeta));
  EXPECT_THROW(ops::layernorm_backward(x, gamma, mean, rstd, y, dx_bad, dgamma, dbeta), Error);
  EXPECT_THROW(ops::layernorm_backward(x, gamma, mean, rstd, y, dx, dg_bad, dbeta), Error);
  EXPECT_THROW(ops::layernorm_backward(x, gamma, m_bad, rstd, y, dx, dgamma, dbeta), Error);
  EXPECT_THROW(ops::layernorm_backward(x, gamma, mean, rstd, y_bad, dx, dgamma, dbeta), Error);
}

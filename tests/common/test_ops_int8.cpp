// The int8 linear product (ops::quantize_weight, ops::linear_forward_int8) against naive loops on
// the same quantised operands, and against the f32 product within a bound derived from the two
// roundings; what the int8 precision does on a CPU without VNNI.
//
// The products run with the activation codes the CPU calls for: 8-bit with VNNI, 7-bit without
// (ops.h says why). Each product test runs in both: "vnni" is skipped on a CPU without VNNI, and
// "no_vnni" hides VNNI with VITK_ISA_NO_VNNI=1, so it runs everywhere. oneDNN 2.6's u8·s8 products
// are exact on AVX2 only for 7-bit codes (8-bit ones saturate in vpmaddubsw), which the exact-sum
// test below would catch.
//
// The bound. With x̂ = s·q and ŵ = s_w·q_w, each rounding is off by at most half a step (plus the
// f32 rounding of the quotient x / s, a relative 2^-24 of at most 127 steps: δ = 2^-16 below):
//   |x − x̂| ≤ (s / 2)(1 + δ),  |w − ŵ| ≤ (s_w / 2)(1 + δ).
// From x·w − x̂·ŵ = (x − x̂)·w + x·(w − ŵ) − (x − x̂)·(w − ŵ), summed over k:
//   |y_int8 − y| ≤ (1 + δ)·[(s / 2)·Σ|w_k| + (s_w / 2)·Σ|x_k|] + (1 + δ)²·K·s·s_w / 4 + f32
//   rounding,
// and with |x_k| ≤ L·s, |w_k| ≤ 127·s_w at worst K·s·s_w·(L + 127 + 1/2) / 2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/ops.h"
#include "util/isa_levels.h"
#include "util/op_test_util.h"
#include "util/test_util.h"

using namespace vitk;
using namespace vitk::test;

namespace {

constexpr double kU = 0x1p-24;      // f32 unit roundoff
constexpr double kDelta = 0x1p-16;  // the quotient's rounding, relative to half a step

// Activations as the op quantises them (ops.h): per row, s = max|x| / L, q = x / s rounded to
// nearest even, the same f32 operations.
struct Quantised {
  std::vector<int> q;  // [M, K]
  std::vector<float> s;
};
Quantised quantise_rows(const Tensor& x, int levels) {
  const int64_t k = x.dim(-1), m = x.numel() / k;
  Quantised r{std::vector<int>(static_cast<size_t>(m * k)), std::vector<float>(m)};
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x.f32() + i * k;
    float amax = 0;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(row[j]));
    const float s = amax / static_cast<float>(levels);
    r.s[i] = s;
    for (int64_t j = 0; j < k; ++j)
      r.q[i * k + j] = s == 0 ? 0 : static_cast<int>(std::nearbyint(row[j] / s));
  }
  return r;
}

// Σ_k qx[m, k] · qw[n, k] in 64-bit integers: [M, N].
std::vector<int64_t> naive_sums(const std::vector<int>& qx, const Tensor& qw, int64_t m, int64_t k,
                                int64_t n) {
  std::vector<int64_t> acc(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t a = 0;
      for (int64_t t = 0; t < k; ++t) a += int64_t{qx[i * k + t]} * qw.s8()[j * k + t];
      acc[i * n + j] = a;
    }
  return acc;
}

// The per-element bound of the header on y_int8 − x·wᵀ − b, from x, w, b and the scales.
std::vector<double> error_bound(const Tensor& x, const Tensor& w, const Tensor& b,
                                const std::vector<float>& sx, const Tensor& sw) {
  const int64_t k = x.dim(-1), m = x.numel() / k, n = w.dim(0);
  std::vector<double> bound(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double s = sx[i], t = sw.f32()[j];
      double l1x = 0, l1w = 0, magnitude = 0;
      for (int64_t c = 0; c < k; ++c) {
        const double xa = std::fabs(x.f32()[i * k + c]), wa = std::fabs(w.f32()[j * k + c]);
        l1x += xa, l1w += wa, magnitude += (xa + s) * (wa + t);
      }
      const double bias = b.empty() ? 0 : std::fabs(b.f32()[j]);
      bound[i * n + j] = (1 + kDelta) * (s / 2 * l1w + t / 2 * l1x) +
                         (1 + kDelta) * (1 + kDelta) * k * s * t / 4 + 4 * kU * (magnitude + bias);
    }
  return bound;
}

// x·wᵀ + b in double: [M, N].
std::vector<double> exact_product(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t k = x.dim(-1), m = x.numel() / k, n = w.dim(0);
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double a = b.empty() ? 0 : b.f32()[j];
      for (int64_t c = 0; c < k; ++c)
        a += static_cast<double>(x.f32()[i * k + c]) * w.f32()[j * k + c];
      y[i * n + j] = a;
    }
  return y;
}

// Every |got − want| ≤ bound; also returns the largest |got − want| / bound seen.
::testing::AssertionResult within(const Tensor& got, const std::vector<double>& want,
                                  const std::vector<double>& bound, double* worst_ratio) {
  *worst_ratio = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double err = std::fabs(got.f32()[i] - want[i]);
    if (!(err <= bound[i]))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got.f32()[i] << ", want " << want[i] << ", |error| "
             << err << " > bound " << bound[i];
    *worst_ratio = std::max(*worst_ratio, err / bound[i]);
  }
  return ::testing::AssertionSuccess();
}

Tensor gaussian_tensor(const Shape& shape, std::mt19937& gen, float sigma) {
  Tensor t(shape);
  std::normal_distribution<float> dist(0.f, sigma);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(gen);
  return t;
}

// ---- Products in each activation code

enum class Codes { vnni, no_vnni };

class Int8Products : public ::testing::TestWithParam<Codes> {
 protected:
  void SetUp() override {
    if (GetParam() == Codes::no_vnni) {
      hide_.emplace("VITK_ISA_NO_VNNI", "1");
    } else if (!ops::vnni_supported()) {
      GTEST_SKIP() << "no AVX512_VNNI or AVX_VNNI on this CPU (oneDNN sees " << ops::cpu_isa()
                   << ")";
    }
    levels_ = ops::int8_activation_levels();
  }
  std::optional<EnvVar> hide_;
  int levels_ = 0;
};

TEST_P(Int8Products, IntegerSumsAreExactAtTheExtremesOfTheRange) {
  // Integer x with max |x| = L in every row and integer w with max |w| = 127 in every row have
  // scales of exactly 1, so y is the integer sum itself, exactly (|sum| < 2^24 for K ≤ 1024).
  // Pairs of extreme codes are what saturate a product without VNNI.
  EXPECT_EQ(levels_, GetParam() == Codes::vnni ? 127 : 63);
  const int L = levels_;
  std::mt19937 gen(1);
  std::uniform_int_distribution<int> any_x(-L, L), any_w(-127, 127);
  const int64_t M = 37, K = 1024, N = 70;
  Tensor x({M, K}), w({N, K});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t c = 0; c < K; ++c) {
      const int pattern = static_cast<int>(i % 4);  // +L; −L; ±L alternating; random
      const int v = pattern == 0   ? L
                    : pattern == 1 ? -L
                    : pattern == 2 ? (c % 2 ? L : -L)
                                   : any_x(gen);
      x.f32()[i * K + c] = static_cast<float>(c == 0 ? (i % 2 ? L : -L) : v);
    }
  for (int64_t j = 0; j < N; ++j)
    for (int64_t c = 0; c < K; ++c) {
      const int pattern = static_cast<int>(j % 3);  // +127; −127; random
      const int v = pattern == 0 ? 127 : pattern == 1 ? -127 : any_w(gen);
      w.f32()[j * K + c] = static_cast<float>(c == 1 ? 127 : v);
    }
  ops::QuantizedWeight qw = ops::quantize_weight(w);
  const Tensor q_plain = qw.values.clone();
  Tensor y = garbage_tensor({M, N});
  ops::linear_forward_int8(x, qw, Tensor(), y);
  const Quantised qx = quantise_rows(x, L);
  const std::vector<int64_t> acc = naive_sums(qx.q, q_plain, M, K, N);
  int64_t wrong = 0, first = -1;
  for (int64_t i = 0; i < M * N; ++i)
    if (static_cast<double>(y.f32()[i]) != static_cast<double>(acc[i]) && wrong++ == 0) first = i;
  EXPECT_EQ(wrong, 0) << "first at " << first << ": got " << y.f32()[first] << ", want "
                      << acc[first];
  for (float s : qx.s) ASSERT_EQ(s, 1.f);
  for (int64_t j = 0; j < N; ++j) ASSERT_EQ(qw.scales.f32()[j], 1.f);
}

TEST_P(Int8Products, MatchTheDequantisedIntegerProduct) {
  // y = acc · s[m] · s_w[n] + b[n] within f32 rounding, acc the naive integer sums of the same
  // quantised operands; rows of different magnitudes, a zero row, and a second number of rows
  // reading the weight packed by the first call.
  std::mt19937 gen(2);
  const int64_t M = 45, K = 300, N = 77;
  Tensor x = random_tensor({3, 15, K}, gen);  // any rank: leading axes are rows
  for (int64_t i = 0; i < M; ++i)
    for (int64_t c = 0; c < K; ++c)
      x.f32()[i * K + c] *= std::pow(10.f, static_cast<float>(i % 5) - 2);
  for (int64_t c = 0; c < K; ++c) x.f32()[3 * K + c] = 0;
  const Tensor w = random_tensor({N, K}, gen, -0.2f, 0.2f), b = random_tensor({N}, gen);
  ops::QuantizedWeight qw = ops::quantize_weight(w);
  const Tensor q_plain = qw.values.clone();
  EXPECT_FALSE(qw.packed());
  for (int64_t rows : {M, int64_t{6}}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const Tensor xs = x.reshaped({M, K}).rows(0, rows);
    Tensor y = garbage_tensor({rows, N});
    ops::linear_forward_int8(xs, qw, b, y);
    EXPECT_TRUE(qw.packed());
    const Quantised qx = quantise_rows(xs, levels_);
    const std::vector<int64_t> acc = naive_sums(qx.q, q_plain, rows, K, N);
    std::vector<double> want(static_cast<size_t>(rows * N)), tol(want.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const double v = static_cast<double>(acc[i * N + j]) * qx.s[i] * qw.scales.f32()[j];
        want[i * N + j] = v + b.f32()[j];
        tol[i * N + j] = 4 * kU * (std::fabs(v) + std::fabs(b.f32()[j]));
      }
    double ratio = 0;
    EXPECT_TRUE(within(y, want, tol, &ratio));
    for (int64_t j = 0; j < N; ++j) EXPECT_EQ(y.f32()[3 * N + j], b.f32()[j]) << "zero row";
  }
  // Packed once: later calls at a known shape create nothing.
  Tensor y({M, N});
  ops::linear_forward_int8(x, qw, b, y);
  const int64_t primitives = ops::primitive_count();
  ops::linear_forward_int8(x, qw, b, y);
  EXPECT_EQ(ops::primitive_count(), primitives);
  // One copy of the weight: the packed form (padded to oneDNN's blocks) and nothing else.
  EXPECT_LT(qw.values.nbytes(), static_cast<size_t>(2 * N * K));
}

TEST_P(Int8Products, StayWithinTheDerivedBoundOfTheF32Product) {
  std::mt19937 gen(3);
  const int64_t M = 40, K = 768, N = 96;
  // Adversarial: every value just under half a step above its code, all positive, so that every
  // rounding error has the same sign and the bound is all but reached; one value per row is
  // exactly L (or 127) steps to fix the scales.
  std::uniform_int_distribution<int> code_x(0, levels_ - 1), code_w(0, 126);
  Tensor xa({M, K}), wa({N, K});
  for (int64_t i = 0; i < M; ++i) {
    const float step = 0.01f * static_cast<float>(i + 1);
    for (int64_t c = 0; c < K; ++c)
      xa.f32()[i * K + c] = c == 0 ? step * levels_ : step * (code_x(gen) + 0.49f);
  }
  for (int64_t j = 0; j < N; ++j) {
    const float step = 0.001f * static_cast<float>(j + 1);
    for (int64_t c = 0; c < K; ++c)
      wa.f32()[j * K + c] = c == 0 ? step * 127 : step * (code_w(gen) + 0.49f);
  }
  struct Case {
    const char* name;
    Tensor x, w, b;
    double min_ratio;  // the adversarial case must come close to the bound
  };
  const Case cases[] = {
      {"uniform", random_tensor({M, K}, gen), random_tensor({N, K}, gen, -0.1f, 0.1f),
       random_tensor({N}, gen), 0},
      {"gaussian", gaussian_tensor({M, K}, gen, 1.f), gaussian_tensor({N, K}, gen, 0.02f),
       gaussian_tensor({N}, gen, 0.1f), 0},
      {"adversarial", xa, wa, Tensor(), 0.9},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ops::QuantizedWeight qw = ops::quantize_weight(c.w);
    Tensor y = garbage_tensor({M, N});
    ops::linear_forward_int8(c.x, qw, c.b, y);
    const std::vector<double> want = exact_product(c.x, c.w, c.b);
    const std::vector<double> bound =
        error_bound(c.x, c.w, c.b, quantise_rows(c.x, levels_).s, qw.scales);
    double ratio = 0;
    EXPECT_TRUE(within(y, want, bound, &ratio));
    EXPECT_GE(ratio, c.min_ratio) << "largest |error| / bound";
    EXPECT_LE(ratio, 1.0);
    double err2 = 0, ref2 = 0;
    for (int64_t i = 0; i < M * N; ++i) {
      err2 += (y.f32()[i] - want[i]) * (y.f32()[i] - want[i]);
      ref2 += want[i] * want[i];
    }
    RecordProperty(std::string(c.name) + "_relative_error", std::to_string(std::sqrt(err2 / ref2)));
    RecordProperty(std::string(c.name) + "_error_over_bound", std::to_string(ratio));
  }
}

TEST_P(Int8Products, ZeroChannelsAndOutliersStayFiniteAndWithinTheBound) {
  std::mt19937 gen(4);
  const int64_t M = 33, K = 256, N = 48;
  Tensor x = gaussian_tensor({M, K}, gen, 1.f), w = gaussian_tensor({N, K}, gen, 0.05f);
  const Tensor b = random_tensor({N}, gen);
  for (int64_t i = 0; i < M; ++i) x.f32()[i * K + (i * 7) % K] = 300.f;  // one outlier per row
  for (int64_t j = 0; j < N; ++j) w.f32()[j * K + (j * 5) % K] = -20.f;
  for (int64_t c = 0; c < K; ++c) w.f32()[11 * K + c] = 0;  // an all-zero output channel
  ops::QuantizedWeight qw = ops::quantize_weight(w);
  EXPECT_EQ(qw.scales.f32()[11], 0.f);
  Tensor y = garbage_tensor({M, N});
  ops::linear_forward_int8(x, qw, b, y);
  for (int64_t i = 0; i < M * N; ++i) ASSERT_TRUE(std::isfinite(y.f32()[i])) << i;
  for (int64_t i = 0; i < M; ++i) EXPECT_EQ(y.f32()[i * N + 11], b.f32()[11]);
  double ratio = 0;
  EXPECT_TRUE(within(y, exact_product(x, w, b),
                     error_bound(x, w, b, quantise_rows(x, levels_).s, qw.scales), &ratio));
  // A row holding a NaN gives NaNs in its own outputs only.
  x.f32()[5 * K + 3] = std::nanf("");
  ops::linear_forward_int8(x, qw, b, y);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      ASSERT_EQ(std::isnan(y.f32()[i * N + j]), i == 5) << "row " << i << " column " << j;
}

INSTANTIATE_TEST_SUITE_P(Codes, Int8Products, ::testing::Values(Codes::vnni, Codes::no_vnni),
                         [](const ::testing::TestParamInfo<Codes>& p) {
                           return p.param == Codes::vnni ? "vnni" : "no_vnni";
                         });

// ---- Weights

VITK_AT_EVERY_ISA_LEVEL(Int8Weights);

TEST_P(Int8Weights, QuantiseToHalfAScalePerOutputChannel) {
  std::mt19937 gen(5);
  const int64_t N = 20, K = 130;
  Tensor w = random_tensor({N, K}, gen);
  for (int64_t j = 0; j < N; ++j)
    for (int64_t c = 0; c < K; ++c)
      w.f32()[j * K + c] *= std::pow(4.f, static_cast<float>(j % 7) - 3);
  for (int64_t c = 0; c < K; ++c) w.f32()[4 * K + c] = 0;  // all-zero row
  const ops::QuantizedWeight q = ops::quantize_weight(w);
  ASSERT_EQ(q.n, N);
  ASSERT_EQ(q.k, K);
  ASSERT_EQ(q.values.dtype(), DType::s8);
  ASSERT_EQ(q.values.shape(), (Shape{N, K}));
  EXPECT_FALSE(q.packed());
  for (int64_t j = 0; j < N; ++j) {
    SCOPED_TRACE("row " + std::to_string(j));
    float amax = 0;
    for (int64_t c = 0; c < K; ++c) amax = std::max(amax, std::fabs(w.f32()[j * K + c]));
    const float s = q.scales.f32()[j];
    EXPECT_EQ(s, amax / 127.f);
    int sum = 0, largest = 0;
    for (int64_t c = 0; c < K; ++c) {
      const int v = q.values.s8()[j * K + c];
      sum += v, largest = std::max(largest, std::abs(v));
      ASSERT_LE(std::abs(v), 127);
      ASSERT_LE(std::fabs(double{w.f32()[j * K + c]} - double{s} * v), s / 2 * (1 + kDelta))
          << "column " << c;
    }
    EXPECT_EQ(q.sums.i32()[j], sum);
    EXPECT_EQ(largest, j == 4 ? 0 : 127);
  }
  // Ties go to the even code: 2.5 → 2, 3.5 → 4, −2.5 → −2 at a scale of exactly 1.
  const Tensor ties = from_vector({1, 4}, {127.f, 2.5f, 3.5f, -2.5f});
  const ops::QuantizedWeight t = ops::quantize_weight(ties);
  EXPECT_EQ(t.scales.f32()[0], 1.f);
  EXPECT_EQ(t.values.s8()[1], 2);
  EXPECT_EQ(t.values.s8()[2], 4);
  EXPECT_EQ(t.values.s8()[3], -2);
}

TEST_P(Int8Weights, ShapeAndDtypeErrorsNameTheOpAndTheShapes) {
  const std::string rank1 = error_of([] { ops::quantize_weight(Tensor({6})); });
  EXPECT_TRUE(contains(rank1, "quantize_weight") && contains(rank1, "[6]")) << rank1;
  const std::string bf16 = error_of([] { ops::quantize_weight(Tensor({2, 3}, DType::bf16)); });
  EXPECT_TRUE(contains(bf16, "quantize_weight") && contains(bf16, "bf16 [2, 3]")) << bf16;
  EXPECT_TRUE(contains(error_of([] { ops::quantize_weight(Tensor()); }), "quantize_weight"));
  Tensor nan_w({3, 4});
  nan_w.f32()[9] = std::nanf("");
  const std::string nan = error_of([&] { ops::quantize_weight(nan_w); });
  EXPECT_TRUE(contains(nan, "row 2 of w [3, 4]") && contains(nan, "NaN")) << nan;

  ops::QuantizedWeight w = ops::quantize_weight(Tensor({5, 4}));
  Tensor x({3, 4}), y({3, 5}), b({5});
  EXPECT_NO_THROW(ops::linear_forward_int8(x, w, b, y));
  auto expect_error = [&](const Tensor& xx, const Tensor& bb, Tensor yy, const std::string& part) {
    const std::string e = error_of([&] { ops::linear_forward_int8(xx, w, bb, yy); });
    EXPECT_TRUE(contains(e, "linear_forward_int8: ") && contains(e, part)) << e;
  };
  expect_error(Tensor({3, 6}), b, y, "weight [5, 4] does not fit input [3, 6]");
  expect_error(Tensor({3, 4}, DType::bf16), b, y,
               "x must be a non-empty f32 tensor, not bf16 [3, 4]");
  expect_error(x, b, Tensor({3, 4}), "output f32 [3, 4] should be f32 holding [3, 5]");
  expect_error(x, b, Tensor({2, 5}), "output f32 [2, 5] should be f32 holding [3, 5]");
  expect_error(x, b, Tensor({3, 5}, DType::bf16), "output bf16 [3, 5]");
  expect_error(x, Tensor({4}), y, "bias [4] should be f32 [5]");
  ops::QuantizedWeight none;
  const std::string e = error_of([&] { ops::linear_forward_int8(x, none, b, y); });
  EXPECT_TRUE(contains(e, "not quantised")) << e;
}

// ---- The precision

VITK_AT_EVERY_ISA_LEVEL(Int8Precision);

TEST_P(Int8Precision, RunsWithoutVnniOnSevenBitCodesAndSaysSo) {
  EXPECT_EQ(ops::parse_precision("int8"), ops::Precision::int8);
  EXPECT_STREQ(ops::precision_name(ops::Precision::int8), "int8");
  const std::string bad = error_of([] { ops::parse_precision("int4"); });
  EXPECT_TRUE(contains(bad, "--precision must be f32, bf16 or int8, not 'int4'")) << bad;
  EXPECT_THROW(ops::parse_precision("int4"), UsageError);

  const EnvVar hide("VITK_ISA_NO_VNNI", "1");
  EXPECT_FALSE(ops::vnni_supported());
  EXPECT_EQ(ops::int8_activation_levels(), 63);
  EXPECT_TRUE(contains(ops::describe_precision(ops::Precision::int8),
                       "int8 (7-bit activations: no VNNI; other products "));
  EXPECT_EQ(ops::describe_precision(ops::Precision::f32), "f32");
  EXPECT_NO_THROW(ops::require_precision(ops::Precision::int8));
  EXPECT_NO_THROW(ops::require_precision(ops::Precision::f32));
}

TEST_P(Int8Precision, FollowsWhatTheCpuReports) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string text((std::istreambuf_iterator<char>(cpuinfo)),
                         std::istreambuf_iterator<char>());
  const std::string isa = ops::cpu_isa();
  if (contains(isa, "vnni") || contains(isa, "bf16") || contains(isa, "amx")) {
    EXPECT_TRUE(ops::vnni_supported()) << isa;
    EXPECT_EQ(ops::int8_activation_levels(), 127);
    EXPECT_TRUE(contains(ops::describe_precision(ops::Precision::int8),
                         "int8 (8-bit activations, VNNI; other products "));
  } else {
    EXPECT_FALSE(ops::vnni_supported()) << isa;
    EXPECT_EQ(ops::int8_activation_levels(), 63);
  }
  if (!contains(text, "avx512_vnni") && !contains(text, "avx_vnni")) {
    EXPECT_FALSE(ops::vnni_supported()) << "the CPU has no VNNI; oneDNN ISA " << isa;
  }
}

TEST_P(Int8Precision, TheFloatProductsRefuseIt) {
  std::mt19937 gen(6);
  Tensor x = random_tensor({3, 4}, gen), w = random_tensor({5, 4}, gen), y({3, 5});
  Tensor dy = random_tensor({3, 5}, gen), dx({3, 4}), dw({5, 4}), db({5});
  const ops::Weight weight{w};
  const auto int8 = ops::Precision::int8;
  const std::string f = error_of([&] { ops::linear_forward(x, weight, Tensor(), y, int8); });
  EXPECT_TRUE(contains(f, "linear_forward: int8 products take a QuantizedWeight")) << f;
  EXPECT_TRUE(contains(error_of([&] { ops::linear_backward(x, weight, dy, dx, dw, db, int8); }),
                       "linear_backward: int8"));
  EXPECT_TRUE(contains(error_of([&] { ops::linear_backward_data(dy, weight, dx, int8); }),
                       "linear_backward_data: int8"));
  EXPECT_TRUE(contains(error_of([&] { ops::linear_backward_weights(x, dy, dw, db, int8); }),
                       "linear_backward_weights: int8"));
  Tensor c({3, 3});
  const std::string b = error_of([&] { ops::bmm(x, false, x, true, c, 1.f, 0.f, int8); });
  EXPECT_TRUE(contains(b, "bmm: no int8")) << b;
}

}  // namespace

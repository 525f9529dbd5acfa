#pragma once
// Helpers shared by the op tests: random tensors and parameters, comparison against
// double-precision references, and a central finite-difference driver so that each op's gradient
// check is a few lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/params.h"
#include "common/tensor.h"
#include "util/test_util.h"

namespace vitk::test {

// f32 tensor with entries uniform in [lo, hi).
inline Tensor random_tensor(const Shape& shape, std::mt19937& gen, float lo = -1.f,
                            float hi = 1.f) {
  Tensor t(shape);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t;
}

// The ranges randomize draws biases and norm gains from: ±bias, 1 ± norm_gain.
struct RandomRanges {
  float bias = 0.2f;
  float norm_gain = 0.3f;
};

// Random values with every parameter mattering: norm gains around 1 (not exactly 1, so that their
// gradients differ from the biases'), small biases, weights uniform in ±1.5/√fan_in so that the
// activations stay of order one through a few layers (fan_in: the elements of one output's weights,
// C·P·P for a patch projection), a ViT's class token and positions in ±0.5.
inline void randomize(ParamStore& store, std::mt19937& gen, const RandomRanges& ranges = {}) {
  for (auto& p : store.params()) {
    float a = ranges.bias, offset = 0.f;
    if (p.name.find("norm") != std::string::npos && ends_with(p.name, ".weight")) {
      a = ranges.norm_gain, offset = 1.f;
    } else if (p.name == "cls_token" || p.name == "pos_embed") {
      a = 0.5f;
    } else if (p.shape.size() >= 2) {
      a = 1.5f / std::sqrt(static_cast<float>(p.numel() / p.shape[0]));
    }
    std::uniform_real_distribution<float> dist(-a, a);
    for (int64_t i = 0; i < p.numel(); ++i) p.value.f32()[i] = offset + dist(gen);
  }
}

// The same with a generator of its own, seeded with `seed`.
inline void randomize(ParamStore& store, uint32_t seed, const RandomRanges& ranges = {}) {
  std::mt19937 gen(seed);
  randomize(store, gen, ranges);
}

// The names of the store's parameters, in the order they were added.
inline std::vector<std::string> names_of(const ParamStore& store) {
  std::vector<std::string> names;
  for (const auto& p : store.params()) names.push_back(p.name);
  return names;
}

// f32 or bf16 values widened to double.
inline std::vector<double> to_double(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::bf16) {
    const uint16_t* p = t.bf16();
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(p[i]);
  } else {
    const float* p = t.f32();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  }
  return v;
}

inline Tensor to_bf16(const Tensor& t) {
  Tensor out(t.shape(), DType::bf16);
  f32_to_bf16(t.f32(), out.bf16(), static_cast<size_t>(t.numel()));
  return out;
}

// The transpose [N, M] of a bf16 matrix [M, N] (the leading axes flattened), by a plain loop.
inline Tensor naive_transpose_bf16(const Tensor& t) {
  const int64_t n = t.dim(-1), m = t.numel() / n;
  Tensor out({n, m}, DType::bf16);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) out.bf16()[c * m + r] = t.bf16()[r * n + c];
  return out;
}

// Garbage in an output that the op must overwrite: NaN survives any accidental "+=" or "β·c".
inline Tensor garbage_tensor(const Shape& shape) {
  Tensor t(shape);
  t.fill(std::nanf(""));
  return t;
}

// Σ w_i · y_i in double: the scalar loss whose gradient w.r.t. y is w.
inline double weighted_sum(const Tensor& y, const Tensor& w) {
  std::vector<double> yd = to_double(y), wd = to_double(w);
  double s = 0;
  for (size_t i = 0; i < yd.size(); ++i) s += yd[i] * wd[i];
  return s;
}

// |got − want| ≤ atol + rtol·|want| elementwise; NaN never passes. Reports the worst element.
inline ::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want,
                                            double atol, double rtol) {
  if (static_cast<size_t>(got.numel()) != want.size())
    return ::testing::AssertionFailure()
           << "size " << got.numel() << " vs reference " << want.size();
  std::vector<double> g = to_double(got);
  int64_t bad = 0, worst = -1;
  double worst_excess = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    double err = std::fabs(g[i] - want[i]);
    double lim = atol + rtol * std::fabs(want[i]);
    bool ok = err <= lim;  // false for NaN
    if (!ok) ++bad;
    double excess = std::isnan(err) ? 1e300 : err - lim;
    if (!ok && excess > worst_excess) worst_excess = excess, worst = static_cast<int64_t>(i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << g.size() << " elements differ; worst at flat index " << worst
         << ": got " << g[worst] << ", want " << want[worst] << " (atol " << atol << ", rtol "
         << rtol << ")";
}

inline ::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, double atol,
                                            double rtol) {
  return all_close(got, to_double(want), atol, rtol);
}

inline ::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes()) return ::testing::AssertionFailure() << "sizes differ";
  const auto* pa = static_cast<const unsigned char*>(a.data());
  const auto* pb = static_cast<const unsigned char*>(b.data());
  for (size_t i = 0; i < a.nbytes(); ++i)
    if (pa[i] != pb[i]) return ::testing::AssertionFailure() << "first differing byte " << i;
  return ::testing::AssertionSuccess();
}

// Central finite differences for one input of a scalar loss.
struct GradCheck {
  int64_t checked = 0;
  int64_t failed = 0;
  double max_err = 0;
  std::string report;
  bool ok() const { return checked > 0 && failed == 0; }
};

struct FdOptions {
  double h = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  std::function<bool(int64_t)> skip;  // elements not to perturb (masked, near a kink)
};

// Perturbs each element of `param` (f32) by ±h, evaluates `loss` (which reads param) and compares
// (L+ − L−) / (x+ − x−) with analytic[i]. The step is measured after rounding to float.
inline GradCheck check_gradient(const std::string& name, Tensor& param,
                                const std::vector<double>& analytic,
                                const std::function<double()>& loss, const FdOptions& opt = {}) {
  GradCheck r;
  std::ostringstream msg;
  float* p = param.f32();
  for (int64_t i = 0; i < param.numel(); ++i) {
    if (opt.skip && opt.skip(i)) continue;
    const float x0 = p[i];
    const float xp = static_cast<float>(x0 + opt.h), xm = static_cast<float>(x0 - opt.h);
    p[i] = xp;
    const double lp = loss();
    p[i] = xm;
    const double lm = loss();
    p[i] = x0;
    const double fd = (lp - lm) / (static_cast<double>(xp) - xm);
    const double g = analytic[static_cast<size_t>(i)];
    const double err = std::fabs(fd - g);
    ++r.checked;
    r.max_err = std::max(r.max_err, err);
    if (!(err <= opt.atol + opt.rtol * std::fabs(g))) {
      if (r.failed < 5)
        msg << name << "[" << i << "]: analytic " << g << ", finite difference " << fd << "\n";
      ++r.failed;
    }
  }
  loss();  // leave outputs consistent with the restored inputs
  msg << name << ": " << r.failed << " of " << r.checked << " elements failed, max |error| "
      << r.max_err;
  r.report = msg.str();
  return r;
}

inline GradCheck check_gradient(const std::string& name, Tensor& param, const Tensor& analytic,
                                const std::function<double()>& loss, const FdOptions& opt = {}) {
  return check_gradient(name, param, to_double(analytic), loss, opt);
}

#define EXPECT_GRAD_OK(check)            \
  do {                                   \
    auto gc_ = (check);                  \
    EXPECT_TRUE(gc_.ok()) << gc_.report; \
  } while (0)

// Tensor helpers for references.
inline int64_t rows_of(const Tensor& t) {
  return t.numel() / t.dim(-1);
}

inline Tensor from_vector(const Shape& shape, const std::vector<float>& v) {
  Tensor t(shape);
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

inline Tensor ids_tensor(const std::vector<int32_t>& v) {
  Tensor t({static_cast<int64_t>(v.size())}, DType::i32);
  std::copy(v.begin(), v.end(), t.i32());
  return t;
}

}  // namespace vitk::test

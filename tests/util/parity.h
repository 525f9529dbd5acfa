#pragma once
// Comparing a model with PyTorch on the parity fixtures (tests/parity/, read with fixture_io.h):
// loading the fixture's parameters under vitk's names, the f32 tolerance element by element, and
// how far an output in bf16 is from the reference.
//
// The bf16 tolerance. Rounding an operand to bf16 (8 significant bits, round to nearest) changes
// it by at most u = 2⁻⁸ relative, so a product Σ_k x_k·w_k on rounded operands is off by at most
// about 2u·Σ_k |x_k·w_k| (the products of bf16 values are exact in f32, and f32 accumulation adds
// ~1e-7). Along the network the errors of the P products a value passes through add up (layer
// norms keep the scale), which gives
//   max |logit_bf16 − logit_exact| ≤ 2u·P·max(1, max |logit_exact|),
// with P = 6 per encoder layer (qkv, q·kᵀ, p·v, proj, fc1, fc2), 11 per decoder layer (the
// cross-attention adds q, kv, q·kᵀ, p·v, proj) plus the patch embedding and the head (ViT) or the
// output layer (translation); gradients pass through about three times as many products. Rounding
// errors of independent sign mostly cancel, so the measured error is far below this bound (the
// tests print both); each test also checks that bf16 is further from the reference than f32's
// tolerance, so that an f32 run in disguise fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "common/params.h"
#include "common/tensor.h"
#include "util/fixture_io.h"

namespace vitk::test {

// The f32 tolerance: 1e-5 relative or 1e-6 absolute (the issue's), with the absolute part taken at
// the tensor's own scale: 1e-6·max(1, max|PyTorch|). Gradients of weights are sums that cancel (an
// element of 0.02 from terms adding up to 4), and float32 cannot bring such an element within
// 1e-6 of the exact value when the tensor around it reaches 10: PyTorch's own float32 run misses
// the unscaled rule by up to 1.7× on these fixtures (each file records its error), and vitk by
// 1.6×. Scaled, a wrong LayerNorm eps (1e-6 for 1e-5) still fails every layer case.
inline constexpr double kRelTol = 1e-5;
inline constexpr double kAbsTol = 1e-6;

// The multi-index of element `flat` of a tensor of `shape`, as "[i, j, k]".
inline std::string index_str(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = flat % shape[i];
    flat /= shape[i];
  }
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < idx.size(); ++i) s << (i ? ", " : "") << idx[i];
  s << ']';
  return s.str();
}

// The worst differences seen over one or more tensors.
struct Errors {
  double max_abs = 0;  // max |vitk − PyTorch|
  double ratio = 0;    // max |vitk − PyTorch| / tolerance: passes when <= 1
  std::string where;   // the element with the worst ratio

  void merge(const Errors& other) {
    max_abs = std::max(max_abs, other.max_abs);
    if (other.ratio > ratio || where.empty()) {
      ratio = other.ratio;
      where = other.where;
    }
  }
  std::string str() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "max|err| %.2e, %.3f of the tolerance at %s", max_abs, ratio,
                  where.c_str());
    return buf;
  }
};

// Compares vitk's tensor with PyTorch's element by element. With `lengths` (i32 [B]) only the
// rows t < lengths[b] of a [B, T, d] tensor count. One gtest failure per tensor that is off,
// naming its worst element and how many are off.
inline Errors compare(const std::string& what, const Tensor& got, const Tensor& want,
                      const Tensor* lengths = nullptr) {
  Errors e;
  e.where = what;
  if (got.shape() != want.shape()) {
    ADD_FAILURE() << what << ": vitk shape " << shape_str(got.shape()) << ", PyTorch "
                  << shape_str(want.shape());
    e.ratio = INFINITY;
    return e;
  }
  const float* a = got.f32();
  const float* b = want.f32();
  const int64_t n = want.numel();
  double scale = 1.0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  const double abs_tol = kAbsTol * scale;
  const int64_t row = want.dim(-1);
  const int64_t seq = lengths ? want.dim(1) : 1;
  int64_t bad = 0, checked = 0, worst = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (lengths) {
      const int64_t bi = i / (seq * row), ti = (i / row) % seq;
      if (ti >= lengths->i32()[bi]) continue;
    }
    ++checked;
    const double err = std::fabs(static_cast<double>(a[i]) - b[i]);
    const double r = err / (kRelTol * std::fabs(b[i]) + abs_tol);
    if (!(r <= 1.0)) ++bad;  // NaN counts as bad
    e.max_abs = std::max(e.max_abs, err);
    if (worst < 0 || !(r <= e.ratio)) {
      e.ratio = std::isnan(r) ? INFINITY : r;
      worst = i;
    }
  }
  if (worst >= 0) e.where = what + index_str(worst, want.shape());
  if (bad > 0) {
    ADD_FAILURE() << what << ": " << bad << " of " << checked << " elements off; worst at "
                  << index_str(worst, want.shape()) << ": vitk " << a[worst] << ", PyTorch "
                  << b[worst] << " (|err| " << std::fabs(static_cast<double>(a[worst]) - b[worst])
                  << " > " << kRelTol * std::fabs(b[worst]) + abs_tol << ")";
  }
  return e;
}

// The names, comma-separated ("(none)" for none).
inline std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "(none)" : s;
}

// Loads the fixture's parameters (param/NAME) into `store`. The names prove the mapping: vitk must
// register exactly the fixture's names (a failure lists those only one side has), each of the
// shape the fixture gives. Fatal failures return early: call it with ASSERT_NO_FATAL_FAILURE.
inline void load_fixture_params(const FixtureFile& f, ParamStore& store) {
  std::vector<std::string> ours, theirs = f.names("param");
  for (const auto& p : store.params()) ours.push_back(p.name);
  std::sort(ours.begin(), ours.end());
  std::sort(theirs.begin(), theirs.end());
  std::vector<std::string> only_ours, only_theirs;
  std::set_difference(ours.begin(), ours.end(), theirs.begin(), theirs.end(),
                      std::back_inserter(only_ours));
  std::set_difference(theirs.begin(), theirs.end(), ours.begin(), ours.end(),
                      std::back_inserter(only_theirs));
  ASSERT_TRUE(only_ours.empty() && only_theirs.empty())
      << "parameter names differ\n  only in vitk: " << joined(only_ours)
      << "\n  only in the fixture: " << joined(only_theirs);
  for (auto& p : store.params()) {
    const Tensor v = f.read_f32("param/" + p.name);
    ASSERT_EQ(v.shape(), p.shape) << p.name << ": vitk " << shape_str(p.shape) << ", fixture "
                                  << shape_str(v.shape());
    p.value.copy_from(v);
  }
  store.mark_changed();  // the values were written directly
}

inline constexpr double kBf16Roundoff = 1.0 / 256;  // bf16's unit roundoff, 2⁻⁸

// How far a model's output is from a reference: max |a − b|, max(1, max |b|) and
// ‖a − b‖₂ / ‖b‖₂.
struct OutputDiff {
  double max_abs = 0, scale = 1, rel_l2 = 0;
};
inline OutputDiff output_diff(const Tensor& a, const Tensor& b) {
  OutputDiff d;
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.f32()[i], y = b.f32()[i];
    d.max_abs = std::max(d.max_abs, std::fabs(x - y));
    if (std::isnan(x)) d.max_abs = INFINITY;
    d.scale = std::max(d.scale, std::fabs(y));
    num += (x - y) * (x - y);
    den += y * y;
  }
  d.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

}  // namespace vitk::test

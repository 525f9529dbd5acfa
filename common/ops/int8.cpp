// int8 linear products for inference (ops.h, "int8 linear products"): weights quantised once per
// output channel, activations per row on the fly, exact s32 products on oneDNN's u8·s8 matmul,
// then the scales and the bias in one f32 pass of our own:
//
//   x f32 [M, K] ──quantise rows──► codes u8 [M, K] = q + offset, row scales s [M]
//   acc s32 [M, N] = codes · q_wᵀ          (oneDNN, written into y's own memory)
//   y[m, n] = (acc[m, n] − offset · sums[n]) · s[m] · scales[n] + b[n]   (in place, f32)
//
// Why u8 codes with an offset rather than s8 activations: oneDNN's x86 kernels multiply u8 by s8
// (vpdpbusd with VNNI, vpmaddubsw without). Given s8 activations, oneDNN 2.6 adds 128 to them
// itself on every call and subtracts a compensation; handing it u8 measured 1.1-1.6× faster at
// ViT-B/16's shapes on AVX2 (oneDNN alone, one thread, weights in the layout it asks for). The
// offset comes back out exactly through the weight's row sums, computed once: Σ_k (q + o) · q_w =
// Σ_k q · q_w + o · Σ_k q_w.
//
// Why a pass of our own for the scales: oneDNN 2.6's int8 matmul takes one output scale or one
// per output column, not one per row of x, so the row scales need a pass anyway; the same pass
// applies the column scales, the bias and the offset.
//
// Without VNNI, vpmaddubsw saturates each sum of two u8·s8 products to 16 bits, so codes up to 255
// would give wrong sums (oneDNN's "Nuances of int8 computations" leaves that to the user). Codes
// of 7 bits (|q| ≤ 63, offset 64) keep every pair within 2 · 127 · 127 < 2^15: the products are
// then exact on any CPU, only coarser than with VNNI (int8_activation_levels).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.h"
#include "common/ops/column_sums.h"
#include "common/ops/kernel_functions.h"
#include "common/ops/matmul_impl.h"
#include "common/ops/profile.h"

namespace vitk::ops {

// The layout oneDNN's kernel reads the packed values in.
struct QuantizedWeight::Layout {
  dnnl::memory::desc desc;
};

}  // namespace vitk::ops

namespace vitk::ops::VITK_ISA_NAMESPACE {

namespace {

using dnnl::memory;

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw Error(std::string(op) + ": " + what);
}

// Writes q + offset into out, q = row[i] / s rounded to nearest (ties to even), s = max |row| /
// levels, and returns s. |row[i]| ≤ max |row| keeps |q| ≤ levels without a clamp (the quotient
// exceeds levels by a rounding error at most, far below the half that would round past it). A row
// of zeros gives s = 0 and q = 0; a row holding a NaN or an infinity gives s = NaN and q = 0.
template <typename Code>
float quantize_row(const float* row, int64_t k, int levels, int offset, Code* out) {
  // probe stays 0 unless the row holds a NaN or an infinity (whose product with 0 is NaN): a test
  // that vectorises with the maximum.
  float amax = 0, probe = 0;
#pragma omp simd reduction(max : amax) reduction(+ : probe)
  for (int64_t i = 0; i < k; ++i) {
    amax = std::max(amax, std::fabs(row[i]));
    probe += row[i] * 0.f;
  }
  const bool finite = probe == 0;
  if (!finite || amax == 0) {
    std::fill(out, out + k, static_cast<Code>(offset));
    return finite ? 0.f : std::numeric_limits<float>::quiet_NaN();
  }
  const float s = amax / static_cast<float>(levels);
  if (s == 0) {  // a row of denormals too small for any step: zeros, as an all-zero row
    std::fill(out, out + k, static_cast<Code>(offset));
    return 0.f;
  }
#pragma omp simd
  for (int64_t i = 0; i < k; ++i)
    out[i] = static_cast<Code>(static_cast<int>(std::nearbyint(row[i] / s)) + offset);
  return s;
}

// The matmul acc [M, N] s32 = codes [M, K] u8 · q_wᵀ [K, N] s8, q_wᵀ laid out as `weights`: one
// primitive per shape and layout.
const dnnl::primitive& product(int64_t m, int64_t k, int64_t n, const memory::desc& weights) {
  const std::string key = "matmul_int8:" + std::to_string(m) + "," + std::to_string(k) + "," +
                          std::to_string(n) + ":" + detail::desc_key(weights);
  return detail::cached_primitive(key, [&]() {
    const memory::desc codes({m, k}, memory::data_type::u8, {k, 1});
    const memory::desc acc({m, n}, memory::data_type::s32, {n, 1});
    return dnnl::matmul(
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(codes, weights, acc), detail::engine()));
  });
}

// A weight's first product: oneDNN chooses q_wᵀ's layout at this shape (format any), the plain q
// is reordered into it and released, and every later product, at any number of rows, reads that
// layout. oneDNN's choice may depend on M (its blocking heuristics), so fixing it once is what
// keeps a single copy when M varies (the last batch, decoding).
void pack(QuantizedWeight& w, int64_t m) {
  profile::Scope scope("pack_weight_int8");
  const memory::desc any({w.k, w.n}, memory::data_type::s8, memory::format_tag::any);
  const memory::desc want(*dnnl_primitive_desc_query_md(
      product(m, w.k, w.n, any).get_primitive_desc(), dnnl_query_weights_md, 0));
  const detail::Operand plain{{w.k, w.n}, {1, w.k}, DType::s8, w.values.data()};  // q as q_wᵀ
  if (want != plain.desc()) {
    Tensor packed({static_cast<int64_t>(want.get_size())}, DType::s8);
    detail::reorder_into(plain, want, packed.data());
    w.values = packed;
  }
  w.layout = std::make_shared<QuantizedWeight::Layout>(QuantizedWeight::Layout{want});
}

// One row of the result: out[c] = (acc[c] − offset · sums[c]) · s · col_scales[c] + bias[c],
// where acc[c] is the s32 sum that out[c] holds on entry (out's own memory read as s32).
void dequantize_row(float* out, int64_t n, int offset, float s, const int32_t* sums,
                    const float* col_scales, const float* bias) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    int32_t acc;
    std::memcpy(&acc, out + c, sizeof acc);
    out[c] = static_cast<float>(acc - offset * sums[c]) * s * col_scales[c];
  }
  if (bias) {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) out[c] += bias[c];
  }
}

// y [m, n] holds the s32 sums on entry and the results on exit.
void dequantize(float* y, int64_t m, int64_t n, int offset, const float* row_scales,
                const QuantizedWeight& w, const float* bias) {
  profile::Scope scope("dequantize_int8", m, n);
  detail::for_row_blocks(m, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      dequantize_row(y + r * n, n, offset, row_scales[r], w.sums.i32(), w.scales.f32(), bias);
  });
}

void check(const char* op, const Tensor& x, const QuantizedWeight& w, const Tensor& b,
           const Tensor& y) {
  if (w.scales.empty()) fail(op, "the weight is not quantised (ops::quantize_weight)");
  const std::string weight = "weight [" + std::to_string(w.n) + ", " + std::to_string(w.k) + "]";
  if (x.empty() || x.dtype() != DType::f32)
    fail(op, "x must be a non-empty f32 tensor, not " + std::string(dtype_name(x.dtype())) + " " +
                 shape_str(x.shape()));
  if (x.dim(-1) != w.k) fail(op, weight + " does not fit input " + shape_str(x.shape()));
  const int64_t m = x.numel() / w.k;
  if (y.empty() || y.dtype() != DType::f32 || y.dim(-1) != w.n || y.numel() != m * w.n)
    fail(op, "output " + std::string(dtype_name(y.dtype())) + " " + shape_str(y.shape()) +
                 " should be f32 holding [" + std::to_string(m) + ", " + std::to_string(w.n) + "]");
  if (!b.empty() && (b.dtype() != DType::f32 || b.numel() != w.n))
    fail(op, "bias " + shape_str(b.shape()) + " should be f32 [" + std::to_string(w.n) + "]");
}

}  // namespace

int int8_activation_levels() {
  return vnni_supported() ? 127 : 63;
}

QuantizedWeight quantize_weight(const Tensor& w) {
  const char* op = "quantize_weight";
  if (w.empty() || w.dtype() != DType::f32 || w.rank() != 2)
    fail(op, "w must be a non-empty f32 [out, in] matrix, not " +
                 std::string(dtype_name(w.dtype())) + " " + shape_str(w.shape()));
  // The s32 sums of a product stay exact while K · 255 · 127 < 2^31.
  if (w.dim(1) > std::numeric_limits<int32_t>::max() / (255 * 127))
    fail(op, "w " + shape_str(w.shape()) + " has too many inputs for s32 sums");
  QuantizedWeight q;
  q.n = w.dim(0), q.k = w.dim(1);
  q.values = Tensor({q.n, q.k}, DType::s8);
  q.scales = Tensor({q.n});
  q.sums = Tensor({q.n}, DType::i32);
  for (int64_t r = 0; r < q.n; ++r) {
    int8_t* row = q.values.s8() + r * q.k;
    q.scales.f32()[r] = quantize_row(w.f32() + r * q.k, q.k, 127, 0, row);
    if (std::isnan(q.scales.f32()[r]))
      fail(op, "row " + std::to_string(r) + " of w " + shape_str(w.shape()) +
                   " holds a NaN or an infinity");
    int32_t sum = 0;
    for (int64_t i = 0; i < q.k; ++i) sum += row[i];
    q.sums.i32()[r] = sum;
  }
  return q;
}

QuantizedWeight quantized_weight(Tensor q, Tensor scales) {
  const char* op = "quantized_weight";
  if (q.empty() || q.dtype() != DType::s8 || q.rank() != 2)
    fail(op, "q must be a non-empty s8 [out, in] matrix, not " +
                 std::string(dtype_name(q.dtype())) + " " + shape_str(q.shape()));
  if (scales.dtype() != DType::f32 || scales.shape() != Shape{q.dim(0)})
    fail(op, "scales " + std::string(dtype_name(scales.dtype())) + " " + shape_str(scales.shape()) +
                 " should be f32 [" + std::to_string(q.dim(0)) + "]");
  if (q.dim(1) > std::numeric_limits<int32_t>::max() / (255 * 127))
    fail(op, "q " + shape_str(q.shape()) + " has too many inputs for s32 sums");
  QuantizedWeight w;
  w.n = q.dim(0), w.k = q.dim(1);
  w.sums = Tensor({w.n}, DType::i32);
  for (int64_t r = 0; r < w.n; ++r) {
    const float s = scales.f32()[r];
    if (!(s >= 0 && std::isfinite(s)))
      fail(op, "scale " + std::to_string(r) + " is " + std::to_string(s) +
                   ", not a finite number >= 0");
    const int8_t* row = q.s8() + r * w.k;
    int32_t sum = 0;
    int64_t nonzero = -1;  // the first non-zero entry of the row
    for (int64_t i = 0; i < w.k; ++i) {
      if (row[i] == -128)
        fail(op, "q[" + std::to_string(r) + ", " + std::to_string(i) +
                     "] is -128, outside the symmetric range [-127, 127]");
      if (row[i] != 0 && nonzero < 0) nonzero = i;
      sum += row[i];
    }
    // quantize_weight gives scale 0 to an all-zero row only, and stores it as all zeros: a zero
    // scale over a row that holds values would silently turn it into zeros (damaged scales).
    if (s == 0 && nonzero >= 0)
      fail(op, "scale " + std::to_string(r) + " is 0 but row " + std::to_string(r) +
                   " is not all zero (q[" + std::to_string(r) + ", " + std::to_string(nonzero) +
                   "] = " + std::to_string(row[nonzero]) + "): the scales are damaged");
    w.sums.i32()[r] = sum;
  }
  w.values = std::move(q);
  w.scales = std::move(scales);
  return w;
}

void linear_forward_int8(const Tensor& x, QuantizedWeight& w, const Tensor& b, Tensor& y) {
  const char* op = "linear_forward_int8";
  check(op, x, w, b, y);
  const int64_t k = w.k, n = w.n, m = x.numel() / k;
  profile::Scope scope(op, m, n, k);
  const int levels = int8_activation_levels(), offset = levels + 1;
  // Per-call scratch, as the other products use these slots.
  auto* codes =
      static_cast<uint8_t*>(detail::scratch(detail::kScratchA, static_cast<size_t>(m * k)));
  auto* row_scales = static_cast<float*>(detail::scratch(detail::kScratchB, m * sizeof(float)));
  {
    profile::Scope quantize("quantize_rows_int8", m, k);
    const float* xs = x.f32();
    detail::for_row_blocks(m, k, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        row_scales[r] = quantize_row(xs + r * k, k, levels, offset, codes + r * k);
    });
  }
  if (!w.packed()) pack(w, m);
  const memory::desc codes_desc({m, k}, memory::data_type::u8, {k, 1});
  const memory::desc acc_desc({m, n}, memory::data_type::s32, {n, 1});
  product(m, k, n, w.layout->desc)
      .execute(detail::stream(), {{DNNL_ARG_SRC, detail::wrap(codes_desc, codes)},
                                  {DNNL_ARG_WEIGHTS, detail::wrap(w.layout->desc, w.values.data())},
                                  {DNNL_ARG_DST, detail::wrap(acc_desc, y.data())}});
  detail::stream().wait();
  dequantize(y.f32(), m, n, offset, row_scales, w, b.empty() ? nullptr : b.f32());
}

}  // namespace vitk::ops::VITK_ISA_NAMESPACE

// Linear layers on oneDNN's matmul primitive. Transposes are strides, with one exception: the
// bf16 weight gradient reads dyᵀ from a transposed copy, written by the pass that rounds dy
// (backward_weights_product says why). Weights stay in PyTorch's {out, in} layout, which is what
// the arena holds, and are read from there directly in f32, or from their packed forms
// (ops::WeightCache) in bf16 and in f32 inference where the blocked layout is faster. The batched
// products are in bmm.cpp.
#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "common/ops/column_sums.h"
#include "common/ops/matmul_impl.h"
#include "common/ops/profile.h"
#include "common/ops/transpose.h"

namespace vitk::ops {
namespace detail {
namespace {

using dnnl::memory;

void append_key(std::ostringstream& key, const Operand& op) {
  key << dtype_name(op.dtype) << '{';
  for (auto d : op.dims) key << d << ',';
  key << '/';
  for (auto s : op.strides) key << s << ',';
  key << '}';
}

}  // namespace

void run_matmul(const Operand& a, const Operand& b, const Operand* bias, const Operand& c,
                float alpha, float beta, const Packing* packing) {
  std::ostringstream key;
  key << "matmul:";
  append_key(key, a);
  if (packing) {
    // The weight's layout is oneDNN's choice (format any); its type is the product's.
    key << "packed " << dtype_name(packing->dtype) << '{';
    for (auto d : b.dims) key << d << ',';
    key << '}';
  } else {
    append_key(key, b);
  }
  if (bias) append_key(key, *bias);
  append_key(key, c);
  // Exact values: alpha and beta are baked into the primitive.
  key << std::hexfloat << "a" << alpha << "b" << beta;
  const memory::desc b_any =
      packing ? memory::desc(b.dims, dnnl_type(packing->dtype), memory::format_tag::any) : b.desc();
  const dnnl::primitive& prim = cached_primitive(key.str(), [&]() {
    dnnl::primitive_attr attr;
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    auto desc = bias ? dnnl::matmul::desc(a.desc(), b_any, bias->desc(), c.desc())
                     : dnnl::matmul::desc(a.desc(), b_any, c.desc());
    return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine()));
  });
  memory::desc b_desc = b.desc();
  const void* b_data = b.data;
  if (packing) {
    b_desc = memory::desc(
        *dnnl_primitive_desc_query_md(prim.get_primitive_desc(), dnnl_query_weights_md, 0));
    b_data = weight_form(*packing, b, b_desc);
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(a.desc(), a.data)},
                                       {DNNL_ARG_WEIGHTS, wrap(b_desc, b_data)},
                                       {DNNL_ARG_DST, wrap(c.desc(), c.data)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, wrap(bias->desc(), bias->data));
  prim.execute(stream(), args);
  stream().wait();
}

}  // namespace detail

namespace {

using detail::Operand;
using detail::Packing;

[[noreturn]] void shape_error(const char* op, const std::string& what) {
  throw Error(std::string(op) + ": " + what);
}

// Rows of a tensor whose last axis is the feature axis.
int64_t leading(const Tensor& t) {
  return t.rank() ? t.numel() / t.dim(-1) : 0;
}

void check_float(const char* op, const Tensor& t, const char* name) {
  if (t.empty()) shape_error(op, std::string(name) + " is empty");
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16)
    shape_error(op, std::string(name) + " must be f32 or bf16, not " + dtype_name(t.dtype()));
  if (t.rank() < 1) shape_error(op, std::string(name) + " must have at least one axis");
}

Operand plain(const Tensor& t, int64_t rows, int64_t cols) {
  return {{rows, cols}, {cols, 1}, t.dtype(), t.data()};
}

// The {rows, cols} matrix stored transposed as {cols, rows}.
Operand transposed(const Tensor& t, int64_t rows, int64_t cols) {
  return {{rows, cols}, {1, rows}, t.dtype(), t.data()};
}

// out[c] += Σ_r g[r, c] over g [m, n] (column_sums.h).
void column_sums(const float* g, int64_t m, int64_t n, float* out) {
  detail::column_sums_by_block(
      m, n, out, [&](int64_t r0, int64_t) { return g + r0 * n; },
      [](int64_t, int64_t, const float*) {});
}

// g [m, n] rounded to bf16 as rounded [m, n] and as its transpose rounded_t [n, m] (either may be
// null), with sums[c] += Σ_r g[r, c] when sums is non-null: one read of g for the bf16 backward's
// two dy operands and its bias gradient. Each block of rows is transposed while it is in cache.
void round_dy(const float* g, int64_t m, int64_t n, uint16_t* rounded, uint16_t* rounded_t,
              float* sums) {
  profile::Scope scope(sums ? (rounded_t ? "bias_grad+round_bf16+t" : "bias_grad+round_bf16")
                            : (rounded_t ? "round_bf16+t" : "round_bf16"),
                       m, n);
  // A block's rounded rows: in `rounded`, or in its thread's buffer when only the transpose is
  // kept.
  auto finish = [&](int64_t r0, int64_t r1, const float* block) {
    static thread_local std::vector<uint16_t> staging;
    uint16_t* out = rounded ? rounded + r0 * n : nullptr;
    if (!out) {
      staging.resize(static_cast<size_t>((r1 - r0) * n));
      out = staging.data();
    }
    detail::round_block(block, (r1 - r0) * n, out);
    if (rounded_t) detail::transpose_u16(out, r1 - r0, n, n, rounded_t + r0, m);
  };
  if (sums)
    detail::column_sums_by_block(
        m, n, sums, [&](int64_t r0, int64_t) { return g + r0 * n; }, finish);
  else
    detail::for_row_blocks(m, n, [&](int64_t r0, int64_t r1) { finish(r0, r1, g + r0 * n); });
}

// A scratch buffer of `count` bf16 values.
uint16_t* scratch_bf16(detail::ScratchSlot slot, int64_t count) {
  return static_cast<uint16_t*>(detail::scratch(slot, static_cast<size_t>(count) * 2));
}

// Shapes of y = x·wᵀ + b: returns {m, k, n}.
struct Mkn {
  int64_t m, k, n;
};
Mkn check_forward(const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
                  const Tensor& y) {
  check_float(op, x, "x");
  check_float(op, w, "w");
  check_float(op, y, "y");
  const int64_t k = x.dim(-1), m = leading(x);
  if (w.rank() != 2 || w.dim(1) != k)
    shape_error(op,
                "weight " + shape_str(w.shape()) + " does not fit input " + shape_str(x.shape()));
  const int64_t n = w.dim(0);
  if (y.dim(-1) != n || leading(y) != m)
    shape_error(op, "output " + shape_str(y.shape()) + " should hold [" + std::to_string(m) + ", " +
                        std::to_string(n) + "]");
  if (!b.empty() && (b.dtype() != DType::f32 || b.numel() != n))
    shape_error(op, "bias " + shape_str(b.shape()) + " should be f32 [" + std::to_string(n) + "]");
  return {m, k, n};
}

Mkn check_backward_data(const char* op, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  check_float(op, dy, "dy");
  check_float(op, w, "w");
  check_float(op, dx, "dx");
  if (w.rank() != 2) shape_error(op, "weight must be [out, in], not " + shape_str(w.shape()));
  const int64_t n = w.dim(0), k = w.dim(1), m = leading(dy);
  if (dy.dim(-1) != n || dx.dim(-1) != k || leading(dx) != m)
    shape_error(op, "dy " + shape_str(dy.shape()) + ", w " + shape_str(w.shape()) + " and dx " +
                        shape_str(dx.shape()) + " do not fit");
  return {m, k, n};
}

Mkn check_backward_weights(const char* op, const Tensor& x, const Tensor& dy, const Tensor& dw,
                           const Tensor& db) {
  check_float(op, x, "x");
  check_float(op, dy, "dy");
  const int64_t k = x.dim(-1), m = leading(x), n = dy.dim(-1);
  if (leading(dy) != m)
    shape_error(op, "x " + shape_str(x.shape()) + " and dy " + shape_str(dy.shape()) +
                        " have different numbers of rows");
  if (!dw.empty() &&
      (dw.dtype() != DType::f32 || dw.rank() != 2 || dw.dim(0) != n || dw.dim(1) != k))
    shape_error(op, "dw " + shape_str(dw.shape()) + " should be f32 [" + std::to_string(n) + ", " +
                        std::to_string(k) + "]");
  if (!db.empty()) {
    if (db.dtype() != DType::f32 || db.numel() != n)
      shape_error(op, "db " + shape_str(db.shape()) + " should be f32 [" + std::to_string(n) + "]");
    if (dy.dtype() != DType::f32) shape_error(op, "bias gradient needs an f32 dy");
  }
  return {m, k, n};
}

// How a product reads weight w at `precision`: plain (nullptr) or packed.
const Packing* weight_packing(const Weight& w, Precision precision, int64_t m, int64_t k, int64_t n,
                              Packing& storage) {
  if (w.value.dtype() == DType::bf16) return nullptr;  // already rounded: read as it is
  if (w.plain_released) {
    if (!w.cache) throw Error("a released weight without its packed forms");
    storage = {precision == Precision::bf16 ? DType::bf16 : DType::f32, w.cache, w.version, true};
    return &storage;
  }
  if (precision == Precision::bf16) {
    storage = {DType::bf16, w.cache, w.version};
    return &storage;
  }
  if (w.cache && (w.force_pack_f32 || (w.pack_f32 && prefer_packed_f32(m, k, n)))) {
    storage = {DType::f32, w.cache, w.version};
    return &storage;
  }
  return nullptr;
}

// int8 runs on quantised weights, at inference only: linear_forward_int8 (int8.cpp).
void refuse_int8(const char* op, Precision precision) {
  if (precision == Precision::int8)
    shape_error(op,
                "int8 products take a QuantizedWeight (ops::linear_forward_int8), at inference");
}

void check_precision(const char* op, const Tensor& w, const Tensor& x, Precision precision) {
  refuse_int8(op, precision);
  if (precision == Precision::f32 && (x.dtype() != DType::f32 || w.dtype() != DType::f32))
    shape_error(op, "f32 products take f32 operands (x " + std::string(dtype_name(x.dtype())) +
                        ", w " + dtype_name(w.dtype()) + ")");
}

// The products themselves, on operands already rounded where the precision asks for it.
void forward_product(const Operand& x, const Weight& w, const Tensor& b, Tensor& y, Mkn s,
                     Precision precision) {
  Operand bias;
  if (!b.empty()) bias = {{1, s.n}, {s.n, 1}, DType::f32, b.data()};
  Packing storage;
  const Packing* packing = weight_packing(w, precision, s.m, s.k, s.n, storage);
  run_matmul(x, transposed(w.value, s.k, s.n), b.empty() ? nullptr : &bias, plain(y, s.m, s.n), 1.f,
             0.f, packing);
}

void backward_data_product(const Operand& dy, const Weight& w, Tensor& dx, Mkn s,
                           Precision precision) {
  Packing storage;
  const Packing* packing = weight_packing(w, precision, s.m, s.n, s.k, storage);
  run_matmul(dy, plain(w.value, s.n, s.k), nullptr, plain(dx, s.m, s.k), 1.f, 0.f, packing);
}

// dw [N, K] += dyᵀ [N, M] · x [M, K]. dy_t is dyᵀ: in f32 a strided view of dy [M, N]
// (strided_dy_t), in bf16 a plain [N, M] matrix (bf16_dy_t). oneDNN 2.6's bf16 kernel multiplies
// the plain one about 1.3× faster: 375–420 against 290–330 GFLOP/s at the ViT's shapes (M = 6400
// tokens; N, K = 768, 192 / 192, 768 / 576, 192), timed on oneDNN alone. Its f32 kernel gains
Operand input_operand(const Tensor& t, int64_t rows, int64_t cols, Precision precision,
                      detail::ScratchSlot slot) {
  const Operand op = plain(t, rows, cols);
  return precision == Precision::bf16 ? detail::rounded(op, slot) : op;
}

// too little there (195–203 against 156–202 GFLOP/s) to pay for the copy. x is read as it is
// (f32) or rounded (bf16: x may also be bf16 already).
void backward_weights_product(const Tensor& x, const Operand& dy_t, Tensor& dw, Mkn s,
                              Precision precision) {
  profile::Scope scope("linear_backward_weights", s.m, s.n, s.k);
  run_matmul(dy_t, input_operand(x, s.m, s.k, precision, detail::kScratchA), nullptr,
             plain(dw, s.n, s.k), 1.f, 1.f);
}

// dyᵀ as a strided view of dy [M, N], in dy's own type.
Operand strided_dy_t(const Tensor& dy, Mkn s) {
  return {{s.n, s.m}, {1, s.n}, dy.dtype(), dy.data()};
}

Operand bf16_dy_t(const uint16_t* data, Mkn s) {
  return {{s.n, s.m}, {s.m, 1}, DType::bf16, data};
}

// dyᵀ of a bf16 dy [M, N] (already rounded), transposed into scratch.
Operand transposed_bf16(const Tensor& dy, Mkn s) {
  uint16_t* t = scratch_bf16(detail::kScratchDyT, s.m * s.n);
  const uint16_t* src = dy.bf16();
  profile::Scope scope("transpose_bf16", s.m, s.n);
  detail::for_row_blocks(s.m, s.n, [&](int64_t r0, int64_t r1) {
    detail::transpose_u16(src + r0 * s.n, r1 - r0, s.n, s.n, t + r0, s.m);
  });
  return bf16_dy_t(t, s);
}

void bias_gradient(const Tensor& dy, Tensor& db, Mkn s) {
  profile::Scope scope("bias_grad", s.m, s.n);
  column_sums(dy.f32(), s.m, s.n, db.f32());
}

}  // namespace

// ---- Tensor weights: the operands' own types, no packing ----

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const char* op = "linear_forward";
  const Mkn s = check_forward(op, x, w, b, y);
  if (x.dtype() != w.dtype()) shape_error(op, "x and w must have the same dtype");
  profile::Scope scope("linear_forward", s.m, s.n, s.k);
  forward_product(plain(x, s.m, s.k), Weight{w}, b, y, s, Precision::f32);
}

void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  const Mkn s = check_backward_data("linear_backward_data", dy, w, dx);
  profile::Scope scope("linear_backward_data", s.m, s.n, s.k);
  backward_data_product(plain(dy, s.m, s.n), Weight{w}, dx, s, Precision::f32);
}

void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db) {
  const Mkn s = check_backward_weights("linear_backward_weights", x, dy, dw, db);
  if (!dw.empty()) backward_weights_product(x, strided_dy_t(dy, s), dw, s, Precision::f32);
  if (!db.empty()) bias_gradient(dy, db, s);
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db) {
  if (!dx.empty()) linear_backward_data(dy, w, dx);
  if (!dw.empty() || !db.empty()) linear_backward_weights(x, dy, dw, db);
}

// ---- Weights at a precision ----

void linear_forward(const Tensor& x, const Weight& w, const Tensor& b, Tensor& y,
                    Precision precision) {
  const char* op = "linear_forward";
  const Mkn s = check_forward(op, x, w.value, b, y);
  check_precision(op, w.value, x, precision);
  profile::Scope scope("linear_forward", s.m, s.n, s.k);
  forward_product(input_operand(x, s.m, s.k, precision, detail::kScratchA), w, b, y, s, precision);
}

void linear_backward_data(const Tensor& dy, const Weight& w, Tensor& dx, Precision precision) {
  const char* op = "linear_backward_data";
  const Mkn s = check_backward_data(op, dy, w.value, dx);
  check_precision(op, w.value, dy, precision);
  profile::Scope scope("linear_backward_data", s.m, s.n, s.k);
  backward_data_product(input_operand(dy, s.m, s.n, precision, detail::kScratchDy), w, dx, s,
                        precision);
}

void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                             Precision precision) {
  const char* op = "linear_backward_weights";
  const Mkn s = check_backward_weights(op, x, dy, dw, db);
  check_precision(op, x, dy, precision);
  if (dw.empty()) {
    if (!db.empty()) bias_gradient(dy, db, s);
    return;
  }
  Operand dy_t;
  if (precision == Precision::f32) {
    dy_t = strided_dy_t(dy, s);
  } else if (dy.dtype() == DType::bf16) {
    dy_t = transposed_bf16(dy, s);
  } else {
    // dyᵀ rounded and the bias gradient in one pass over dy.
    uint16_t* t = scratch_bf16(detail::kScratchDyT, s.m * s.n);
    round_dy(dy.f32(), s.m, s.n, nullptr, t, db.empty() ? nullptr : db.f32());
    dy_t = bf16_dy_t(t, s);
  }
  if (precision == Precision::f32 && !db.empty()) bias_gradient(dy, db, s);
  backward_weights_product(x, dy_t, dw, s, precision);
}

void linear_backward(const Tensor& x, const Weight& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db, Precision precision, const Tensor& dy_t) {
  refuse_int8("linear_backward", precision);
  if (!dy_t.empty()) {
    const char* op = "linear_backward";
    const Mkn s = check_backward_weights(op, x, dy, dw, db);
    if (precision != Precision::bf16 || dy.dtype() != DType::bf16 || dy_t.dtype() != DType::bf16 ||
        dy_t.shape() != Shape{s.n, s.m})
      shape_error(op, "dy_t " + std::string(dtype_name(dy_t.dtype())) + " " +
                          shape_str(dy_t.shape()) + " should be bf16 [" + std::to_string(s.n) +
                          ", " + std::to_string(s.m) + "], the transpose of a bf16 dy " +
                          shape_str(dy.shape()) + ", for bf16 products");
    if (!dx.empty()) linear_backward_data(dy, w, dx, precision);
    if (!dw.empty()) backward_weights_product(x, bf16_dy_t(dy_t.bf16(), s), dw, s, precision);
    return;
  }
  if (precision == Precision::f32 || dy.dtype() != DType::f32) {
    if (!dx.empty()) linear_backward_data(dy, w, dx, precision);
    if (!dw.empty() || !db.empty()) linear_backward_weights(x, dy, dw, db, precision);
    return;
  }
  // bf16: dy is rounded once, for both products, as dy for dx and as dyᵀ for dw; db sums the f32
  // dy, in the same pass.
  if (dx.empty()) return linear_backward_weights(x, dy, dw, db, precision);
  const char* op = "linear_backward";
  const Mkn s = check_backward_weights(op, x, dy, dw, db);
  check_backward_data(op, dy, w.value, dx);
  uint16_t* rounded = scratch_bf16(detail::kScratchDy, s.m * s.n);
  uint16_t* rounded_t = dw.empty() ? nullptr : scratch_bf16(detail::kScratchDyT, s.m * s.n);
  round_dy(dy.f32(), s.m, s.n, rounded, rounded_t, db.empty() ? nullptr : db.f32());
  {
    profile::Scope scope("linear_backward_data", s.m, s.n, s.k);
    backward_data_product({{s.m, s.n}, {s.n, 1}, DType::bf16, rounded}, w, dx, s, precision);
  }
  if (!dw.empty()) backward_weights_product(x, bf16_dy_t(rounded_t, s), dw, s, precision);
}

}  // namespace vitk::ops

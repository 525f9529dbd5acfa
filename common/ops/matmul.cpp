// Linear layers and batched matrix products on oneDNN's matmul primitive. Transposes are strides,
// never copies; weights stay in PyTorch's {out, in} layout, which is what the arena holds.
#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "common/ops/dnnl_context.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"

namespace vitk::ops {
namespace {

using detail::wrap;
using dnnl::memory;

// A matrix operand as oneDNN sees it: logical dims and element strides, batch axes first.
struct Operand {
  memory::dims dims;
  memory::dims strides;
  DType dtype = DType::f32;
  const void* data = nullptr;
  memory::desc desc() const { return memory::desc(dims, detail::dnnl_type(dtype), strides); }
};

void append_key(std::ostringstream& key, const Operand& op) {
  key << dtype_name(op.dtype) << '{';
  for (auto d : op.dims) key << d << ',';
  key << '/';
  for (auto s : op.strides) key << s << ',';
  key << '}';
}

// c = alpha · a · b (+ bias) + beta · c
void run_matmul(const Operand& a, const Operand& b, const Operand* bias, const Operand& c,
                float alpha, float beta) {
  std::ostringstream key;
  key << "matmul:";
  append_key(key, a);
  append_key(key, b);
  if (bias) append_key(key, *bias);
  append_key(key, c);
  // Exact values: alpha and beta are baked into the primitive.
  key << std::hexfloat << "a" << alpha << "b" << beta;
  const dnnl::primitive& prim = detail::cached_primitive(key.str(), [&]() {
    dnnl::primitive_attr attr;
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    auto desc = bias ? dnnl::matmul::desc(a.desc(), b.desc(), bias->desc(), c.desc())
                     : dnnl::matmul::desc(a.desc(), b.desc(), c.desc());
    return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, detail::engine()));
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(a.desc(), a.data)},
                                       {DNNL_ARG_WEIGHTS, wrap(b.desc(), b.data)},
                                       {DNNL_ARG_DST, wrap(c.desc(), c.data)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, wrap(bias->desc(), bias->data));
  prim.execute(detail::stream(), args);
  detail::stream().wait();
}

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

// out[c] += Σ_r g[r, c] over g [m, n]. Rows are cut into fixed blocks whose partial sums are added
// in block order: the result does not depend on the thread count, and both threads stay busy
// whatever n is (a split by columns left one of two threads idle for n = 192).
void column_sums(const float* g, int64_t m, int64_t n, float* out) {
  constexpr int64_t kRows = 128;
  const int64_t blocks = (m + kRows - 1) / kRows;
  if (blocks <= 1 || m * n < 32768) {
    for (int64_t r = 0; r < m; ++r) {
      const float* row = g + r * n;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) out[c] += row[c];
    }
    return;
  }
  static thread_local std::vector<float> partial;
  partial.resize(static_cast<size_t>(blocks * n));
  float* part = partial.data();
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* acc = part + blk * n;
    const int64_t r0 = blk * kRows, r1 = std::min(m, r0 + kRows);
    std::copy(g + r0 * n, g + (r0 + 1) * n, acc);
    for (int64_t r = r0 + 1; r < r1; ++r) {
      const float* row = g + r * n;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) acc[c] += row[c];
    }
  }
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const float* acc = part + blk * n;
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) out[c] += acc[c];
  }
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const char* op = "linear_forward";
  check_float(op, x, "x");
  check_float(op, w, "w");
  check_float(op, y, "y");
  int64_t k = x.dim(-1), m = leading(x);
  if (w.rank() != 2 || w.dim(1) != k)
    shape_error(op,
                "weight " + shape_str(w.shape()) + " does not fit input " + shape_str(x.shape()));
  int64_t n = w.dim(0);
  if (y.dim(-1) != n || leading(y) != m)
    shape_error(op, "output " + shape_str(y.shape()) + " should hold [" + std::to_string(m) + ", " +
                        std::to_string(n) + "]");
  if (x.dtype() != w.dtype()) shape_error(op, "x and w must have the same dtype");
  profile::Scope scope("linear_forward", m, n, k);
  Operand bias;
  if (!b.empty()) {
    if (b.dtype() != DType::f32 || b.numel() != n)
      shape_error(op,
                  "bias " + shape_str(b.shape()) + " should be f32 [" + std::to_string(n) + "]");
    bias = {{1, n}, {n, 1}, DType::f32, b.data()};
  }
  run_matmul(plain(x, m, k), transposed(w, k, n), b.empty() ? nullptr : &bias, plain(y, m, n), 1.f,
             0.f);
}

void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  const char* op = "linear_backward_data";
  check_float(op, dy, "dy");
  check_float(op, w, "w");
  check_float(op, dx, "dx");
  if (w.rank() != 2) shape_error(op, "weight must be [out, in], not " + shape_str(w.shape()));
  int64_t n = w.dim(0), k = w.dim(1), m = leading(dy);
  if (dy.dim(-1) != n || dx.dim(-1) != k || leading(dx) != m)
    shape_error(op, "dy " + shape_str(dy.shape()) + ", w " + shape_str(w.shape()) + " and dx " +
                        shape_str(dx.shape()) + " do not fit");
  profile::Scope scope("linear_backward_data", m, n, k);
  run_matmul(plain(dy, m, n), plain(w, n, k), nullptr, plain(dx, m, k), 1.f, 0.f);
}

void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db) {
  const char* op = "linear_backward_weights";
  check_float(op, x, "x");
  check_float(op, dy, "dy");
  int64_t k = x.dim(-1), m = leading(x), n = dy.dim(-1);
  if (leading(dy) != m)
    shape_error(op, "x " + shape_str(x.shape()) + " and dy " + shape_str(dy.shape()) +
                        " have different numbers of rows");
  if (!dw.empty()) {
    if (dw.dtype() != DType::f32 || dw.rank() != 2 || dw.dim(0) != n || dw.dim(1) != k)
      shape_error(op, "dw " + shape_str(dw.shape()) + " should be f32 [" + std::to_string(n) +
                          ", " + std::to_string(k) + "]");
    // dw [N, K] += dyᵀ [N, M] · x [M, K]
    profile::Scope scope("linear_backward_weights", m, n, k);
    run_matmul(transposed(dy, n, m), plain(x, m, k), nullptr, plain(dw, n, k), 1.f, 1.f);
  }
  if (!db.empty()) {
    if (db.dtype() != DType::f32 || db.numel() != n)
      shape_error(op, "db " + shape_str(db.shape()) + " should be f32 [" + std::to_string(n) + "]");
    if (dy.dtype() != DType::f32) shape_error(op, "bias gradient needs an f32 dy");
    profile::Scope scope("bias_grad", m, n);
    column_sums(dy.f32(), m, n, db.f32());
  }
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db) {
  if (!dx.empty()) linear_backward_data(dy, w, dx);
  if (!dw.empty() || !db.empty()) linear_backward_weights(x, dy, dw, db);
}

namespace {

// op(t) as a batched operand: logical [batch..., rows, cols].
Operand batched(const Tensor& t, bool trans) {
  int r = t.rank();
  Operand o;
  o.dtype = t.dtype();
  o.data = t.data();
  int64_t srows = t.dim(-2), scols = t.dim(-1);
  int64_t matrix = srows * scols;
  for (int i = 0; i < r - 2; ++i) o.dims.push_back(t.dim(i));
  // Batch strides: contiguous over whole matrices.
  o.strides.assign(r - 2, 0);
  int64_t s = matrix;
  for (int i = r - 3; i >= 0; --i) {
    o.strides[i] = s;
    s *= t.dim(i);
  }
  if (trans) {
    o.dims.push_back(scols);
    o.dims.push_back(srows);
    o.strides.push_back(1);
    o.strides.push_back(scols);
  } else {
    o.dims.push_back(srows);
    o.dims.push_back(scols);
    o.strides.push_back(scols);
    o.strides.push_back(1);
  }
  return o;
}

}  // namespace

void bmm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
         float beta) {
  const char* op = "bmm";
  check_float(op, a, "a");
  check_float(op, b, "b");
  check_float(op, c, "c");
  if (a.rank() < 2 || a.rank() > 4 || b.rank() != a.rank() || c.rank() != a.rank())
    shape_error(op, "a, b, c must have the same rank, 2 to 4: " + shape_str(a.shape()) + ", " +
                        shape_str(b.shape()) + ", " + shape_str(c.shape()));
  for (int i = 0; i < a.rank() - 2; ++i)
    if (a.dim(i) != b.dim(i) || a.dim(i) != c.dim(i))
      shape_error(op, "batch axes differ: " + shape_str(a.shape()) + ", " + shape_str(b.shape()) +
                          ", " + shape_str(c.shape()));
  Operand oa = batched(a, trans_a), ob = batched(b, trans_b), oc = batched(c, false);
  int r = a.rank();
  int64_t m = oa.dims[r - 2], k = oa.dims[r - 1], n = ob.dims[r - 1];
  if (ob.dims[r - 2] != k || oc.dims[r - 2] != m || oc.dims[r - 1] != n)
    shape_error(op, "op(a) " + shape_str(oa.dims) + " · op(b) " + shape_str(ob.dims) +
                        " does not give c " + shape_str(c.shape()));
  if (a.dtype() != b.dtype()) shape_error(op, "a and b must have the same dtype");
  profile::Scope scope("bmm", m, n, k);
  run_matmul(oa, ob, nullptr, oc, alpha, beta);
}

MatrixView MatrixView::t() const {
  MatrixView v = *this;
  const size_t r = dims.size();
  if (r < 2) throw Error("MatrixView::t: a view needs at least two axes");
  std::swap(v.dims[r - 2], v.dims[r - 1]);
  std::swap(v.strides[r - 2], v.strides[r - 1]);
  return v;
}

MatrixView matrix_view(const Tensor& t) {
  if (t.rank() < 2) throw Error("matrix_view: " + shape_str(t.shape()) + " has fewer than 2 axes");
  MatrixView v;
  v.data = const_cast<void*>(t.data());
  v.dtype = t.dtype();
  v.dims = t.shape();
  v.strides.assign(v.dims.size(), 1);
  for (int i = t.rank() - 2; i >= 0; --i) v.strides[i] = v.strides[i + 1] * v.dims[i + 1];
  return v;
}

MatrixView heads_view(const Tensor& x, int64_t heads, int64_t head_dim, int64_t block) {
  if (x.rank() != 3 || heads < 1 || head_dim < 1 || block < 0 ||
      (block + 1) * heads * head_dim > x.dim(2))
    throw Error("heads_view: block " + std::to_string(block) + " of " + std::to_string(heads) +
                " heads of " + std::to_string(head_dim) + " does not fit " + shape_str(x.shape()));
  const int64_t B = x.dim(0), T = x.dim(1), cols = x.dim(2);
  MatrixView v;
  v.dtype = x.dtype();
  v.dims = {B, heads, T, head_dim};
  v.strides = {T * cols, head_dim, cols, 1};
  v.data = static_cast<char*>(const_cast<void*>(x.data())) +
           static_cast<size_t>(block * heads * head_dim) * dtype_size(x.dtype());
  return v;
}

void bmm(const MatrixView& a, const MatrixView& b, const MatrixView& c, float alpha, float beta,
         Precision precision) {
  const char* op = "bmm";
  const size_t r = a.dims.size();
  auto fits = [](const MatrixView& v) {
    return v.data && v.dims.size() >= 2 && v.dims.size() <= 4 && v.strides.size() == v.dims.size();
  };
  if (!fits(a) || !fits(b) || !fits(c) || b.dims.size() != r || c.dims.size() != r)
    shape_error(op, "views must have the same rank, 2 to 4, and a stride per axis: " +
                        shape_str(a.dims) + ", " + shape_str(b.dims) + ", " + shape_str(c.dims));
  for (size_t i = 0; i + 2 < r; ++i)
    if (a.dims[i] != b.dims[i] || a.dims[i] != c.dims[i])
      shape_error(op, "batch axes differ: " + shape_str(a.dims) + ", " + shape_str(b.dims) + ", " +
                          shape_str(c.dims));
  const int64_t m = a.dims[r - 2], k = a.dims[r - 1], n = b.dims[r - 1];
  if (b.dims[r - 2] != k || c.dims[r - 2] != m || c.dims[r - 1] != n)
    shape_error(
        op, shape_str(a.dims) + " · " + shape_str(b.dims) + " does not give " + shape_str(c.dims));
  if (a.dtype != b.dtype) shape_error(op, "a and b must have the same dtype");
  for (const MatrixView* v : {&a, &b, &c})
    if (v->dtype != DType::f32 && v->dtype != DType::bf16)
      shape_error(op, std::string("views must be f32 or bf16, not ") + dtype_name(v->dtype));
  profile::Scope scope("bmm", m, n, k);
  Operand oa{a.dims, a.strides, a.dtype, a.data}, ob{b.dims, b.strides, b.dtype, b.data};
  Operand oc{c.dims, c.strides, c.dtype, c.data};
  (void)precision;
  run_matmul(oa, ob, nullptr, oc, alpha, beta);
}

void bmm_backward(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& dc,
                  float alpha, Tensor& da, Tensor& db) {
  // With A = op(a), B = op(b): dA = alpha·dC·Bᵀ, dB = alpha·Aᵀ·dC; a stored transposed receives
  // dAᵀ = alpha·B·dCᵀ, and likewise for b.
  if (!da.empty()) {
    if (trans_a)
      bmm(b, trans_b, dc, true, da, alpha);
    else
      bmm(dc, false, b, !trans_b, da, alpha);
  }
  if (!db.empty()) {
    if (trans_b)
      bmm(dc, true, a, trans_a, db, alpha);
    else
      bmm(a, !trans_a, dc, false, db, alpha);
  }
}

}  // namespace vitk::ops

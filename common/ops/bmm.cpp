// Batched matrix products for attention on oneDNN's matmul primitive: whole tensors with
// optional transposes, and strided views that read the heads in place from a fused projection.
// Transposes and head splits are strides, never copies.
#include <string>
#include <utility>

#include "common/error.h"
#include "common/ops/matmul_impl.h"
#include "common/ops/profile.h"

namespace vitk::ops {
namespace {

using detail::Operand;

[[noreturn]] void shape_error(const char* op, const std::string& what) {
  throw Error(std::string(op) + ": " + what);
}

void check_float(const char* op, const Tensor& t, const char* name) {
  if (t.empty()) shape_error(op, std::string(name) + " is empty");
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16)
    shape_error(op, std::string(name) + " must be f32 or bf16, not " + dtype_name(t.dtype()));
  if (t.rank() < 1) shape_error(op, std::string(name) + " must have at least one axis");
}

// c = alpha · a · b + beta · c at a precision: with bf16, f32 operands are rounded first.
void product(const Operand& a, const Operand& b, const Operand& c, float alpha, float beta,
             Precision precision) {
  if (precision == Precision::int8)
    throw Error("bmm: no int8 batched products; they take f32 or bf16 operands");
  if (precision == Precision::bf16) {
    detail::run_matmul(detail::rounded(a, detail::kScratchA), detail::rounded(b, detail::kScratchB),
                       nullptr, c, alpha, beta);
    return;
  }
  if (a.dtype != b.dtype) throw Error("bmm: a and b must have the same dtype");
  detail::run_matmul(a, b, nullptr, c, alpha, beta);
}

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
         float beta, Precision precision) {
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
  profile::Scope scope("bmm", m, n, k);
  product(oa, ob, oc, alpha, beta, precision);
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
  for (const MatrixView* v : {&a, &b, &c})
    if (v->dtype != DType::f32 && v->dtype != DType::bf16)
      shape_error(op, std::string("views must be f32 or bf16, not ") + dtype_name(v->dtype));
  profile::Scope scope("bmm", m, n, k);
  Operand oa{a.dims, a.strides, a.dtype, a.data}, ob{b.dims, b.strides, b.dtype, b.data};
  Operand oc{c.dims, c.strides, c.dtype, c.data};
  product(oa, ob, oc, alpha, beta, precision);
}

void bmm_backward(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& dc,
                  float alpha, Tensor& da, Tensor& db, Precision precision) {
  // With A = op(a), B = op(b): dA = alpha·dC·Bᵀ, dB = alpha·Aᵀ·dC; a stored transposed receives
  // dAᵀ = alpha·B·dCᵀ, and likewise for b.
  if (!da.empty()) {
    if (trans_a)
      bmm(b, trans_b, dc, true, da, alpha, 0.f, precision);
    else
      bmm(dc, false, b, !trans_b, da, alpha, 0.f, precision);
  }
  if (!db.empty()) {
    if (trans_b)
      bmm(dc, true, a, trans_a, db, alpha, 0.f, precision);
    else
      bmm(a, !trans_a, dc, false, db, alpha, 0.f, precision);
  }
}

}  // namespace vitk::ops

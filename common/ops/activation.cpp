// ReLU and exact (erf) GELU on oneDNN's eltwise primitives: JIT-vectorised, and GELU's erf
// accurate to float precision, which a hand-written polynomial would have to prove.
#include "common/error.h"
#include "common/ops/dnnl_context.h"
#include "common/ops/ops.h"
#include "common/ops/profile.h"

namespace vitk::ops {
namespace {

using dnnl::memory;

dnnl::algorithm algo(Activation a) {
  return a == Activation::relu ? dnnl::algorithm::eltwise_relu : dnnl::algorithm::eltwise_gelu_erf;
}

memory::desc flat(int64_t n) {
  return memory::desc({n}, memory::data_type::f32, memory::format_tag::a);
}

dnnl::eltwise_forward::primitive_desc forward_pd(Activation a, int64_t n) {
  return dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algo(a), flat(n), 0.f, 0.f),
      detail::engine());
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != DType::f32 || b.dtype() != DType::f32)
    throw Error(std::string(op) + ": " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                " must be f32 of the same shape");
}

}  // namespace

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  throw UsageError("unknown activation '" + name + "' (expected relu or gelu)");
}

const char* activation_name(Activation a) {
  return a == Activation::relu ? "relu" : "gelu";
}

void activation_forward(Activation a, const Tensor& x, Tensor& y) {
  check_same("activation_forward", x, y);
  const int64_t n = x.numel();
  if (n == 0) return;
  profile::Scope scope("activation_forward", n);
  std::string key = std::string("eltwise_fwd:") + activation_name(a) + ":" + std::to_string(n);
  const auto& prim =
      detail::cached_primitive(key, [&]() { return dnnl::eltwise_forward(forward_pd(a, n)); });
  prim.execute(detail::stream(), {{DNNL_ARG_SRC, detail::wrap(flat(n), x.data())},
                                  {DNNL_ARG_DST, detail::wrap(flat(n), y.data())}});
  detail::stream().wait();
}

void activation_backward(Activation a, const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_same("activation_backward", x, dy);
  check_same("activation_backward", x, dx);
  const int64_t n = x.numel();
  if (n == 0) return;
  profile::Scope scope("activation_backward", n);
  std::string key = std::string("eltwise_bwd:") + activation_name(a) + ":" + std::to_string(n);
  const auto& prim = detail::cached_primitive(key, [&]() {
    dnnl::eltwise_backward::desc desc(algo(a), flat(n), flat(n), 0.f, 0.f);
    return dnnl::eltwise_backward(
        dnnl::eltwise_backward::primitive_desc(desc, detail::engine(), forward_pd(a, n)));
  });
  prim.execute(detail::stream(), {{DNNL_ARG_SRC, detail::wrap(flat(n), x.data())},
                                  {DNNL_ARG_DIFF_DST, detail::wrap(flat(n), dy.data())},
                                  {DNNL_ARG_DIFF_SRC, detail::wrap(flat(n), dx.data())}});
  detail::stream().wait();
}

}  // namespace vitk::ops

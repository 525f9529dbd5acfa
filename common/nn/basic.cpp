// The small layers every model uses: Linear, LayerNorm, Dropout, and parameter initialisation.
#include <cmath>

#include "common/error.h"
#include "common/nn/nn.h"
#include "common/ops/profile.h"

namespace vitk::nn {

Tensor Context::alloc(Shape shape) {
  if (!arena) throw Error("nn::Context has no arena for activations");
  ops::profile::Scope scope("arena_alloc");
  return arena->alloc(std::move(shape));
}

Tensor Context::alloc_uninit(Shape shape, DType dtype) {
  if (!arena) throw Error("nn::Context has no arena for activations");
  return arena->alloc_uninit(std::move(shape), dtype);
}

namespace {

Shape with_last(const Shape& s, int64_t last) {
  Shape out = s;
  out.back() = last;
  return out;
}

}  // namespace

void set_inference_precision(Context& ctx, ops::Precision precision) {
  ctx.int8_weights = precision == ops::Precision::int8;
  ctx.precision = !ctx.int8_weights       ? precision
                  : ops::bf16_supported() ? ops::Precision::bf16
                                          : ops::Precision::f32;
}

ops::Weight weight_of(Parameter& p, const Context& ctx, const Shape& as) {
  const bool packed = p.packed && p.packed->forms() > 0;
  if (p.value_released && !packed)
    throw Error(p.name + ": its f32 value was released when it was quantised to int8; a model " +
                "loaded for int8 runs at int8 only");
  ops::Weight w;
  w.plain_released = p.value_released;
  w.value = as.empty() ? p.value : p.value.reshaped(as);
  w.version = p.version;
  w.pack_f32 = ctx.packed_weights && !ctx.training;
  if (ctx.precision == ops::Precision::bf16 || w.pack_f32) {
    if (!p.packed) p.packed = std::make_shared<ops::WeightCache>();
    w.cache = p.packed.get();
  }
  return w;
}

Linear::Linear(ParamStore& params, const std::string& name, int64_t in_features,
               int64_t out_features, bool with_bias)
    : weight(params.add(name + ".weight", {out_features, in_features})),
      in(in_features),
      out(out_features) {
  if (with_bias) bias = &params.add(name + ".bias", {out_features}, /*decay=*/false);
}

Tensor Linear::forward(Context& ctx, const Tensor& x, DType out_dtype) {
  if (x.rank() < 1 || x.dim(-1) != in)
    throw Error(weight.name + ": input " + shape_str(x.shape()) + " does not end in " +
                std::to_string(in));
  if (out_dtype != DType::f32 &&
      (out_dtype != DType::bf16 || ctx.precision != ops::Precision::bf16))
    throw Error(weight.name + ": a " + dtype_name(out_dtype) + " output needs bf16 products");
  Tensor y = ctx.alloc_uninit(with_last(x.shape(), out), out_dtype);
  if (ctx.int8_weights) {
    if (ctx.training) throw Error(weight.name + ": int8 weights are for inference, not training");
    forward_int8(ctx, x, y);
    x_ = Tensor();
    return y;
  }
  const ops::Weight w = weight_of(weight, ctx);
  const Tensor b = bias ? bias->value : Tensor();
  precision_ = ctx.precision;
  if (ctx.training && ctx.precision == ops::Precision::bf16) {
    // Rounded once into the arena (unless the caller did): the forward product reads it, and the
    // weight gradient again.
    Tensor xb = x;
    if (x.dtype() != DType::bf16) {
      xb = ctx.alloc_uninit(x.shape(), DType::bf16);
      ops::round_to_bf16(x, xb);
    }
    ops::linear_forward(xb, w, b, y, ctx.precision);
    x_ = xb;
    return y;
  }
  ops::linear_forward(x, w, b, y, ctx.precision);
  x_ = ctx.training ? x : Tensor();
  // One copy at inference: once the product has packed the weight, the plain value goes.
  if (ctx.one_copy_of_weights && !ctx.training && !weight.value_released && weight.packed &&
      weight.packed->forms() > 0)
    release_value(weight);
  return y;
}

ops::QuantizedWeight& quantized_of(Parameter& p) {
  // A released value cannot have changed: its int8 form (made from it, or loaded) stays.
  if (!p.quantized || (p.quantized_version != p.version && !p.value_released)) {
    if (p.value_released) throw Error(p.name + ": released without an int8 form");
    try {
      p.quantized = std::make_shared<ops::QuantizedWeight>(ops::quantize_weight(p.value));
    } catch (const Error& e) {
      throw Error(p.name + ": " + e.what());
    }
    p.quantized_version = p.version;
  }
  return *p.quantized;
}

void Linear::forward_int8(Context& ctx, const Tensor& x, Tensor& y) {
  if (x.dtype() != DType::f32)
    throw Error(weight.name + ": int8 products take f32 inputs, not " + dtype_name(x.dtype()));
  const Tensor b = bias ? bias->value : Tensor();
  ops::QuantizedWeight& q = quantized_of(weight);
  if (ctx.one_copy_of_weights && !weight.value_released) release_value(weight);
  if (y.dtype() == DType::f32) {
    ops::linear_forward_int8(x, q, b, y);
    return;
  }
  // A bf16 output (a reader with bf16 products asked for it): the f32 result rounded.
  Tensor y32 = ctx.alloc_uninit(y.shape());
  ops::linear_forward_int8(x, q, b, y32);
  ops::round_to_bf16(y32, y);
}

Tensor Linear::backward(Context& ctx, const Tensor& dy) {
  if (x_.empty()) throw Error(weight.name + ": backward without a training forward");
  return backward_products(ctx, dy, bias ? bias->grad : Tensor());
}

Tensor Linear::backward_rounded(Context& ctx, const Tensor& dy, const Tensor& dy_t) {
  if (x_.empty()) throw Error(weight.name + ": backward without a training forward");
  if (precision_ != ops::Precision::bf16 || dy.dtype() != DType::bf16)
    throw Error(weight.name + ": a rounded backward needs a bf16 forward and a bf16 dy, not " +
                dtype_name(dy.dtype()) + " after a " + ops::precision_name(precision_) +
                " forward");
  return backward_products(ctx, dy, Tensor(), dy_t);  // the bias gradient is the caller's
}

Tensor Linear::backward_products(Context& ctx, const Tensor& dy, Tensor db, const Tensor& dy_t) {
  Tensor dx = ctx.alloc_uninit(x_.shape());
  Context at_forward = ctx;  // the products of the backward run at the forward's precision
  at_forward.precision = precision_;
  ops::linear_backward(x_, weight_of(weight, at_forward), dy, dx, weight.grad, db, precision_,
                       dy_t);
  return dx;
}

LayerNorm::LayerNorm(ParamStore& params, const std::string& name, int64_t dim, float epsilon)
    : weight(params.add(name + ".weight", {dim}, /*decay=*/false)),
      bias(params.add(name + ".bias", {dim}, /*decay=*/false)),
      eps(epsilon) {}

Tensor LayerNorm::forward(Context& ctx, const Tensor& x, DType out) {
  Tensor y = ctx.alloc_uninit(x.shape(), out);
  const int64_t rows = x.numel() / x.dim(-1);
  if (ctx.training) {
    x_ = x;
    mean_ = ctx.alloc_uninit({rows});
    rstd_ = ctx.alloc_uninit({rows});
  } else {
    x_ = mean_ = rstd_ = Tensor();
  }
  ops::layernorm_forward(x, weight.value, bias.value, eps, y, mean_, rstd_);
  return y;
}

Tensor LayerNorm::backward(Context& ctx, const Tensor& dy) {
  return backward(ctx, dy, Tensor());
}

Tensor LayerNorm::backward(Context& ctx, const Tensor& dy, const Tensor& add) {
  if (x_.empty()) throw Error(weight.name + ": backward without a training forward");
  Tensor dx = ctx.alloc_uninit(x_.shape());
  ops::layernorm_backward(x_, weight.value, mean_, rstd_, dy, dx, weight.grad, bias.grad, add);
  return dx;
}

Tensor Dropout::forward(Context& ctx, const Tensor& x) {
  applied_ = ctx.training && p > 0.f;
  if (!applied_) return x;
  if (!ctx.rng) throw Error("dropout in training needs nn::Context::rng");
  Tensor y = ctx.alloc_uninit(x.shape());
  mask_ = ctx.alloc_uninit(x.shape(), DType::u8);
  ops::dropout_forward(x, p, *ctx.rng, y, mask_);
  return y;
}

Tensor Dropout::backward(Context& ctx, const Tensor& dy) {
  if (!applied_) return dy;
  Tensor dx = ctx.alloc_uninit(dy.shape());
  ops::dropout_backward(dy, mask_, p, dx);
  return dx;
}

void init_defaults(ParamStore& params) {
  for (auto& p : params.params()) {
    const bool norm_weight = p.name.find("norm") != std::string::npos && p.name.size() >= 7 &&
                             p.name.compare(p.name.size() - 7, 7, ".weight") == 0;
    if (norm_weight)
      p.value.fill(1.f);
    else
      p.value.zero();
  }
  params.mark_changed();
}

void init_trunc_normal(Tensor& t, float std, ops::Rng& rng, double a, double b) {
  if (!(a < 0.0 && b > 0.0)) throw Error("init_trunc_normal: the interval must contain 0");
  float* v = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x;
    do x = rng.normal() * std;
    while (x < a || x > b);
    v[i] = static_cast<float>(x);
  }
}

}  // namespace vitk::nn

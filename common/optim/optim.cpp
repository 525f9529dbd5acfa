#include "common/optim/optim.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/error.h"

namespace vitk::optim {
namespace {

// Below this many elements a parallel region costs more than the update itself (biases, norms).
constexpr int64_t kParallelMin = 1 << 15;

std::string str(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

void check_store(const ParamStore& params, const char* who) {
  if (!params.finalized())
    throw Error(std::string(who) +
                ": the parameter store is not finalized (call finalize() first)");
  if (!params.has_gradients())
    throw Error(std::string(who) +
                ": the parameter store has no gradients (it was finalized to run a model)");
}

// `what` must hold for x; the comparisons are written so that NaN fails them.
void check_option(bool ok, const char* who, const char* option, const char* what, double x) {
  if (!ok) throw Error(std::string(who) + ": " + option + " must be " + what + ", got " + str(x));
}

void check_lr(float lr, const char* who) {
  check_option(lr >= 0.f && std::isfinite(lr), who, "lr", "finite and >= 0", lr);
}

Tensor state_buffer(const ParamStore& params) {
  return Tensor({static_cast<int64_t>(params.arena_floats())});
}

}  // namespace

AdamW::AdamW(ParamStore& params, AdamWOptions options) : params_(params), options_(options) {
  check_store(params_, "AdamW");
  const auto& o = options_;
  check_option(o.beta1 >= 0.f && o.beta1 < 1.f, "AdamW", "beta1", "in [0, 1)", o.beta1);
  check_option(o.beta2 >= 0.f && o.beta2 < 1.f, "AdamW", "beta2", "in [0, 1)", o.beta2);
  check_option(o.eps > 0.f && std::isfinite(o.eps), "AdamW", "eps", "finite and > 0", o.eps);
  check_option(o.weight_decay >= 0.f && std::isfinite(o.weight_decay), "AdamW", "weight_decay",
               "finite and >= 0", o.weight_decay);
  m_ = state_buffer(params_);
  v_ = state_buffer(params_);
}

void AdamW::step(float lr) {
  check_lr(lr, "AdamW");
  const int64_t t = steps_ + 1;
  // Scalar factors in double, then rounded to f32 once, as PyTorch does with its Python floats.
  const double beta1 = options_.beta1, beta2 = options_.beta2;
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float eps = static_cast<float>(options_.eps);
  const float one_minus_b1 = static_cast<float>(1.0 - beta1);
  const float one_minus_b2 = static_cast<float>(1.0 - beta2);
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  const float bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));

  float* value = params_.values().f32();
  const float* grad = params_.grads().f32();
  float* m = m_.f32();
  float* v = v_.f32();
  for (const Parameter& param : params_.params()) {
    const double lr_p = static_cast<double>(lr) * param.lr_scale;
    const float step_size = static_cast<float>(lr_p / bias_correction1);
    // torch.optim.AdamW multiplies by (1 - lr·wd); skipping it when there is no decay is exact.
    const bool decay = param.decay && options_.weight_decay != 0.f;
    const float keep = static_cast<float>(1.0 - lr_p * options_.weight_decay);
    float* p = value + param.offset;
    const float* g = grad + param.offset;
    float* mp = m + param.offset;
    float* vp = v + param.offset;
    const int64_t n = param.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      float pi = p[i];
      if (decay) pi *= keep;
      const float gi = g[i];
      const float mi = b1 * mp[i] + one_minus_b1 * gi;
      const float vi = b2 * vp[i] + one_minus_b2 * gi * gi;
      mp[i] = mi;
      vp[i] = vi;
      const float denom = std::sqrt(vi) / bc2_sqrt + eps;
      p[i] = pi - step_size * mi / denom;
    }
  }
  params_.mark_changed();
  ++steps_;
}

std::vector<std::pair<std::string, Tensor*>> AdamW::state() {
  return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
}

Sgd::Sgd(ParamStore& params, SgdOptions options) : params_(params), options_(options) {
  check_store(params_, "SGD");
  const auto& o = options_;
  check_option(o.momentum >= 0.f && std::isfinite(o.momentum), "SGD", "momentum", "finite and >= 0",
               o.momentum);
  check_option(o.weight_decay >= 0.f && std::isfinite(o.weight_decay), "SGD", "weight_decay",
               "finite and >= 0", o.weight_decay);
  if (o.nesterov && o.momentum <= 0.f)
    throw Error("SGD: nesterov needs momentum > 0, got momentum " + str(o.momentum));
  // Kept even with momentum 0 so that state() always has the same buffers.
  buf_ = state_buffer(params_);
}

void Sgd::step(float lr) {
  check_lr(lr, "SGD");
  const float momentum = static_cast<float>(options_.momentum);
  const float wd = static_cast<float>(options_.weight_decay);
  const bool use_momentum = momentum != 0.f, nesterov = options_.nesterov;

  float* value = params_.values().f32();
  const float* grad = params_.grads().f32();
  float* buf = buf_.f32();
  for (const Parameter& param : params_.params()) {
    const float lr_p = static_cast<float>(static_cast<double>(lr) * param.lr_scale);
    const bool decay = param.decay && wd != 0.f;
    float* p = value + param.offset;
    const float* g = grad + param.offset;
    float* b = buf + param.offset;
    const int64_t n = param.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      // A local copy: the gradient arena belongs to the caller and must not change.
      float d = g[i];
      if (decay) d += wd * p[i];
      if (use_momentum) {
        // torch starts the buffer as a copy of d; momentum·0 + d is the same value.
        const float bi = momentum * b[i] + d;
        b[i] = bi;
        d = nesterov ? d + momentum * bi : bi;
      }
      p[i] -= lr_p * d;
    }
  }
  params_.mark_changed();
  ++steps_;
}

std::vector<std::pair<std::string, Tensor*>> Sgd::state() {
  return {{"momentum_buffer", &buf_}};
}

WarmupCosine::WarmupCosine(float base_lr, int64_t warmup_steps, int64_t total_steps, float min_lr)
    : base_(base_lr), min_(min_lr), warmup_(warmup_steps), total_(total_steps) {
  const char* who = "WarmupCosine";
  check_option(base_lr >= 0.f && std::isfinite(base_lr), who, "base_lr", "finite and >= 0",
               base_lr);
  check_option(min_lr >= 0.f && min_lr <= base_lr, who, "min_lr", "in [0, base_lr]", min_lr);
  check_option(warmup_steps >= 0, who, "warmup_steps", ">= 0", static_cast<double>(warmup_steps));
  if (total_steps <= warmup_steps)
    throw Error(std::string(who) + ": total_steps must be > warmup_steps (" +
                std::to_string(warmup_steps) + "), got " + std::to_string(total_steps));
}

float WarmupCosine::lr(int64_t step) const {
  if (step < 0) throw Error("WarmupCosine: negative step " + std::to_string(step));
  if (step < warmup_)
    return static_cast<float>(static_cast<double>(base_) * static_cast<double>(step + 1) /
                              static_cast<double>(warmup_));
  double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  if (progress > 1.0) progress = 1.0;
  const double pi = std::acos(-1.0);
  return static_cast<float>(min_ + 0.5 * (static_cast<double>(base_) - min_) *
                                       (1.0 + std::cos(pi * progress)));
}

InverseSqrt::InverseSqrt(int64_t d_model, int64_t warmup_steps, float factor)
    : d_model_(static_cast<double>(d_model)),
      warmup_(static_cast<double>(warmup_steps)),
      factor_(factor) {
  const char* who = "InverseSqrt";
  check_option(d_model > 0, who, "d_model", "> 0", static_cast<double>(d_model));
  check_option(warmup_steps > 0, who, "warmup_steps", "> 0", static_cast<double>(warmup_steps));
  check_option(factor > 0.f && std::isfinite(factor), who, "factor", "finite and > 0", factor);
}

float InverseSqrt::lr(int64_t step) const {
  if (step < 0) throw Error("InverseSqrt: negative step " + std::to_string(step));
  const double n = static_cast<double>(step + 1);
  const double rate = std::min(1.0 / std::sqrt(n), n * std::pow(warmup_, -1.5));
  return static_cast<float>(factor_ / std::sqrt(d_model_) * rate);
}

}  // namespace vitk::optim

#include "common/optim/ema.h"

#include <cmath>
#include <utility>

#include "common/error.h"

namespace vitk::optim {
namespace {

constexpr int64_t kParallelMin = 1 << 15;

void check_store(const ParamStore& params, const Tensor& values) {
  if (!params.finalized())
    throw Error("ModelEma: the parameter store is not finalized (call finalize() first)");
  if (values.numel() != static_cast<int64_t>(params.arena_floats()))
    throw Error("ModelEma: the parameter store has " + std::to_string(params.arena_floats()) +
                " floats, the average " + std::to_string(values.numel()));
}

}  // namespace

ModelEma::ModelEma(const ParamStore& params, double decay) : decay_(decay) {
  if (!(decay >= 0.0 && decay <= 1.0))
    throw Error("ModelEma: decay must be in [0, 1], got " + std::to_string(decay));
  if (!params.finalized())
    throw Error("ModelEma: the parameter store is not finalized (call finalize() first)");
  values_ = params.values().clone();
}

void ModelEma::update(const ParamStore& params) {
  check_store(params, values_);
  const float keep = static_cast<float>(decay_);
  const float take = static_cast<float>(1.0 - decay_);
  float* e = values_.f32();
  const float* w = params.values().f32();
  const int64_t n = values_.numel();
  // Elementwise and independent of the thread count, so a resumed run matches bit for bit.
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float a = e[i] * keep;
    const float b = take * w[i];
    e[i] = a + b;
  }
}

void ModelEma::reset(const ParamStore& params) {
  check_store(params, values_);
  values_.copy_from(params.values());
}

void ModelEma::swap_with(ParamStore& params) {
  check_store(params, values_);
  float* e = values_.f32();
  float* w = params.values().f32();
  const int64_t n = values_.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) std::swap(e[i], w[i]);
  params.mark_changed();
}

WithEma::WithEma(Optimizer& inner, ModelEma& ema, ParamStore& params)
    : inner_(inner), ema_(ema), params_(params) {
  steps_ = inner.steps();
}

void WithEma::step(float lr) {
  inner_.step(lr);
  ema_.update(params_);
  steps_ = inner_.steps();
}

std::vector<std::pair<std::string, Tensor*>> WithEma::state() {
  auto s = inner_.state();
  s.emplace_back("ema", &ema_.values());
  return s;
}

void WithEma::sync_steps() {
  inner_.set_steps(steps_);
}

}  // namespace vitk::optim

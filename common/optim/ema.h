#pragma once
// An exponential moving average of a model's weights, as timm's ModelEmaV2: after every optimizer
// step, ema = decay · ema + (1 − decay) · w, over the whole parameter arena. The average usually
// evaluates better than the raw weights late in training; vitk evaluates both.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/optim/optim.h"
#include "common/params.h"

namespace vitk::optim {

class ModelEma {
 public:
  // Starts as a copy of the store's current weights (finalized store; decay in [0, 1]).
  ModelEma(const ParamStore& params, double decay);
  // ema = decay · ema + (1 − decay) · w, in f32 with the two factors rounded once from double, as
  // PyTorch's `ema * decay + (1. - decay) * w`.
  void update(const ParamStore& params);
  // Replaces the average by the store's current weights.
  void reset(const ParamStore& params);
  // Exchanges the average with the store's weights: call once to evaluate the average, once more
  // to continue training the raw weights. Exact (a swap, not a copy through arithmetic).
  void swap_with(ParamStore& params);

  double decay() const { return decay_; }
  Tensor& values() { return values_; }  // flat f32 [arena_floats], the arena's layout
  const Tensor& values() const { return values_; }

 private:
  Tensor values_;
  double decay_;
};

// An optimizer that also carries the EMA of the weights as one more state buffer ("ema"), so that
// one checkpoint (io::save_checkpoint / load_checkpoint with this as the optimizer) holds
// everything an exact resume needs: /optimizer/exp_avg/..., /optimizer/exp_avg_sq/...,
// /optimizer/ema/<parameter name>. step() steps the inner optimizer and then updates the average.
class WithEma : public Optimizer {
 public:
  WithEma(Optimizer& inner, ModelEma& ema, ParamStore& params);
  void step(float lr) override;
  std::string kind() const override { return inner_.kind(); }
  std::vector<std::pair<std::string, Tensor*>> state() override;
  // Keeps the inner optimizer's step count in sync (a checkpoint load sets it here).
  void sync_steps();

 private:
  Optimizer& inner_;
  ModelEma& ema_;
  ParamStore& params_;
};

}  // namespace vitk::optim

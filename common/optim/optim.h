#pragma once
// Optimizers as flat loops over the parameter arena, and learning-rate schedules.
// Update rules follow PyTorch's torch.optim.AdamW and torch.optim.SGD exactly, so a run can be
// compared step for step.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/params.h"

namespace vitk::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter from its gradient, with base learning rate lr (each parameter
  // scales it by its lr_scale). Increments step().
  virtual void step(float lr) = 0;
  virtual std::string kind() const = 0;  // "adamw" | "sgd"
  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }
  // Named state buffers, each a flat f32 tensor with the parameter arena's layout, for checkpoints
  // (PyTorch's names: "exp_avg", "exp_avg_sq", "momentum_buffer").
  virtual std::vector<std::pair<std::string, Tensor*>> state() = 0;

 protected:
  int64_t steps_ = 0;
};

struct AdamWOptions {
  // Doubles, as PyTorch's Python floats: 1 − β is formed in double before rounding to f32.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // decoupled: p -= lr·wd·p, only for parameters with decay = true
};

class AdamW : public Optimizer {
 public:
  AdamW(ParamStore& params, AdamWOptions options);
  void step(float lr) override;
  std::string kind() const override { return "adamw"; }
  std::vector<std::pair<std::string, Tensor*>> state() override;
  const AdamWOptions& options() const { return options_; }

 private:
  ParamStore& params_;
  AdamWOptions options_;
  Tensor m_, v_;
};

struct SgdOptions {
  double momentum = 0.9;
  double weight_decay = 0.0;  // L2 added to the gradient, as torch.optim.SGD (decay = true only)
  bool nesterov = false;
};

class Sgd : public Optimizer {
 public:
  Sgd(ParamStore& params, SgdOptions options);
  void step(float lr) override;
  std::string kind() const override { return "sgd"; }
  std::vector<std::pair<std::string, Tensor*>> state() override;
  const SgdOptions& options() const { return options_; }

 private:
  ParamStore& params_;
  SgdOptions options_;
  Tensor buf_;
};

// Learning rate as a function of the step (0-based: the rate used for the step-th update).
class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual float lr(int64_t step) const = 0;
};

// Linear warmup from 0 to base_lr over warmup_steps, then cosine decay to min_lr at total_steps
// (held at min_lr after). lr(s) = base·(s+1)/warmup during warmup, as timm's per-step warmup.
class WarmupCosine : public Schedule {
 public:
  WarmupCosine(float base_lr, int64_t warmup_steps, int64_t total_steps, float min_lr = 0.f);
  float lr(int64_t step) const override;

 private:
  float base_, min_;
  int64_t warmup_, total_;
};

// "Attention Is All You Need", eq. 3: factor · d_model^-0.5 · min(n^-0.5, n · warmup^-1.5) with
// n = step + 1.
class InverseSqrt : public Schedule {
 public:
  InverseSqrt(int64_t d_model, int64_t warmup_steps, float factor = 1.f);
  float lr(int64_t step) const override;

 private:
  double d_model_, warmup_, factor_;
};

}  // namespace vitk::optim

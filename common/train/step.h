#pragma once
// The one training step, as every trainer and the step benchmarks (`vitk bench vit-step`,
// `mt-step`) run it on a task's current batch:
//   arena reset -> forward and loss -> loss finite? -> zero grads -> backward -> clip
//   -> learning rate of this step -> optimizer step
#include <cstdint>

#include "common/error.h"
#include "common/optim/optim.h"
#include "common/tensor.h"
#include "common/train/task.h"

namespace vitk::train {

// Thrown by Step::run before anything is updated when the loss is NaN or infinite; the trainer
// turns it into a message that says where and what to do.
class NonFiniteLoss : public Error {
 public:
  NonFiniteLoss(double loss, int64_t step);
  double loss;
  int64_t step;  // the step that was being taken (1-based)
};

class Step {
 public:
  // clip_grad > 0: the gradients' global L2 norm is clipped to it before the update.
  Step(Task& task, optim::Optimizer& optimizer, const optim::Schedule& schedule, float clip_grad,
       ops::Precision precision);
  // One step on the task's current batch; the dropout draws come from rng.
  StepStats run(ops::Rng& rng);
  float lr() const { return lr_; }  // of the last step
  Arena& arena() { return arena_; }

 private:
  Task& task_;
  optim::Optimizer& optimizer_;
  const optim::Schedule& schedule_;
  float clip_grad_;
  ops::Precision precision_;
  Arena arena_;  // the activations, reset at the start of every step
  float lr_ = 0;
};

// A learning rate that does not change (the benchmarks').
class ConstantRate : public optim::Schedule {
 public:
  explicit ConstantRate(float lr) : lr_(lr) {}
  float lr(int64_t) const override { return lr_; }

 private:
  float lr_;
};

}  // namespace vitk::train

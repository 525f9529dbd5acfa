#include "common/train/step.h"

#include <cmath>
#include <string>

#include "common/ops/profile.h"
#include "common/progress.h"

namespace vitk::train {

NonFiniteLoss::NonFiniteLoss(double value, int64_t at)
    : Error("the training loss is " + format_general(value) + " at step " + std::to_string(at)),
      loss(value),
      step(at) {}

Step::Step(Task& task, optim::Optimizer& optimizer, const optim::Schedule& schedule,
           float clip_grad, ops::Precision precision)
    : task_(task),
      optimizer_(optimizer),
      schedule_(schedule),
      clip_grad_(clip_grad),
      precision_(precision) {}

StepStats Step::run(ops::Rng& rng) {
  arena_.reset();
  nn::Context ctx;
  ctx.training = true;
  ctx.arena = &arena_;
  ctx.rng = &rng;
  ctx.precision = precision_;
  const int64_t step = optimizer_.steps();
  const StepStats stats = task_.forward_loss(ctx, step);
  if (!std::isfinite(stats.loss)) throw NonFiniteLoss(stats.loss, step + 1);
  ParamStore& params = task_.params();
  {
    ops::profile::Scope scope("zero_grad");
    params.zero_grad();
  }
  {
    ops::profile::Scope scope("model backward (rest)");
    task_.backward(ctx);
  }
  ops::profile::Scope scope("optimizer");
  if (clip_grad_ > 0) ops::clip_grad_norm(params.grads(), clip_grad_);
  lr_ = schedule_.lr(step);
  optimizer_.step(lr_);
  return stats;
}

}  // namespace vitk::train

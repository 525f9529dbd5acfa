#include "common/train/step.h"

#include <cmath>
#include <cstring>
#include <string>

#include "common/dist/grad_reducer.h"
#include "common/ops/profile.h"
#include "common/progress.h"
#include "common/timer.h"

namespace vitk::train {

NonFiniteLoss::NonFiniteLoss(double value, int64_t at)
    : Error("the training loss is " + format_general(value) + " at step " + std::to_string(at)),
      loss(value),
      step(at) {}

// Keeps a copy of every gradient range at the moment it is declared final, and compares it with
// the gradients once backward is over.
class Step::ClaimCheck {
 public:
  explicit ClaimCheck(ParamStore& params) : params_(params) {}
  void begin() {
    watermark_ = params_.arena_floats();
    copy_.assign(watermark_, 0.f);
  }
  void claim(size_t offset) {
    ++claims_;
    if (offset >= watermark_) return;
    const float* g = params_.grads().f32();
    std::memcpy(copy_.data() + offset, g + offset, (watermark_ - offset) * sizeof(float));
    watermark_ = offset;
  }
  void check() const {
    const float* g = params_.grads().f32();
    for (const Parameter& p : params_.params()) {
      if (p.offset < watermark_) continue;
      const size_t n = static_cast<size_t>(p.numel());
      if (std::memcmp(copy_.data() + p.offset, g + p.offset, n * sizeof(float)) != 0)
        throw Error(p.name + ": its gradient changed after the model's backward declared it final");
    }
  }

  int64_t claims() const { return claims_; }

 private:
  ParamStore& params_;
  int64_t claims_ = 0;
  size_t watermark_ = 0;
  std::vector<float> copy_;
};

Step::Step(Task& task, optim::Optimizer& optimizer, const optim::Schedule& schedule,
           const StepOptions& options)
    : task_(task),
      optimizer_(optimizer),
      schedule_(schedule),
      o_(options),
      world_(options.world ? *options.world : dist::world()) {
  if (o_.accum < 1) throw UsageError("--accum-steps must be at least 1");
  if (o_.precision == ops::Precision::int8)
    throw UsageError("--precision int8 is for inference; train in f32 or bf16");
  ParamStore& params = task_.params();
  if (world_.size() > 1)
    reducer_ = std::make_unique<dist::GradReducer>(world_, params.grads().f32(),
                                                   params.arena_floats(), o_.bucket_bytes);
  if (o_.check_final_claims) check_ = std::make_unique<ClaimCheck>(params);
}

Step::~Step() = default;

int64_t Step::final_claims() const {
  return check_ ? check_->claims() : 0;
}

StepStats Step::run(ops::Rng& rng, bool stop) {
  const int64_t step = optimizer_.steps();
  ParamStore& params = task_.params();
  {
    ops::profile::Scope scope("zero_grad");
    params.zero_grad();
  }
  if (reducer_) reducer_->begin();
  if (check_) check_->begin();
  StepStats total;
  for (int micro = 0; micro < o_.accum; ++micro) {
    arena_.reset();
    nn::Context ctx;
    ctx.training = true;
    ctx.arena = &arena_;
    ctx.rng = &rng;
    ctx.precision = o_.precision;
    // Only the last backward finishes gradients: the buckets start during it.
    if (micro + 1 == o_.accum && (reducer_ || check_))
      ctx.grads_final = [this](size_t offset) {
        if (check_) check_->claim(offset);
        if (reducer_) reducer_->ready_from(offset);
      };
    const StepStats s = task_.forward_loss(ctx, step, micro);
    // A single process stops before backward, as it always has; ranks agree below.
    if (world_.size() == 1 && o_.accum == 1 && !std::isfinite(s.loss))
      throw NonFiniteLoss(s.loss, step + 1);
    total += s;
    ops::profile::Scope scope("model backward (rest)");
    task_.backward(ctx);
  }
  if (check_) check_->check();
  if (reducer_) {
    ops::profile::Scope scope("all-reduce wait");
    Timer t;
    reducer_->finish();
    // The step's figures and the stop requests of every rank, in one small sum.
    double v[5] = {total.loss_sum, static_cast<double>(total.items),
                   static_cast<double>(total.correct), static_cast<double>(total.units),
                   stop ? 1.0 : 0.0};
    world_.allreduce_sum(v, 5);
    total.loss_sum = v[0];
    total.items = static_cast<int64_t>(v[1]);
    total.correct = static_cast<int64_t>(v[2]);
    total.units = static_cast<int64_t>(v[3]);
    stop = v[4] > 0;
    reduce_seconds_ = t.seconds();
  }
  stop_requested_ = stop;
  total.loss = total.items > 0 ? total.loss_sum / static_cast<double>(total.items) : 0.0;
  if (!std::isfinite(total.loss)) throw NonFiniteLoss(total.loss, step + 1);
  ops::profile::Scope scope("optimizer");
  if (o_.clip_grad > 0) ops::clip_grad_norm(params.grads(), o_.clip_grad);
  lr_ = schedule_.lr(step);
  optimizer_.step(lr_);
  return total;
}

}  // namespace vitk::train

#pragma once
// The one training step, as every trainer and the step benchmarks (`vitk bench vit-step`,
// `mt-step`) run it on a task's current batch:
//   zero grads -> for each of this rank's micro-batches: arena reset, forward and loss, backward
//   -> the gradients summed over the ranks (in buckets, started while the last backward runs)
//   -> the step's figures and stop requests summed over the ranks -> loss finite? -> clip
//   -> learning rate of this step -> optimizer step
// In a world of one with one micro-batch this is forward, backward and update, nothing more.
#include <cstdint>
#include <memory>
#include <vector>

#include "common/dist/world.h"
#include "common/error.h"
#include "common/optim/optim.h"
#include "common/tensor.h"
#include "common/train/task.h"

namespace vitk::dist {
class GradReducer;
}

namespace vitk::train {

// Thrown by Step::run before anything is updated when the loss is NaN or infinite (on any rank:
// every rank throws at the same step); the trainer turns it into a message that says where and
// what to do.
class NonFiniteLoss : public Error {
 public:
  NonFiniteLoss(double loss, int64_t step);
  double loss;
  int64_t step;  // the step that was being taken (1-based)
};

struct StepOptions {
  float clip_grad = 0;  // > 0: the gradients' global L2 norm is clipped to it before the update
  ops::Precision precision = ops::Precision::f32;
  int accum = 1;                    // micro-batches per step (the task's Partition::accum)
  dist::World* world = nullptr;     // null: a world of one
  size_t bucket_bytes = 25u << 20;  // all-reduce bucket size (--bucket-mb)
  // Tests: check that every gradient a model's backward declared final (nn::Context::
  // grads_final) was not written again by the rest of that backward; vitk::Error naming the first
  // parameter that was.
  bool check_final_claims = false;
};

class Step {
 public:
  Step(Task& task, optim::Optimizer& optimizer, const optim::Schedule& schedule,
       const StepOptions& options);
  ~Step();
  // One step on the task's current batch; the dropout draws come from rng. `stop`: this process
  // was asked to stop (Ctrl-C, SIGTERM); stop_requested() then says whether any rank was.
  StepStats run(ops::Rng& rng, bool stop = false);
  bool stop_requested() const { return stop_requested_; }
  float lr() const { return lr_; }  // of the last step
  Arena& arena() { return arena_; }
  double reduce_seconds() const { return reduce_seconds_; }  // waiting for the last all-reduce
  // With check_final_claims: how many times the model's backwards declared gradients final.
  int64_t final_claims() const;

 private:
  class ClaimCheck;
  Task& task_;
  optim::Optimizer& optimizer_;
  const optim::Schedule& schedule_;
  StepOptions o_;
  dist::World& world_;
  std::unique_ptr<dist::GradReducer> reducer_;  // with more than one rank
  std::unique_ptr<ClaimCheck> check_;           // check_final_claims
  Arena arena_;                                 // the activations, reset before every micro-batch
  float lr_ = 0;
  bool stop_requested_ = false;
  double reduce_seconds_ = 0;
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

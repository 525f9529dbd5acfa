#pragma once
// Two training steps of a task with train::Step's check of the final-gradient claims on (the
// claims a model's backward makes for data parallelism, nn::Context::grads_final), for the tests
// of each model's claims and of the check itself.
#include <cstdint>
#include <memory>

#include "common/dist/world.h"
#include "common/train/step.h"

namespace vitk::test {

// Two steps of `task` with the check on; returns the claims made.
inline int64_t checked_steps(train::Task& task) {
  task.setup(nullptr, 1, train::Partition{});
  const std::unique_ptr<vitk::optim::Optimizer> optimizer = task.make_optimizer();
  const train::ConstantRate schedule(1e-3f);
  vitk::dist::World one;
  train::StepOptions so;
  so.world = &one;
  so.check_final_claims = true;
  train::Step step(task, *optimizer, schedule, so);
  vitk::ops::Rng rng(7);
  for (int i = 0; i < 2; ++i) {
    task.next_batch();
    step.run(rng);
  }
  return step.final_claims();
}

}  // namespace vitk::test

#pragma once
// Timing of a training step for `vitk bench vit-step` and `vitk bench mt-step`: two untimed
// warm-up steps, then `rounds` rounds of `steps` steps (wall clock and the process's CPU time),
// then an optional profiled round that splits the step into the ops' profile scopes.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/ops/ops.h"
#include "common/ops/profile.h"
#include "common/train/task.h"

namespace vitk::bench {

struct StepTiming {
  int steps = 10;         // timed steps per round
  int rounds = 5;         // the report gives the best and the median round
  bool breakdown = true;  // a profiled round after the timed ones
};

struct StepResult {
  std::vector<double> round_ms;      // ms per step of each round (wall clock)
  std::vector<double> round_cpu_ms;  // CPU ms of the process per step, all threads
  double best_ms = 0, median_ms = 0, best_cpu_ms = 0;
  std::vector<ops::profile::Entry> parts;  // the profiled round, summed over its steps
  int64_t part_steps = 0;                  // steps of the profiled round (0: none)
  int64_t parameters = 0;  // of the task's model, set by the model's bench (0: not known)
};

// Runs `step` as above; logs one line per round to `log` when given.
StepResult time_steps(const std::function<void()>& step, const StepTiming& timing,
                      std::ostream* log = nullptr);

// The training step of `task` (train::Step: the one every trainer runs) on its batches, with the
// task's optimizer at a constant learning rate of 1e-3 and no clipping, timed as above. The task
// is set up here (a new model, seed 1).
StepResult time_training_steps(train::Task& task, ops::Precision precision,
                               const StepTiming& timing, std::ostream* log = nullptr);

// "<name> model: <model>; N parameters (M MB of f32 gradients per step)": what a data-parallel
// run all-reduces every step (common/dist/README.md).
void print_step_model(std::ostream& out, const std::string& name, const std::string& model,
                      const StepResult& r);

// "<name>: <what>, N threads: best X ms/step (Y <unit>/s), median ...", then the breakdown table.
// units_per_step: images or target tokens per step.
void print_step_result(std::ostream& out, const std::string& name, const std::string& what,
                       double units_per_step, const std::string& unit, const StepResult& r);

}  // namespace vitk::bench

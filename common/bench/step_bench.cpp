#include "common/bench/step_bench.h"

#include <algorithm>
#include <cstdio>
#include <ostream>

#include "common/ops/ops.h"
#include "common/ops/profile.h"
#include "common/timer.h"
#include "common/train/step.h"

namespace vitk::bench {

StepResult time_steps(const std::function<void()>& step, const StepTiming& o, std::ostream* log) {
  StepResult r;
  // Two untimed steps, as the PyTorch side of tests/bench skips two: the first creates the
  // primitives and grows the activation arena chunk by chunk; the second replaces the chunks by
  // one block of the high-water size (Arena::reset), whose pages it faults in (~0.6 s for the
  // ViT step's 1.3 GB). From the third step on, a step allocates nothing.
  step();
  step();
  for (int round = 0; round < o.rounds; ++round) {
    Timer t;
    const double cpu0 = process_cpu_seconds();
    for (int i = 0; i < o.steps; ++i) step();
    r.round_ms.push_back(t.seconds() * 1e3 / o.steps);
    r.round_cpu_ms.push_back((process_cpu_seconds() - cpu0) * 1e3 / o.steps);
    if (log) {
      char line[128];
      std::snprintf(line, sizeof line, "round %d: %.1f ms/step, %.1f CPU ms/step\n", round + 1,
                    r.round_ms.back(), r.round_cpu_ms.back());
      *log << line << std::flush;
    }
  }
  r.best_ms = *std::min_element(r.round_ms.begin(), r.round_ms.end());
  r.best_cpu_ms = *std::min_element(r.round_cpu_ms.begin(), r.round_cpu_ms.end());
  r.median_ms = median(r.round_ms);
  if (o.breakdown) {
    ops::profile::clear();
    ops::profile::enable(true);
    for (int i = 0; i < o.steps; ++i) step();
    ops::profile::enable(false);
    r.parts = ops::profile::entries();
    r.part_steps = o.steps;
  }
  return r;
}

StepResult time_training_steps(train::Task& task, ops::Precision precision,
                               const StepTiming& timing, std::ostream* log) {
  task.setup(nullptr, 1, train::Partition{});
  const std::unique_ptr<optim::Optimizer> optimizer = task.make_optimizer();
  const train::ConstantRate schedule(1e-3f);
  train::StepOptions so;
  so.precision = precision;
  dist::World one;  // the benchmark is one process's step
  so.world = &one;
  train::Step step(task, *optimizer, schedule, so);
  ops::Rng rng(1);  // dropout
  return time_steps(
      [&] {
        task.next_batch();
        step.run(rng);
      },
      timing, log);
}

void print_step_result(std::ostream& out, const std::string& name, const std::string& what,
                       double units_per_step, const std::string& unit, const StepResult& r) {
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: %s, %d threads: best %.1f ms/step (%.1f %s/s), median %.1f ms/step; best "
                "%.1f CPU ms/step\n",
                name.c_str(), what.c_str(), ops::num_threads(), r.best_ms,
                1e3 * units_per_step / r.best_ms, unit.c_str(), r.median_ms, r.best_cpu_ms);
  out << line;
  ops::profile::print_breakdown(out, r.parts, r.part_steps, "one profiled round");
}

void print_step_model(std::ostream& out, const std::string& name, const std::string& model,
                      const StepResult& r) {
  char line[128];
  std::snprintf(line, sizeof line, "%lld parameters (%.1f MB of f32 gradients per step)",
                static_cast<long long>(r.parameters), 4e-6 * static_cast<double>(r.parameters));
  out << name << " model: " << model << "; " << line << "\n";
}

}  // namespace vitk::bench

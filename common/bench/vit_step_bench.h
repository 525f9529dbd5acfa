#pragma once
// `vitk bench vit-step`: one training step (forward, cross-entropy, backward, AdamW) of the small
// ViT of the Fashion-MNIST recipe (width 192, depth 6, 3 heads, MLP 768, patch 4, 28×28×1, batch
// 128), on random images, with an optional per-part breakdown of where the time goes.
#include <iosfwd>
#include <string>
#include <vector>

#include "common/ops/ops.h"

namespace vitk::bench {

struct VitStepOptions {
  int64_t batch = 128;
  int steps = 10;         // timed steps per round (after one untimed warm-up step)
  int rounds = 5;         // the report gives the best and the median round
  float drop_path = 0.f;  // the recipe's config uses 0.05; PyTorch's script has none
  bool bf16 = false;      // bf16 matrix products (not yet available)
  bool breakdown = true;  // a profiled round after the timed ones
};

struct VitStepResult {
  std::vector<double> round_ms;      // ms per step of each round (wall clock)
  std::vector<double> round_cpu_ms;  // CPU ms of the process per step, all threads
  double best_ms = 0, median_ms = 0, best_cpu_ms = 0;
  std::vector<std::pair<std::string, double>> parts;  // name, ms per step (exclusive)
  std::vector<int64_t> part_calls;                    // calls per step
};

VitStepResult run_vit_step_bench(const VitStepOptions& options, std::ostream* log = nullptr);
void print_vit_step(std::ostream& out, const VitStepOptions& options, const VitStepResult& r);

}  // namespace vitk::bench

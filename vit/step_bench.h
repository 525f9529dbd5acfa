#pragma once
// `vitk bench vit-step`: the training step of `vitk train` (train::Step on a VitTask: forward,
// cross-entropy, backward, AdamW) timed on a ViT, by default the small one of the Fashion-MNIST
// recipe (width 192, depth 6, 3 heads, MLP 768, patch 4, 28×28×1, batch 128), and one batch of
// random images held in memory, with an optional per-part breakdown of where the time goes.
#include <cstdint>
#include <iosfwd>

#include "common/bench/step_bench.h"
#include "common/ops/ops.h"
#include "vit/vit.h"

namespace vitk::vit {

struct StepBenchOptions {
  VitConfig model = small_model();
  int64_t batch = 128;
  bench::StepTiming timing;
  ops::Precision precision = ops::Precision::f32;  // of the matrix products

  // Width 192, depth 6, 3 heads, MLP 768, patch 4, 28×28×1, 10 classes; no stem, convolutions,
  // dropout, stochastic depth or patch dropout (PyTorch's side in tests/bench has none).
  static VitConfig small_model();
};

bench::StepResult run_step_bench(const StepBenchOptions& options, std::ostream* log = nullptr);
void print_step_bench(std::ostream& out, const StepBenchOptions& options,
                      const bench::StepResult& r);

}  // namespace vitk::vit

#pragma once
// `vitk bench vit-step`: the training step of `vitk train` (train::Step on a VitTask: forward,
// cross-entropy, backward, AdamW) timed on the small ViT of the Fashion-MNIST recipe (width 192,
// depth 6, 3 heads, MLP 768, patch 4, 28×28×1, batch 128) and one batch of random images held in
// memory, with an optional per-part breakdown of where the time goes.
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "common/bench/step_bench.h"
#include "common/ops/ops.h"

namespace vitk::vit {

struct StepBenchOptions {
  int64_t batch = 128;
  float drop_path = 0.f;   // the recipe's config uses 0.05; PyTorch's script has none
  float patch_drop = 0.f;  // patch dropout (vit/vit.h): the blocks see fewer tokens
  bench::StepTiming timing;
  ops::Precision precision = ops::Precision::f32;  // of the matrix products
  std::vector<int64_t> stem_channels;              // a convolutional stem (vit/vit.h); none
  std::vector<int64_t> stem_strides;               // its strides (empty: 2 for each stage)
  std::vector<int64_t> pos_conv_blocks;            // positional convolutions (vit/vit.h)
  std::vector<int64_t> ffn_conv_blocks;            // MLP convolutions (vit/vit.h)
};

bench::StepResult run_step_bench(const StepBenchOptions& options, std::ostream* log = nullptr);
void print_step_bench(std::ostream& out, const StepBenchOptions& options,
                      const bench::StepResult& r);

}  // namespace vitk::vit

#pragma once
// `vitk bench vit-step`: one training step (forward, cross-entropy, backward, AdamW) of the small
// ViT of the Fashion-MNIST recipe (width 192, depth 6, 3 heads, MLP 768, patch 4, 28×28×1, batch
// 128), on random images, with an optional per-part breakdown of where the time goes.
#include <iosfwd>
#include <vector>

#include "common/bench/step_bench.h"
#include "common/ops/ops.h"

namespace vitk::bench {

struct VitStepOptions {
  int64_t batch = 128;
  float drop_path = 0.f;   // the recipe's config uses 0.05; PyTorch's script has none
  float patch_drop = 0.f;  // patch dropout (vit/vit.h): the blocks see fewer tokens
  StepTiming timing;
  ops::Precision precision = ops::Precision::f32;  // of the matrix products
  std::vector<int64_t> stem_channels;              // a convolutional stem (vit/vit.h); none
  std::vector<int64_t> stem_strides;               // its strides (empty: 2 for each stage)
  std::vector<int64_t> pos_conv_blocks;            // positional convolutions (vit/vit.h)
  std::vector<int64_t> ffn_conv_blocks;            // MLP convolutions (vit/vit.h)
};

StepResult run_vit_step_bench(const VitStepOptions& options, std::ostream* log = nullptr);
void print_vit_step(std::ostream& out, const VitStepOptions& options, const StepResult& r);

}  // namespace vitk::bench

#pragma once
// `vitk bench layers`: one encoder layer at ViT-B/16 size and one decoder layer at Transformer-base
// size, forward (inference) and forward + backward (training step without the optimizer).
#include <iosfwd>
#include <string>
#include <vector>

#include "common/ops/ops.h"

namespace vitk::bench {

struct LayerBenchRow {
  std::string layer;   // "vit-b16-encoder", "transformer-base-decoder"
  std::string pass;    // "forward", "forward+backward"
  std::string shape;   // "B=8 T=197 d=768 h=12 ff=3072"
  double seconds = 0;  // median
};

// forward+backward marks the weights changed after every call, as an optimizer step would, so
// that bf16 pays its weight packing once per step as in training.
std::vector<LayerBenchRow> run_layer_bench(int repeats, double min_seconds,
                                           ops::Precision precision = ops::Precision::f32);
// Tab-separated: layer, pass, shape, seconds — read by tests/bench/core_vs_pytorch.py.
void print_layer_rows(std::ostream& out, const std::vector<LayerBenchRow>& rows);

}  // namespace vitk::bench

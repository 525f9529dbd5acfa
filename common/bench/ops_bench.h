#pragma once
// `vitk bench ops`: GFLOP/s of the linear layer's three products (forward, backward-data,
// backward-weights) next to a bare oneDNN matmul of the same shape with plain layouts, for the
// shapes of ViT-B/16 and Transformer-base.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace vitk::bench {

struct LinearShape {
  std::string model;      // "ViT-B/16", "Transformer-base"
  std::string layer;      // "attn.qkv", ...
  int64_t rows, in, out;  // M tokens, K inputs, N outputs
};

// ViT-B/16 at 224 with batch 8 (8·197 tokens), Transformer-base with 4096 tokens.
std::vector<LinearShape> default_linear_shapes();

struct OpsBenchOptions {
  int repeats = 7;            // timed rounds; each reports the median
  double min_seconds = 0.05;  // each timing repeats its call until at least this long
  bool bf16 = false;          // bf16 inputs and weights (f32 accumulation and output)
};

struct OpsBenchRow {
  LinearShape shape;
  std::string pass;  // "forward", "backward-data", "backward-weights"
  double bare_gflops = 0, vitk_gflops = 0;
  double ratio() const { return bare_gflops > 0 ? vitk_gflops / bare_gflops : 0; }
};

// Runs every shape and pass, interleaving vitk and bare calls so that both see the same machine
// load; calls progress(row) after each row.
std::vector<OpsBenchRow> run_ops_bench(const std::vector<LinearShape>& shapes,
                                       const OpsBenchOptions& options,
                                       void (*progress)(const OpsBenchRow&) = nullptr);

void print_ops_table(std::ostream& out, const std::vector<OpsBenchRow>& rows);

}  // namespace vitk::bench

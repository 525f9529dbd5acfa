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
  // bf16 products as the layers run them: f32 activations rounded inside the op, the f32 master
  // weight packed into bf16 blocks (f32 accumulation and outputs). The bare matmul gets bf16
  // operands.
  bool bf16 = false;
  // false: as in training, the weight changes before every forward and backward-data call, so
  // bf16 packs it each time (f32 reads it in place). true: as in inference, weights packed once
  // (f32 too, at every shape, to see where packing pays: ops::prefer_packed_f32).
  bool packed = false;
  int64_t rows = 0;  // M of every shape; 0: the shapes' own
  // The forward only, int8 (ops::linear_forward_int8, the activations' quantisation included)
  // against vitk's f32 inference product (weights packed where ops::prefer_packed_f32 says so) in
  // place of the bare matmul: the ratio is int8's speed-up.
  bool int8 = false;
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

// `int8`: the rows of an int8 run (OpsBenchOptions::int8), whose columns are f32 and int8.
void print_ops_table(std::ostream& out, const std::vector<OpsBenchRow>& rows, bool int8 = false);

}  // namespace vitk::bench

#include "common/bench/ops_bench.h"

#include <cstdio>
#include <functional>
#include <ostream>

#include "common/ops/ops.h"
#include "common/tensor.h"
#include "common/timer.h"

namespace vitk::bench {

std::vector<LinearShape> default_linear_shapes() {
  const int64_t vit = 8 * 197, mt = 4096;
  return {
      {"ViT-B/16", "attn.qkv", vit, 768, 2304},
      {"ViT-B/16", "attn.proj", vit, 768, 768},
      {"ViT-B/16", "mlp.fc1", vit, 768, 3072},
      {"ViT-B/16", "mlp.fc2", vit, 3072, 768},
      {"Transformer-base", "self_attn.qkv", mt, 512, 1536},
      {"Transformer-base", "self_attn.out", mt, 512, 512},
      {"Transformer-base", "ffn.linear1", mt, 512, 2048},
      {"Transformer-base", "ffn.linear2", mt, 2048, 512},
      {"Transformer-base", "generator (8k vocab)", mt, 512, 8000},
  };
}

namespace {

Tensor random_tensor(Shape shape, DType dt, uint64_t seed) {
  Tensor f(shape);
  ops::Rng rng(seed);
  float* p = f.f32();
  for (int64_t i = 0; i < f.numel(); ++i) p[i] = rng.uniform() - 0.5f;
  if (dt == DType::f32) return f;
  Tensor b(shape, DType::bf16);
  f32_to_bf16(p, b.bf16(), static_cast<size_t>(f.numel()));
  return b;
}

}  // namespace

std::vector<OpsBenchRow> run_ops_bench(const std::vector<LinearShape>& shapes,
                                       const OpsBenchOptions& options,
                                       void (*progress)(const OpsBenchRow&)) {
  const DType bare_dt = options.bf16 ? DType::bf16 : DType::f32;
  const ops::Precision precision = options.bf16 ? ops::Precision::bf16 : ops::Precision::f32;
  std::vector<OpsBenchRow> rows;
  for (const auto& shape : shapes) {
    LinearShape s = shape;
    if (options.rows > 0) s.rows = options.rows;
    const int64_t m = s.rows, k = s.in, n = s.out;
    // vitk's operands: f32 activations and master weight, as the layers hold them.
    Tensor x = random_tensor({m, k}, DType::f32, 1), w = random_tensor({n, k}, DType::f32, 2);
    Tensor b = random_tensor({n}, DType::f32, 3), y({m, n});
    Tensor dy = random_tensor({m, n}, DType::f32, 4), dx({m, k}), dw({n, k}), db({n});
    ops::WeightCache cache;
    uint64_t version = 1;
    // The weight as a layer passes it; in training mode a new version before every use.
    auto weight = [&]() {
      if (!options.packed) ++version;
      ops::Weight wt{w, options.bf16 || options.packed ? &cache : nullptr, version};
      wt.force_pack_f32 = options.packed;
      return wt;
    };
    // Bare matmuls: the same M·N·K products with every operand plain and no bias or accumulation.
    Tensor bare_x = random_tensor({m, k}, bare_dt, 1), bare_dy = random_tensor({m, n}, bare_dt, 4);
    Tensor bare_w = random_tensor({n, k}, bare_dt, 2);
    Tensor bare_b_fwd = random_tensor({k, n}, bare_dt, 5);
    Tensor bare_a_bww = random_tensor({n, m}, bare_dt, 6);
    Tensor bare_out_bww({n, k});

    struct Pass {
      const char* name;
      std::function<void()> vitk_call, bare_call;
    };
    ops::QuantizedWeight quantized;
    if (options.int8) quantized = ops::quantize_weight(w);
    std::vector<Pass> passes = {
        {"forward", [&] { ops::linear_forward(x, weight(), b, y, precision); },
         [&] { ops::bmm(bare_x, false, bare_b_fwd, false, y); }},
        {"backward-data", [&] { ops::linear_backward_data(dy, weight(), dx, precision); },
         [&] { ops::bmm(bare_dy, false, bare_w, false, dx); }},
        {"backward-weights", [&] { ops::linear_backward_weights(x, dy, dw, db, precision); },
         [&] { ops::bmm(bare_a_bww, false, bare_x, false, bare_out_bww); }},
    };
    if (options.int8) {
      passes = {{"forward", [&] { ops::linear_forward_int8(x, quantized, b, y); },
                 [&] {
                   ops::Weight wt{w, &cache, 1};
                   wt.pack_f32 = true;
                   ops::linear_forward(x, wt, b, y, ops::Precision::f32);
                 }}};
    }
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
    for (auto& pass : passes) {
      std::vector<double> vt, bt;
      for (int r = 0; r < options.repeats; ++r) {
        bt.push_back(seconds_per_call(pass.bare_call, options.min_seconds));
        vt.push_back(seconds_per_call(pass.vitk_call, options.min_seconds));
      }
      OpsBenchRow row{s, pass.name, flops / median(bt) * 1e-9, flops / median(vt) * 1e-9};
      rows.push_back(row);
      if (progress) progress(row);
    }
  }
  return rows;
}

void print_ops_table(std::ostream& out, const std::vector<OpsBenchRow>& rows, bool int8) {
  char line[256];
  std::snprintf(line, sizeof line, "%-17s %-21s %-17s %5s %5s %5s %10s %10s %6s\n", "model",
                "layer", "pass", "M", "K", "N", int8 ? "f32 GF/s" : "bare GF/s",
                int8 ? "int8 GOP/s" : "vitk GF/s", "ratio");
  out << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%-17s %-21s %-17s %5lld %5lld %5lld %10.1f %10.1f %6.2f\n",
                  r.shape.model.c_str(), r.shape.layer.c_str(), r.pass.c_str(),
                  static_cast<long long>(r.shape.rows), static_cast<long long>(r.shape.in),
                  static_cast<long long>(r.shape.out), r.bare_gflops, r.vitk_gflops, r.ratio());
    out << line;
  }
}

}  // namespace vitk::bench

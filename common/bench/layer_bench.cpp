#include "common/bench/layer_bench.h"

#include <cstdio>
#include <functional>
#include <ostream>

#include "common/nn/nn.h"
#include "common/timer.h"

namespace vitk::bench {
namespace {

Tensor random_input(Shape shape, ops::Rng& rng) {
  Tensor t(std::move(shape));
  nn::init_trunc_normal(t, 1.f, rng);
  return t;
}

void init_weights(ParamStore& store, ops::Rng& rng) {
  store.finalize();
  nn::init_defaults(store);
  for (auto& p : store.params())
    if (p.shape.size() == 2) nn::init_trunc_normal(p.value, 0.02f, rng);
  store.mark_changed();
}

double median_seconds(const std::function<void()>& call, int repeats, double min_seconds) {
  std::vector<double> rounds;
  for (int r = 0; r < repeats; ++r) rounds.push_back(seconds_per_call(call, min_seconds));
  return median(rounds);
}

}  // namespace

std::vector<LayerBenchRow> run_layer_bench(int repeats, double min_seconds,
                                           ops::Precision precision) {
  std::vector<LayerBenchRow> rows;
  ops::Rng rng(1);
  Arena arena;
  {
    // ViT-B/16 block: pre-norm, GELU, LayerNorm eps 1e-6.
    nn::LayerConfig c;
    c.d_model = 768, c.heads = 12, c.d_ff = 3072, c.pre_norm = true, c.norm_eps = 1e-6f;
    c.activation = ops::Activation::gelu;
    ParamStore store;
    nn::EncoderLayer layer(store, "blocks.0", c);
    init_weights(store, rng);
    Tensor x = random_input({8, 197, 768}, rng), dy = random_input({8, 197, 768}, rng);
    const std::string shape = "B=8 T=197 d=768 h=12 ff=3072";
    nn::AttentionMask none;
    auto forward = [&] {
      arena.reset();
      nn::Context ctx{false, &arena, &rng};
      ctx.precision = precision;
      layer.forward(ctx, x, none);
    };
    auto train = [&] {
      arena.reset();
      nn::Context ctx{true, &arena, &rng};
      ctx.precision = precision;
      store.mark_changed();
      layer.forward(ctx, x, none);
      layer.backward(ctx, dy);
    };
    rows.push_back(
        {"vit-b16-encoder", "forward", shape, median_seconds(forward, repeats, min_seconds)});
    rows.push_back({"vit-b16-encoder", "forward+backward", shape,
                    median_seconds(train, repeats, min_seconds)});
  }
  {
    // Transformer-base decoder block: post-norm, ReLU; 32 sentences of 32 tokens on both sides.
    nn::LayerConfig c;
    c.d_model = 512, c.heads = 8, c.d_ff = 2048, c.pre_norm = false;
    ParamStore store;
    nn::DecoderLayer layer(store, "decoder.layers.0", c);
    init_weights(store, rng);
    Tensor x = random_input({32, 32, 512}, rng), memory = random_input({32, 32, 512}, rng);
    Tensor dy = random_input({32, 32, 512}, rng);
    const std::string shape = "B=32 Tt=32 Ts=32 d=512 h=8 ff=2048";
    nn::AttentionMask causal, none;
    causal.causal = true;
    auto forward = [&] {
      arena.reset();
      nn::Context ctx{false, &arena, &rng};
      ctx.precision = precision;
      layer.forward(ctx, x, memory, causal, none);
    };
    auto train = [&] {
      arena.reset();
      nn::Context ctx{true, &arena, &rng};
      ctx.precision = precision;
      store.mark_changed();
      layer.forward(ctx, x, memory, causal, none);
      Tensor dmemory;
      layer.backward(ctx, dy, &dmemory);
    };
    rows.push_back({"transformer-base-decoder", "forward", shape,
                    median_seconds(forward, repeats, min_seconds)});
    rows.push_back({"transformer-base-decoder", "forward+backward", shape,
                    median_seconds(train, repeats, min_seconds)});
  }
  return rows;
}

void print_layer_rows(std::ostream& out, const std::vector<LayerBenchRow>& rows) {
  for (const auto& r : rows) {
    char line[256];
    std::snprintf(line, sizeof line, "%s\t%s\t%s\t%.6f\n", r.layer.c_str(), r.pass.c_str(),
                  r.shape.c_str(), r.seconds);
    out << line;
  }
}

}  // namespace vitk::bench

#include "common/bench/vit_step_bench.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <ostream>

#include "common/ops/profile.h"
#include "common/optim/optim.h"
#include "common/timer.h"
#include "vit/vit.h"

namespace vitk::bench {
namespace {

vit::VitConfig recipe(float drop_path) {
  vit::VitConfig c;
  c.image_height = c.image_width = 28;
  c.patch_size = 4;
  c.channels = 1;
  c.num_classes = 10;
  c.d_model = 192;
  c.heads = 3;
  c.d_ff = 768;
  c.layers = 6;
  c.drop_path = drop_path;
  c.preprocess.mean = {0.2860f};
  c.preprocess.std = {0.3530f};
  return c;
}

// CPU seconds of the whole process: on a shared machine a step's CPU time (with
// OMP_WAIT_POLICY=passive, so that waiting threads sleep) moves much less with the load than
// its wall time.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

VitStepResult run_vit_step_bench(const VitStepOptions& o, std::ostream* log) {
  const vit::VitConfig config = recipe(o.drop_path);
  ParamStore params;
  vit::VisionTransformer model(params, config);
  params.finalize();
  ops::Rng rng(1);
  model.init(rng);
  optim::AdamWOptions ao;
  ao.weight_decay = 0.05;
  optim::AdamW adamw(params, ao);

  const int64_t B = o.batch;
  Tensor images({B, config.channels, config.image_height, config.image_width});
  Tensor labels({B}, DType::i32);
  for (int64_t i = 0; i < images.numel(); ++i) images.f32()[i] = static_cast<float>(rng.normal());
  for (int64_t i = 0; i < B; ++i)
    labels.i32()[i] = static_cast<int32_t>(rng.next_u64() % config.num_classes);

  Arena arena;
  auto step = [&] {
    arena.reset();
    nn::Context ctx;
    ctx.training = true;
    ctx.arena = &arena;
    ctx.rng = &rng;
    Tensor logits;
    {
      ops::profile::Scope s("model forward (rest)");
      logits = model.forward(ctx, images);
    }
    Tensor dlogits = ctx.alloc(logits.shape());
    {
      ops::profile::Scope s("cross-entropy");
      ops::cross_entropy_forward(logits, labels, 0.1f);
      ops::cross_entropy_backward(logits, labels, 0.1f, -100, 1.f, dlogits);
    }
    {
      ops::profile::Scope s("zero_grad");
      params.zero_grad();
    }
    {
      ops::profile::Scope s("model backward (rest)");
      model.backward(ctx, dlogits);
    }
    {
      ops::profile::Scope s("adamw");
      adamw.step(1e-3f);
    }
  };

  VitStepResult r;
  step();  // primitives, arena growth
  for (int round = 0; round < o.rounds; ++round) {
    Timer t;
    const double cpu0 = cpu_seconds();
    for (int i = 0; i < o.steps; ++i) step();
    r.round_ms.push_back(t.seconds() * 1e3 / o.steps);
    r.round_cpu_ms.push_back((cpu_seconds() - cpu0) * 1e3 / o.steps);
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
    for (const auto& e : ops::profile::entries()) {
      r.parts.emplace_back(e.name, e.seconds * 1e3 / o.steps);
      r.part_calls.push_back(e.calls / o.steps);
    }
  }
  return r;
}

void print_vit_step(std::ostream& out, const VitStepOptions& o, const VitStepResult& r) {
  char line[256];
  std::snprintf(line, sizeof line,
                "vit-step: batch %lld, %s, %d threads: best %.1f ms/step (%.1f images/s), median "
                "%.1f ms/step; best %.1f CPU ms/step\n",
                static_cast<long long>(o.batch), o.bf16 ? "bf16" : "f32", ops::num_threads(),
                r.best_ms, 1e3 * static_cast<double>(o.batch) / r.best_ms, r.median_ms,
                r.best_cpu_ms);
  out << line;
  if (r.parts.empty()) return;
  double total = 0;
  for (const auto& p : r.parts) total += p.second;
  out << "breakdown (one profiled round, exclusive ms per step; total " << total << " ms):\n";
  for (size_t i = 0; i < r.parts.size(); ++i) {
    std::snprintf(line, sizeof line, "  %8.2f ms %5.1f%%  x%-4lld %s\n", r.parts[i].second,
                  100.0 * r.parts[i].second / total, static_cast<long long>(r.part_calls[i]),
                  r.parts[i].first.c_str());
    out << line;
  }
}

}  // namespace vitk::bench

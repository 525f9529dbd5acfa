#include "common/bench/vit_step_bench.h"

#include <string>

#include "common/ops/profile.h"
#include "common/optim/optim.h"
#include "common/progress.h"
#include "vit/vit.h"

namespace vitk::bench {
namespace {

vit::VitConfig recipe(const VitStepOptions& o) {
  vit::VitConfig c;
  c.image_height = c.image_width = 28;
  c.patch_size = 4;
  c.channels = 1;
  c.num_classes = 10;
  c.d_model = 192;
  c.heads = 3;
  c.d_ff = 768;
  c.layers = 6;
  c.drop_path = o.drop_path;
  c.patch_drop = o.patch_drop;
  c.stem_channels = o.stem_channels;
  c.stem_strides = o.stem_strides;
  c.pos_conv_blocks = o.pos_conv_blocks;
  c.ffn_conv_blocks = o.ffn_conv_blocks;
  c.preprocess.mean = {0.2860f};
  c.preprocess.std = {0.3530f};
  return c;
}

}  // namespace

StepResult run_vit_step_bench(const VitStepOptions& o, std::ostream* log) {
  const vit::VitConfig config = recipe(o);
  config.validate();
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
    ctx.precision = o.precision;
    Tensor logits;
    {
      ops::profile::Scope s("model forward (rest)");
      logits = model.forward(ctx, images);
    }
    Tensor dlogits = ctx.alloc(logits.shape());
    {
      ops::profile::Scope s("cross-entropy");
      ops::cross_entropy_forward_backward(logits, labels, 0.1f, -100, 1.f, dlogits);
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
  return time_steps(step, o.timing, log);
}

void print_vit_step(std::ostream& out, const VitStepOptions& o, const StepResult& r) {
  const vit::VitConfig c = recipe(o);
  std::string what = "batch " + std::to_string(o.batch) + ", " + ops::precision_name(o.precision);
  if (!c.stem_channels.empty())
    what += ", conv stem " + vit::stem_channels_text(c.stem_channels) + " (strides " +
            vit::stem_strides_text(c) + ")";
  if (!c.pos_conv_blocks.empty())
    what +=
        ", positional convolutions after blocks " + vit::pos_conv_blocks_text(c.pos_conv_blocks);
  if (!c.ffn_conv_blocks.empty())
    what += ", MLP convolutions in blocks " + vit::pos_conv_blocks_text(c.ffn_conv_blocks);
  if (c.patch_drop > 0)
    what += ", patch_drop " + format_general(c.patch_drop) + " (keeps " +
            std::to_string(c.kept_patches()) + " of " + std::to_string(c.patches()) + " patches)";
  print_step_result(out, "vit-step", what, static_cast<double>(o.batch), "images", r);
}

}  // namespace vitk::bench

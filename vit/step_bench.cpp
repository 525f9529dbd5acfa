// `vitk bench vit-step`: the real training step (train::Step on a VitTask) timed on one batch.
#include "vit/step_bench.h"

#include <string>

#include "common/progress.h"
#include "vit/train_task.h"

namespace vitk::vit {

VitConfig StepBenchOptions::small_model() {
  VitConfig c;
  c.image_height = c.image_width = 28;
  c.patch_size = 4;
  c.channels = 1;
  c.num_classes = 10;
  c.d_model = 192;
  c.heads = 3;
  c.d_ff = 768;
  c.layers = 6;
  c.preprocess.mean = {0.2860f};
  c.preprocess.std = {0.3530f};
  return c;
}

bench::StepResult run_step_bench(const StepBenchOptions& o, std::ostream* log) {
  const VitConfig& config = o.model;
  config.validate();
  ops::Rng rng(1);
  datasets::Batch batch;
  const int64_t B = o.batch;
  batch.images = Tensor({B, config.channels, config.image_height, config.image_width});
  batch.labels = Tensor({B}, DType::i32);
  for (int64_t i = 0; i < batch.images.numel(); ++i)
    batch.images.f32()[i] = static_cast<float>(rng.normal());
  for (int64_t i = 0; i < B; ++i)
    batch.labels.i32()[i] = static_cast<int32_t>(rng.next_u64() % config.num_classes);

  TrainOptions options;  // AdamW with weight decay 0.05, label smoothing 0.1: the recipe's
  options.batch_size = B;
  options.loop.precision = o.precision;
  VitTask task(config, options, std::move(batch));
  bench::StepResult r = bench::time_training_steps(task, o.precision, o.timing, log);
  r.parameters = task.params().numel();
  return r;
}

void print_step_bench(std::ostream& out, const StepBenchOptions& o, const bench::StepResult& r) {
  const VitConfig& c = o.model;
  std::string what = "batch " + std::to_string(o.batch) + ", " + ops::precision_name(o.precision);
  if (!c.stem_channels.empty())
    what += ", conv stem " + stem_channels_text(c.stem_channels) + " (strides " +
            stem_strides_text(c) + ")";
  if (!c.pos_conv_blocks.empty())
    what += ", positional convolutions after blocks " + pos_conv_blocks_text(c.pos_conv_blocks);
  if (!c.ffn_conv_blocks.empty())
    what += ", MLP convolutions in blocks " + pos_conv_blocks_text(c.ffn_conv_blocks);
  if (c.patch_drop > 0)
    what += ", patch_drop " + format_general(c.patch_drop) + " (keeps " +
            std::to_string(c.kept_patches()) + " of " + std::to_string(c.patches()) + " patches)";
  if (c.drop_path > 0) what += ", drop_path " + format_general(c.drop_path);
  const std::string model =
      "ViT, " + std::to_string(c.image_height) + "x" + std::to_string(c.image_width) + "x" +
      std::to_string(c.channels) + " images, patch " + std::to_string(c.patch_size) + " (" +
      std::to_string(c.tokens()) + " tokens), d_model " + std::to_string(c.d_model) + ", " +
      std::to_string(c.layers) + " layers, " + std::to_string(c.heads) + " heads, d_ff " +
      std::to_string(c.d_ff) + ", " + std::to_string(c.num_classes) + " classes";
  bench::print_step_model(out, "vit-step", model, r);
  bench::print_step_result(out, "vit-step", what, static_cast<double>(o.batch), "images", r);
}

}  // namespace vitk::vit

// Building a ViT from a checkpoint, at its own image size or, with resampled position embeddings,
// at another; loading its weights into a model with another size or head (fine-tuning).
#include "vit/checkpoint.h"

#include <cstring>

#include "common/error.h"
#include "common/io/checkpoint_config.h"
#include "common/memory.h"
#include "vit/resample.h"

namespace vitk::vit {

namespace {

std::string size_text(int64_t height, int64_t width) {
  return std::to_string(height) + "x" + std::to_string(width);
}

bool is_head(const std::string& name) {
  return name == "head.weight" || name == "head.bias";
}

// The keys that set the model's size: a checkpoint without one would be built at a default.
const std::vector<std::string> kSizeKeys = {"image_size", "patch_size", "channels", "num_classes",
                                            "d_model",    "heads",      "d_ff",     "layers"};

}  // namespace

uint64_t memory_bytes(const VitConfig& c, int64_t images) {
  const int64_t d = c.d_model, f = c.d_ff;
  // The parameters (a lower bound: the blocks' products, positions, patch projection, stem and
  // head), each held three times while a checkpoint loads: values, gradients, the read's copy.
  uint64_t params = sat_product({c.tokens(), d});
  params = sat_add(params, sat_product({d, c.proj_channels(), c.proj_kernel(), c.proj_kernel()}));
  params = sat_add(params, sat_product({c.layers, 4 * d + 2 * f, d}));
  params = sat_add(params, sat_product({c.num_classes, d}));
  int64_t in = c.channels;
  for (int64_t out : c.stem_channels) params = sat_add(params, sat_product({out, in, 9})), in = out;
  // One inference forward of an image: the image and its patches, and per token q, k, v, the
  // context, the residual stream and its norm (d each) and the MLP's hidden layer (d_ff, twice).
  uint64_t per_image = sat_product({2, c.channels, c.image_height, c.image_width});
  per_image = sat_add(per_image, sat_product({c.tokens(), 6 * d + 2 * f}));
  return sat_mul(4, sat_add(sat_mul(3, params), sat_mul(sat_product({images}), per_image)));
}

VitConfig stored_config(const std::string& path, const io::CheckpointMeta& meta) {
  io::require_model_type(path, meta.config, "vit", "ViT",
                         "vitk train, finetune and import write them");
  io::require_config_keys(path, meta.config, kSizeKeys);
  const VitConfig c = from_config_map(meta.config, path);  // each value within validate()'s limits
  const io::StoredTensors stored = io::list_checkpoint(path);
  io::check_layer_count(path, meta.config, stored, "blocks.", "layers", c.layers);
  const std::string proj_in = c.stem_channels.empty() ? "channels" : "stem_channels";
  io::check_implied_sizes(path, meta.config, stored,
                          {{"cls_token", 2, c.d_model, {"d_model"}},
                           {"patch_embed.proj.bias", 0, c.d_model, {"d_model"}},
                           {"pos_embed", 1, c.tokens(), {"image_size", "patch_size"}},
                           {"head.weight", 0, c.num_classes, {"num_classes"}},
                           {"blocks.0.mlp.fc1.weight", 0, c.d_ff, {"d_ff"}},
                           {"patch_embed.proj.weight", 1, c.proj_channels(), {proj_in}},
                           {"patch_embed.proj.weight", 2, c.proj_kernel(), {"patch_size"}}});
  const std::string shortfall = memory_shortfall(memory_bytes(c, 1));
  if (!shortfall.empty())
    throw Error(path + ": the model of " + io::config_values_text(meta.config, kSizeKeys) + " " +
                shortfall);
  return c;
}

VitConfig at_size(const VitConfig& stored, int64_t height, int64_t width, const std::string& path) {
  VitConfig c = stored;
  c.image_height = height;
  c.image_width = width;
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw UsageError(path + ": cannot run at " + size_text(height, width) + ": " + e.what());
  }
  const std::string shortfall = memory_shortfall(memory_bytes(c, 1));
  if (!shortfall.empty())
    throw UsageError(path + ": cannot run at " + size_text(height, width) + ": one image " +
                     shortfall);
  return c;
}

void check_batch_memory(const VitConfig& config, int64_t images, const std::string& option) {
  auto fits = [&](int64_t n) { return memory_shortfall(memory_bytes(config, n)).empty(); };
  if (fits(images)) return;
  // The first of images/2, images/4, ... down to one image that fits, if any does.
  int64_t smaller = images / 2;
  while (smaller > 1 && !fits(smaller)) smaller /= 2;
  const std::string hint = smaller >= 1 && fits(smaller)
                               ? "; a batch of " + std::to_string(smaller) + " would fit."
                               : ".";
  throw UsageError(option + " at " + size_text(config.image_height, config.image_width) +
                   ": a batch of " + std::to_string(images) + " images " +
                   memory_shortfall(memory_bytes(config, images)) + hint);
}

io::CheckpointMeta load_vit_weights(const std::string& path, const VitConfig& config,
                                    ParamStore& params, std::optional<bool> align_corners,
                                    bool new_head, bool int8, PosInterpolation interpolation) {
  const io::CheckpointMeta file_meta = io::read_checkpoint_meta(path);
  const VitConfig stored = stored_config(path, file_meta);
  const bool resize =
      config.image_height != stored.image_height || config.image_width != stored.image_width;
  const bool same_head = config.num_classes == stored.num_classes;
  if (!resize && same_head) {
    io::CheckpointMeta meta = io::load_checkpoint(path, params, nullptr, int8);
    if (new_head)
      for (Parameter& p : params.params())
        if (is_head(p.name)) p.value.zero();
    params.mark_changed();
    return meta;
  }
  // Load at the stored size, with every check load_checkpoint makes, then carry the weights
  // over: all as they are except pos_embed, whose patch rows go to the new grid, and the head.
  ParamStore stored_params;
  VisionTransformer stored_model(stored_params, stored);
  stored_params.finalize(/*gradients=*/false);
  io::CheckpointMeta meta = io::load_checkpoint(path, stored_params, nullptr, int8);
  const bool align = align_corners.value_or(stored.pos_embed_align_corners);
  for (Parameter& p : params.params()) {
    if (new_head && is_head(p.name)) {
      p.value.zero();
      continue;
    }
    const Parameter* s = stored_params.find(p.name);
    if (!s) throw Error(path + ": has no tensor '" + p.name + "' for the model");
    if (s->value_released) {  // int8: a matrix of the blocks or the head, the same at any size
      if (s->shape != p.shape)
        throw Error(path + ": int8 tensor " + p.name + " " + shape_str(s->shape) +
                    " does not fit the model (" + shape_str(p.shape) + ")");
      p.quantized = s->quantized;
      p.value_released = true;
      continue;
    }
    Tensor value = s->value;
    if (p.name == "pos_embed" && resize)
      value =
          resample_pos_embed(s->value, stored.grid_height(), stored.grid_width(),
                             config.grid_height(), config.grid_width(), align, 1, interpolation);
    if (value.shape() != p.shape)
      throw Error(path + ": " + p.name + " " + shape_str(value.shape()) +
                  " does not fit the model at " +
                  size_text(config.image_height, config.image_width) + " with " +
                  std::to_string(config.num_classes) + " classes (" + shape_str(p.shape) + ")");
    std::memcpy(p.value.f32(), value.f32(), value.nbytes());
  }
  params.mark_changed();
  return meta;
}

LoadedVit load_vit(const std::string& path, int64_t height, int64_t width,
                   std::optional<bool> align_corners, PosInterpolation interpolation) {
  LoadedVit out;
  out.meta = io::read_checkpoint_meta(path);
  out.config = stored_config(path, out.meta);
  out.stored_height = out.config.image_height;
  out.stored_width = out.config.image_width;
  out.resampled =
      height > 0 && width > 0 && (height != out.stored_height || width != out.stored_width);
  out.align_corners = align_corners.value_or(out.config.pos_embed_align_corners);
  out.interpolation = interpolation;
  if (out.resampled) out.config = at_size(out.config, height, width, path);
  out.params = std::make_unique<ParamStore>();
  out.model = std::make_unique<VisionTransformer>(*out.params, out.config);
  out.params->finalize(/*gradients=*/false);
  out.meta = load_vit_weights(path, out.config, *out.params, out.align_corners, false, true,
                              interpolation);
  if (!out.meta.class_names.empty() &&
      static_cast<int64_t>(out.meta.class_names.size()) != out.config.num_classes)
    throw Error(path + ": " + std::to_string(out.meta.class_names.size()) +
                " class names for a head of " + std::to_string(out.config.num_classes) +
                " classes");
  return out;
}

}  // namespace vitk::vit

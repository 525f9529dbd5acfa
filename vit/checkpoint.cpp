// Building a ViT from a checkpoint, at its own image size or, with resampled position embeddings,
// at another; loading its weights into a model with another size or head (fine-tuning).
#include "vit/checkpoint.h"

#include <cstring>

#include "common/error.h"
#include "vit/resample.h"

namespace vitk::vit {

namespace {

std::string size_text(int64_t height, int64_t width) {
  return std::to_string(height) + "x" + std::to_string(width);
}

bool is_head(const std::string& name) {
  return name == "head.weight" || name == "head.bias";
}

}  // namespace

VitConfig at_size(const VitConfig& stored, int64_t height, int64_t width, const std::string& path) {
  VitConfig c = stored;
  c.image_height = height;
  c.image_width = width;
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw UsageError(path + ": cannot run at " + size_text(height, width) + ": " + e.what());
  }
  return c;
}

io::CheckpointMeta load_vit_weights(const std::string& path, const VitConfig& config,
                                    ParamStore& params, std::optional<bool> align_corners,
                                    bool new_head) {
  const io::CheckpointMeta file_meta = io::read_checkpoint_meta(path);
  const VitConfig stored = from_config_map(file_meta.config, path);
  const bool resize =
      config.image_height != stored.image_height || config.image_width != stored.image_width;
  const bool same_head = config.num_classes == stored.num_classes;
  if (!resize && same_head) {
    io::CheckpointMeta meta = io::load_checkpoint(path, params);
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
  stored_params.finalize();
  io::CheckpointMeta meta = io::load_checkpoint(path, stored_params);
  const bool align = align_corners.value_or(stored.pos_embed_align_corners);
  for (Parameter& p : params.params()) {
    if (new_head && is_head(p.name)) {
      p.value.zero();
      continue;
    }
    const Parameter* s = stored_params.find(p.name);
    if (!s) throw Error(path + ": has no tensor '" + p.name + "' for the model");
    Tensor value = s->value;
    if (p.name == "pos_embed" && resize)
      value = resample_pos_embed(s->value, stored.grid_height(), stored.grid_width(),
                                 config.grid_height(), config.grid_width(), align);
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
                   std::optional<bool> align_corners) {
  LoadedVit out;
  out.meta = io::read_checkpoint_meta(path);
  out.config = from_config_map(out.meta.config, path);
  out.stored_height = out.config.image_height;
  out.stored_width = out.config.image_width;
  out.resampled =
      height > 0 && width > 0 && (height != out.stored_height || width != out.stored_width);
  out.align_corners = align_corners.value_or(out.config.pos_embed_align_corners);
  if (out.resampled) out.config = at_size(out.config, height, width, path);
  out.params = std::make_unique<ParamStore>();
  out.model = std::make_unique<VisionTransformer>(*out.params, out.config);
  out.params->finalize();
  out.meta = load_vit_weights(path, out.config, *out.params, out.align_corners);
  if (!out.meta.class_names.empty() &&
      static_cast<int64_t>(out.meta.class_names.size()) != out.config.num_classes)
    throw Error(path + ": " + std::to_string(out.meta.class_names.size()) +
                " class names for a head of " + std::to_string(out.config.num_classes) +
                " classes");
  return out;
}

}  // namespace vitk::vit

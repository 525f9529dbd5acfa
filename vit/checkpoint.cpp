// Building a ViT from a checkpoint, at its own image size or, with resampled position embeddings,
// at another.
#include "vit/checkpoint.h"

#include <cstring>

#include "common/error.h"
#include "vit/resample.h"

namespace vitk::vit {

LoadedVit load_vit(const std::string& path, int64_t height, int64_t width, bool align_corners) {
  LoadedVit out;
  out.meta = io::read_checkpoint_meta(path);
  out.config = from_config_map(out.meta.config, path);
  const VitConfig stored = out.config;
  const bool resize =
      height > 0 && width > 0 && (height != stored.image_height || width != stored.image_width);
  if (resize) {
    out.config.image_height = height;
    out.config.image_width = width;
    try {
      out.config.validate();
    } catch (const UsageError& e) {
      throw UsageError(path + ": cannot run at " + std::to_string(height) + "x" +
                       std::to_string(width) + ": " + e.what());
    }
  }
  out.params = std::make_unique<ParamStore>();
  out.model = std::make_unique<VisionTransformer>(*out.params, out.config);
  out.params->finalize();
  if (!resize) {
    out.meta = io::load_checkpoint(path, *out.params);
  } else {
    // Load at the stored size, with every check load_checkpoint makes, then carry the weights
    // over: all as they are except pos_embed, whose patch rows go to the new grid.
    ParamStore stored_params;
    VisionTransformer stored_model(stored_params, stored);
    stored_params.finalize();
    out.meta = io::load_checkpoint(path, stored_params);
    for (Parameter& p : out.params->params()) {
      const Parameter& s = stored_params.get(p.name);
      Tensor value = s.value;
      if (p.name == "pos_embed")
        value =
            resample_pos_embed(s.value, stored.grid_height(), stored.grid_width(),
                               out.config.grid_height(), out.config.grid_width(), align_corners);
      if (value.shape() != p.shape)
        throw Error(path + ": " + p.name + " " + shape_str(value.shape()) +
                    " does not fit the model at " + std::to_string(height) + "x" +
                    std::to_string(width) + " (" + shape_str(p.shape) + ")");
      std::memcpy(p.value.f32(), value.f32(), value.nbytes());
    }
  }
  if (!out.meta.class_names.empty() &&
      static_cast<int64_t>(out.meta.class_names.size()) != out.config.num_classes)
    throw Error(path + ": " + std::to_string(out.meta.class_names.size()) +
                " class names for a head of " + std::to_string(out.config.num_classes) +
                " classes");
  return out;
}

}  // namespace vitk::vit

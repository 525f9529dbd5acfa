// Building a ViT from a checkpoint.
#include "vit/checkpoint.h"

#include "common/error.h"

namespace vitk::vit {

LoadedVit load_vit(const std::string& path, int64_t height, int64_t width) {
  LoadedVit out;
  out.meta = io::read_checkpoint_meta(path);
  out.config = from_config_map(out.meta.config, path);
  if (height > 0 && width > 0 &&
      (height != out.config.image_height || width != out.config.image_width))
    throw Error(path +
                ": running at another image size needs position-embedding resampling, "
                "which is not built yet");
  out.params = std::make_unique<ParamStore>();
  out.model = std::make_unique<VisionTransformer>(*out.params, out.config);
  out.params->finalize();
  out.meta = io::load_checkpoint(path, *out.params);
  if (!out.meta.class_names.empty() &&
      static_cast<int64_t>(out.meta.class_names.size()) != out.config.num_classes)
    throw Error(path + ": " + std::to_string(out.meta.class_names.size()) +
                " class names for a head of " + std::to_string(out.config.num_classes) +
                " classes");
  return out;
}

}  // namespace vitk::vit

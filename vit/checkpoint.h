#pragma once
// A ViT from a checkpoint file: read the configuration, build the model, load the weights.
#include <memory>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "vit/vit.h"

namespace vitk::vit {

struct LoadedVit {
  VitConfig config;  // as run (image size possibly changed by the caller)
  io::CheckpointMeta meta;
  std::unique_ptr<ParamStore> params;  // finalized, weights loaded
  std::unique_ptr<VisionTransformer> model;
};

// Builds the model the checkpoint's attributes describe and loads its weights (vitk::Error naming
// the file and the tensor at fault). height, width > 0 run the model at that input size: the
// position embeddings are resampled to the new patch grid (vit/resample.h: bicubic as
// F.interpolate, align_corners = false as timm, DeiT and Hugging Face do it, or true as
// torchvision's interpolate_embeddings; the class token's slot untouched); everything else is
// loaded as it is. vitk::UsageError when the patch size does not divide the new size.
LoadedVit load_vit(const std::string& path, int64_t height = 0, int64_t width = 0,
                   bool align_corners = false);

}  // namespace vitk::vit

#pragma once
// A ViT from a checkpoint file: read the configuration, build the model, load the weights, at the
// checkpoint's own input size or another one.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "vit/resample.h"
#include "vit/vit.h"

namespace vitk::vit {

struct LoadedVit {
  VitConfig config;  // as run (image size possibly changed by the caller)
  io::CheckpointMeta meta;
  std::unique_ptr<ParamStore> params;  // finalized without gradients (to run), weights loaded
  std::unique_ptr<VisionTransformer> model;
  // The size the checkpoint was made for, and whether (and how) its positions were resampled.
  int64_t stored_height = 0, stored_width = 0;
  bool resampled = false;
  bool align_corners = false;  // the convention used when resampled ...
  PosInterpolation interpolation = PosInterpolation::bicubic;  // ... and the interpolation
};

// Builds the model the checkpoint's attributes describe and loads its weights (vitk::Error naming
// the file and the tensor at fault). height, width > 0 run the model at that input size: the
// position embeddings are resampled to the new patch grid (vit/resample.h: bicubic as
// F.interpolate, align_corners = false as timm, DeiT and Hugging Face do it, or true as
// torchvision's interpolate_embeddings; the class token's slot untouched); everything else is
// loaded as it is. align_corners unset: the checkpoint's own convention (its
// pos_embed_align_corners setting, recorded by `vitk import`; false when absent). `interpolation`
// bilinear: as the ViT paper's code resamples (vit/resample.h).
// vitk::UsageError when the patch size does not divide the new size.
LoadedVit load_vit(const std::string& path, int64_t height = 0, int64_t width = 0,
                   std::optional<bool> align_corners = std::nullopt,
                   PosInterpolation interpolation = PosInterpolation::bicubic);

// The configuration of the checkpoint at `path` (its attributes `meta`), checked before any model
// is built from it: every size key present (a missing one would fall back to a default), each
// value within VitConfig::validate's limits, the stored tensors' names and shapes (no data read)
// against what the values imply, and the memory the model needs (memory_bytes, one image) against
// the machine's. vitk::Error naming the file and the configuration key at fault.
VitConfig stored_config(const std::string& path, const io::CheckpointMeta& meta);

// The least memory a ViT of this configuration takes: its parameters while a checkpoint loads
// (values, gradients and the read's copy) and, for `images` images at once (0: none), one
// inference forward's activations. Saturates at UINT64_MAX instead of overflowing.
uint64_t memory_bytes(const VitConfig& config, int64_t images);

// The configuration of the checkpoint at `path` run at height × width: `stored` with the new
// size, validated. vitk::UsageError naming the file, the size and the patch size when the patch
// size does not divide it, or the memory one image at that size needs when the machine has less.
VitConfig at_size(const VitConfig& stored, int64_t height, int64_t width, const std::string& path);

// vitk::UsageError naming `option` (say "--batch-size 256") when `images` images of `config` at
// once need more memory (memory_bytes) than the machine has; the batch that would fit is named.
void check_batch_memory(const VitConfig& config, int64_t images, const std::string& option);

// Loads the weights of the checkpoint at `path` into `params`, the finalized store of a model
// built with `config`, which may differ from the checkpoint's model in its input size (pos_embed
// resampled as load_vit does, with align_corners or else the checkpoint's convention) and, with
// new_head, in its number of classes: head.weight and head.bias are then set to zero, as the ViT
// paper does for fine-tuning (every class starts at the same logit; the gradient is what
// distinguishes them). Any other difference is a vitk::Error naming the file and the tensor.
// Returns the checkpoint's metadata. `int8`: a checkpoint of `vitk quantize` is taken (a model
// loaded to run, io::load_checkpoint); otherwise it is refused.
io::CheckpointMeta load_vit_weights(const std::string& path, const VitConfig& config,
                                    ParamStore& params, std::optional<bool> align_corners,
                                    bool new_head = false, bool int8 = false,
                                    PosInterpolation interpolation = PosInterpolation::bicubic);

}  // namespace vitk::vit

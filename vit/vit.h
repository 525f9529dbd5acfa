#pragma once
// The Vision Transformer (Dosovitskiy et al., 2021) as timm builds it: a P×P stride-P patch
// embedding computed as one matrix product over flattened patches, a class token, learned
// position embeddings, dropout, N pre-norm encoder layers of the shared core (GELU, LayerNorm
// ε = 1e-6, stochastic depth rising linearly over the blocks), a final norm and a linear head on
// the class token (or on the mean of the patch tokens, pool = "avg").
//
// Parameter names and shapes are timm's, so that timm checkpoints map one to one:
//   cls_token [1, 1, d]        pos_embed [1, 1 + Hp·Wp, d]
//   patch_embed.proj.weight [d, C, P, P]   patch_embed.proj.bias [d]
//   blocks.<i>.norm1 / attn.qkv / attn.proj / norm2 / mlp.fc1 / mlp.fc2
//   norm (pool = "token")  or  fc_norm (pool = "avg", applied after pooling)
//   head.weight [classes, d]   head.bias [classes]
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/nn/nn.h"
#include "vit/preprocess.h"

namespace vitk::vit {

struct VitConfig {
  int64_t image_height = 224, image_width = 224;  // any size the patch size divides
  int64_t patch_size = 16;
  int64_t channels = 3;
  int64_t num_classes = 1000;
  int64_t d_model = 768;
  int64_t heads = 12;
  int64_t d_ff = 3072;
  int layers = 12;
  float norm_eps = 1e-6f;
  std::string pool = "token";     // "token" | "avg"
  float dropout = 0.f;            // after the positions, in the MLP and on the residual branches
  float attention_dropout = 0.f;  // on the attention weights
  float drop_path = 0.f;          // stochastic depth of the last block (block i: i/(N−1) of it)
  Preprocess preprocess;          // what eval and classify do to an image file
  // How pos_embed is resampled to another patch grid by default (vit/resample.h): false as timm,
  // DeiT and Hugging Face do it, true as torchvision's interpolate_embeddings.
  bool pos_embed_align_corners = false;

  int64_t grid_height() const { return image_height / patch_size; }
  int64_t grid_width() const { return image_width / patch_size; }
  int64_t patches() const { return grid_height() * grid_width(); }
  int64_t tokens() const { return patches() + 1; }  // with the class token
  nn::LayerConfig layer_config(int block) const;    // the core's settings for block i
  void validate() const;  // vitk::UsageError naming the model option at fault
};

// The configuration as text, for checkpoint attributes and the [model] section of a config file:
// keys "type" (= "vit"), "image_size" ("224" or "224x160", height x width), "patch_size",
// "channels", "num_classes", "d_model", "heads", "d_ff", "layers", "norm_eps", "pool", "dropout",
// "attention_dropout", "drop_path", "resize", "crop_fraction", "interpolation", "mean", "std"
// (comma-separated), "pos_embed_align_corners" ("true" | "false"). Floats are written so that
// they read back exactly.
std::map<std::string, std::string> to_config_map(const VitConfig& config);
// The reverse. Missing keys keep their defaults (checkpoints written before a key existed load
// as they did: no "pos_embed_align_corners" means false); an unknown key, a bad value or a type
// other than "vit" throws vitk::Error naming `source` (e.g. the checkpoint path) and the key.
VitConfig from_config_map(const std::map<std::string, std::string>& map, const std::string& source);
// "224" -> {224, 224}; "224x160" -> {224, 160}. vitk::UsageError otherwise.
std::pair<int64_t, int64_t> parse_image_size(const std::string& text);

class VisionTransformer {
 public:
  // Registers every parameter in params (not yet finalized).
  VisionTransformer(ParamStore& params, const VitConfig& config);
  // timm's initialisation, after params.finalize(): trunc_normal_(std=.02) (cut at ±2) for Linear
  // weights, pos_embed and the head; cls_token normal with std 1e-6; the patch projection as
  // PyTorch's Conv2d default (uniform ±1/√(C·P·P) for weight and bias); biases 0; norms 1, 0.
  void init(ops::Rng& rng);

  // images f32 [B, C, H, W] (normalised) -> logits f32 [B, num_classes]. H, W must be the
  // configured size (vitk::Error otherwise).
  Tensor forward(nn::Context& ctx, const Tensor& images);
  // dlogits [B, num_classes] -> ADDS every parameter's gradient. Needs the last training forward.
  // With dimages set, also writes d(images) [B, C, H, W] there (a fresh arena tensor); without
  // it, that product is skipped.
  void backward(nn::Context& ctx, const Tensor& dlogits, Tensor* dimages = nullptr);

  const VitConfig& config() const { return config_; }
  // The encoder layers, e.g. for attention maps (keep_weights) or layer-wise learning rates.
  std::vector<nn::EncoderLayer>& blocks();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  VitConfig config_;
};

// Patches of images [B, C, H, W] -> [B, (H/P)·(W/P), C·P·P], each patch flattened in (c, i, j)
// order so that a Conv2d weight [d, C, P, P] read as [d, C·P·P] is the projection.
void extract_patches(const Tensor& images, int64_t patch, Tensor& patches);
// The inverse (and the gradient) of extract_patches: patches [B, (H/P)·(W/P), C·P·P] -> images
// [B, C, H, W], overwritten; the images' shape gives C, H and W.
void fold_patches(const Tensor& patches, int64_t patch, Tensor& images);

}  // namespace vitk::vit

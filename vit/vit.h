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
//
// Optionally (stem_channels = c1,c2,...; not a timm option) a convolutional stem replaces the
// P×P patch projection's view of raw pixels, as in Xiao et al. 2021 ("Early convolutions help
// transformers see better"): each stem stage is a 3×3 convolution with padding 1 (channels c_i,
// stride s_i = 2, or 1 as set by stem_strides = s1,s2,...), a LayerNorm over the channels
// (ε = norm_eps) and GELU, so the stages shrink the image by S = ∏ s_i; the patch projection
// then covers P/S × P/S of the last stage's map, and the patch grid (H/P × W/P) is unchanged.
// Parameters, named as a PyTorch nn.Sequential would:
//   patch_embed.stem.<i>.conv.weight [c_i, c_(i-1), 3, 3]  .conv.bias [c_i]
//   patch_embed.stem.<i>.norm.weight [c_i]                 .norm.bias [c_i]
//   patch_embed.proj.weight [d, c_n, P/S, P/S]
//
// Optionally (pos_conv_blocks = i,j,...; not a timm option) a positional convolution follows
// block i, as CPVT's PEG (Chu et al., 2023, "Conditional positional encodings for vision
// transformers"): the patch tokens, seen as their Hp×Wp grid, get a depthwise 3×3 convolution of
// themselves (padding 1, with bias) added; the class token passes unchanged. It gives every block
// after it the neighbourhood of each patch, works at any grid size, and needs every patch (so
// patch_drop must be 0). Parameters:
//   pos_conv.<i>.weight [d, 1, 3, 3]   pos_conv.<i>.bias [d]
//   blocks.<i>.norm1 / attn.qkv / attn.proj / norm2 / mlp.fc1 / mlp.fc2
//   norm (pool = "token")  or  fc_norm (pool = "avg", applied after pooling)
//   head.weight [classes, d]   head.bias [classes]
// Optionally (ffn_conv_blocks = i,j,...; not a timm option) block i's MLP convolves its hidden
// tokens, as PVTv2's and CeiT's (LeFF) feed-forward blocks do: fc1's output h, its patch rows
// seen as the Hp×Wp grid, becomes h + dwconv3x3(h) (padding 1, with bias; the class token's row
// passes unchanged) before GELU and fc2, so every block sees each patch's neighbourhood inside
// its MLP as well. Also needs every patch (patch_drop 0). Parameters (registered
// after block i's mlp.fc2):
//   blocks.<i>.mlp.dwconv.weight [d_ff, 1, 3, 3]   blocks.<i>.mlp.dwconv.bias [d_ff]
// Optionally (diag_mask = true; not a timm option) no token attends to itself: VitConfig.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/nn/model_info.h"
#include "common/nn/nn.h"
#include "datasets/preprocess.h"

namespace vitk::vit {

// The largest image side a ViT accepts (a checkpoint's image_size, --image-size): far above any
// real one; within it, the memory a size would take is weighed against the machine's
// (vit/checkpoint.h, memory_bytes).
constexpr int64_t kMaxImageSide = 65536;

// The ViT's settings, one line each: type, name (the [model] key of a config file, --model.NAME
// and the checkpoint attribute), default, values allowed, help (common/settings.h). vit_schema()
// adds image_size ("224" or "224x160"), stem_strides and the eval transform's settings
// (datasets::Preprocess) to these.
//   stem_channels    a convolutional stem's stages (above); none: the projection sees the pixels
//   pos_conv_blocks  the blocks (0-based, increasing) followed by a positional convolution
//   ffn_conv_blocks  the blocks (0-based, increasing) whose MLP convolves its hidden tokens
//   num_classes      0: no head (timm's num_classes=0): features() only, pool "token"
//   drop_path        stochastic depth of the last block (block i: i/(N-1) of it)
//   patch_drop       patch dropout (timm's patch_drop_rate): a training forward keeps a random
//                    kept_patches() = max(1, floor(N (1 - patch_drop))) of the N patch tokens of
//                    each image after the positions are added (the class token always), so the
//                    blocks see fewer tokens; eval keeps all
//   diag_mask        every token's attention skips the token itself (LSA's diagonal masking, Lee
//                    et al., 2021; not a timm option): softmax(q_i k_j / sqrt(dh)) over j != i
//   pos_embed_align_corners  how pos_embed is resampled to another patch grid by default
//                    (vit/resample.h): false as timm, DeiT and Hugging Face, true as torchvision
#define VITK_VIT_SETTINGS(X)                                                                  \
  X(int64_t, patch_size, 16, at_least(1), "patch side")                                       \
  X(std::vector<int64_t>, stem_channels, {}, between(1, 65536),                               \
    "convolutional stem: channels of its 3x3 stages, comma-separated (none: the patch "       \
    "projection sees the pixels)")                                                            \
  X(std::vector<int64_t>, pos_conv_blocks, {}, at_least(0),                                   \
    "blocks (from 0, comma-separated) followed by a positional convolution: a depthwise 3x3 " \
    "convolution of the patch grid added to the tokens, as CPVT's PEG (none: no such)")       \
  X(std::vector<int64_t>, ffn_conv_blocks, {}, at_least(0),                                   \
    "blocks (from 0, comma-separated) whose MLP adds a depthwise 3x3 convolution of its "     \
    "hidden tokens' patch grid to them before GELU, as PVTv2 and CeiT (none: no such)")       \
  X(int64_t, channels, 3, between(1, 3), "image channels: 1 (grey) or 3 (RGB)")               \
  X(int64_t, num_classes, 1000, between(0, 1 << 24),                                          \
    "classes of the head (0: none; training: the data's when not given)")                     \
  X(int64_t, d_model, 768, between(1, 65536), "width (embedding dim)")                        \
  X(int64_t, heads, 12, at_least(1), "attention heads")                                       \
  X(int64_t, d_ff, 3072, between(1, 1 << 20), "MLP hidden width")                             \
  X(int, layers, 12, between(1, 1000), "encoder blocks (depth)")                              \
  X(float, norm_eps, 1e-6f, positive(), "LayerNorm epsilon")                                  \
  X(std::string, pool, "token", one_of("token", "avg"),                                       \
    "what the head sees: token (class token) or avg (mean of the patch tokens)")              \
  X(float, dropout, 0.f, fraction(), "dropout after positions, in the MLP and residuals")     \
  X(float, attention_dropout, 0.f, fraction(), "dropout on attention weights")                \
  X(float, drop_path, 0.f, fraction(),                                                        \
    "stochastic depth of the last block, rising linearly from 0 (timm --drop-path)")          \
  X(float, patch_drop, 0.f, fraction(),                                                       \
    "patch dropout: share of the patch tokens each training image leaves out (timm "          \
    "patch_drop_rate)")                                                                       \
  X(bool, diag_mask, false, any(), "no token attends to itself (LSA's diagonal masking)")     \
  X(bool, pos_embed_align_corners, false, any(),                                              \
    "how the positions are resampled to another size by default: false as timm, DeiT and "    \
    "Hugging Face, true as torchvision")

struct VitConfig {
  int64_t image_height = 224, image_width = 224;  // any size the patch size divides
  std::vector<int64_t> stem_strides;              // each stage's stride, 1 or 2; empty: all 2
  VITK_VIT_SETTINGS(VITK_SETTING_MEMBER)
  datasets::Preprocess preprocess;  // what eval and classify do to an image file

  int64_t grid_height() const { return image_height / patch_size; }
  int64_t grid_width() const { return image_width / patch_size; }
  int64_t patches() const { return grid_height() * grid_width(); }
  int64_t tokens() const { return patches() + 1; }  // with the class token
  int64_t kept_patches() const;                     // per image in training (patch_drop)
  // Stage i's stride, the stem's total stride S (their product: 2ⁿ with n stride-2 stages), the
  // patch projection's kernel (P/S) and input channels.
  int64_t stem_stage_stride(size_t i) const {
    return i < stem_strides.size() ? stem_strides[i] : 2;  // validate() rejects a short list
  }
  int64_t stem_stride() const {
    int64_t s = 1;
    for (size_t i = 0; i < stem_channels.size(); ++i) s *= stem_stage_stride(i);
    return s;
  }
  int64_t proj_kernel() const { return patch_size / stem_stride(); }
  int64_t proj_channels() const { return stem_channels.empty() ? channels : stem_channels.back(); }
  nn::LayerConfig layer_config(int block) const;  // the core's settings for block i
  void validate() const;  // vitk::UsageError naming the model option at fault
};

// The settings table (VITK_VIT_SETTINGS, image_size, stem_strides and the eval transform's
// settings) as a schema: the text form of checkpoint attributes and a config file's [model]
// section, --model.KEY, the ranges and the help all come from it.
const settings::Schema<VitConfig>& vit_schema();
// The configuration as text, for checkpoint attributes and the [model] section of a config file:
// "type" = "vit" and every field of vit_schema(). Floats are written so that they read back
// exactly; lists are comma-separated or "none"; image_size is "224" or "224x160" (height x width).
std::map<std::string, std::string> to_config_map(const VitConfig& config);
// The reverse. Missing keys keep their defaults (checkpoints written before a key existed load
// as they did: no "pos_embed_align_corners" means false, no "stem_channels" no stem); an unknown
// key, a bad value or a type other than "vit" throws vitk::Error naming `source` (e.g. the
// checkpoint path) and the key.
VitConfig from_config_map(const std::map<std::string, std::string>& map, const std::string& source);
// "48,96" or "48 96" -> {48, 96}; "" or "none" -> {}. vitk::UsageError otherwise.
std::vector<int64_t> parse_stem_channels(const std::string& text);
std::string stem_channels_text(const std::vector<int64_t>& channels);  // "48,96"
// "1,2,2" -> {1, 2, 2}; "" or "none" -> {}; each 1 or 2, vitk::UsageError otherwise.
std::vector<int64_t> parse_stem_strides(const std::string& text);
std::string stem_strides_text(const VitConfig& config);  // every stage's stride, "2,2"; "none"
// "0,2" -> {0, 2}; "" or "none" -> {}; block indices (0 and up), vitk::UsageError otherwise.
// VitConfig::validate() checks them against the depth.
std::vector<int64_t> parse_pos_conv_blocks(const std::string& text);
std::vector<int64_t> parse_ffn_conv_blocks(
    const std::string& text);  // the same for ffn_conv_blocks
std::string pos_conv_blocks_text(const std::vector<int64_t>& blocks);  // "0,2"; "none"
// "224" -> {224, 224}; "224x160" -> {224, 160}. vitk::UsageError otherwise.
std::pair<int64_t, int64_t> parse_image_size(const std::string& text);

// Sizes for `vitk info` and `vitk inspect` (common/nn/model_info.h): the whole classifier, and
// the rows of its embedding (stem, patch embedding, class token and positions) and of its blocks,
// which a captioner's encoder shares. model_kind() registers the ViT ("vit").
nn::ModelSize model_size(const VitConfig& config);
void add_embedding_sizes(nn::ModelSize& size, const VitConfig& config);
void add_block_sizes(nn::ModelSize& size, const VitConfig& config);
// "TYPE, d_model 192, 3 heads, d_ff 384, 6 encoder layers"
std::string encoder_summary(const VitConfig& config, const std::string& type);
nn::ModelKind model_kind();

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

  // The encoder's output for a model that reads every token (captioning's memory), timm's
  // forward_features: images [B, C, H, W] -> the final norm of every token [B, T', d], the class
  // token first (T' = kept_patches() + 1 in training with patch_drop, else tokens()). Needs pool
  // "token" (the avg-pool models' fc_norm applies after pooling). features_backward takes
  // d(features) [B, T', d] of the last training features() and ADDS the parameter gradients (and
  // writes d(images) as backward does).
  Tensor features(nn::Context& ctx, const Tensor& images);
  void features_backward(nn::Context& ctx, const Tensor& dfeatures, Tensor* dimages = nullptr);

  const VitConfig& config() const { return config_; }
  // Patch dropout: the patches the last training forward kept, int32 [B, kept_patches()] indices
  // in [0, N) in the order their tokens follow the class token (empty when none were dropped).
  const Tensor& kept_patches() const;
  // Makes the next training forward keep these patches (int32 [B, kept_patches()], distinct
  // indices per row) instead of drawing them: the PyTorch parity tests replay a draw of theirs.
  // vitk::Error when the model has no patch_drop or the indices do not fit (and, from that
  // forward, when its batch is not B).
  void force_kept_patches(const Tensor& indices);
  // The encoder layers, e.g. for attention maps (keep_weights) or layer-wise learning rates.
  std::vector<nn::EncoderLayer>& blocks();

 private:
  // Patch embedding, positions and the blocks -> the last block's output [B, T', d] ([B, 1, d]
  // when class_row_allowed and pool "token" let the last block compute the class row alone);
  // and its backward from that output's gradient.
  Tensor run_blocks(nn::Context& ctx, const Tensor& images, bool class_row_allowed);
  void blocks_backward(nn::Context& ctx, Tensor dx, Tensor* dimages);

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

// The windows of a K×K, stride-S convolution with zero padding `pad` (im2col): input
// [B, C, H, W] (channels_last false) or [B, H, W, C] (true) -> cols [B, Ho·Wo, C·K·K] with
// Ho = (H + 2·pad − K)/S + 1 (likewise Wo), each window flattened in (c, i, j) order so that a
// Conv2d weight [C', C, K, K] read as [C', C·K·K] is the convolution; outside the input: 0.
// vitk::Error naming the shapes when they do not fit.
void extract_windows(const Tensor& input, bool channels_last, int64_t kernel, int64_t stride,
                     int64_t pad, Tensor& cols);
// Its adjoint (the gradient): input = Σ over windows of cols, overwritten; the input's shape
// gives the sizes. Overlapping windows add up.
void fold_windows(const Tensor& cols, bool channels_last, int64_t kernel, int64_t stride,
                  int64_t pad, Tensor& input);

// The positional convolution (above; also the MLP's, with d = d_ff) of tokens x [B, 1 + H·W, d],
// rows 1.. being an H×W grid in
// row-major order: out = x, plus, on each patch row (i, j) and channel c,
//   bias[c] + Σ_{u,v < 3} weight[c, 0, u, v] · x[(i + u − 1, j + v − 1), c]   (0 outside the grid).
// out must not alias x. vitk::Error naming the shapes when they do not fit.
void pos_conv_forward(const Tensor& x, int64_t grid_height, int64_t grid_width,
                      const Tensor& weight, const Tensor& bias, Tensor& out);
// Its gradient: dx = dout plus the convolution's transpose applied to dout's patch rows
// (overwritten); dweight [d, 1, 3, 3] and dbias [d] ADD Σ over images and positions. x is the
// forward's input. The sums run in a fixed order, whatever the thread count.
void pos_conv_backward(const Tensor& x, const Tensor& dout, int64_t grid_height, int64_t grid_width,
                       const Tensor& weight, Tensor& dx, Tensor& dweight, Tensor& dbias);

}  // namespace vitk::vit

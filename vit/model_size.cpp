// The ViT's sizes for `vitk info` and `vitk inspect` (common/nn/model_info.h), and its ModelKind.
#include "common/error.h"
#include "common/nn/model_info.h"
#include "vit/vit.h"

namespace vitk::vit {

void add_embedding_sizes(nn::ModelSize& size, const VitConfig& c) {
  const int64_t d = c.d_model, tokens = c.tokens();
  // The stem's 3×3 stages of stride 1 or 2 (conv, LayerNorm, GELU), then the projection over
  // P/S × P/S of the last stage's map (S: the stem's total stride).
  int64_t channels = c.channels, height = c.image_height, width = c.image_width;
  for (size_t i = 0; i < c.stem_channels.size(); ++i) {
    const int64_t out = c.stem_channels[i], stride = c.stem_stage_stride(i);
    height = (height - 1) / stride + 1;
    width = (width - 1) / stride + 1;
    size.add("stem stage " + std::to_string(i + 1), 1, channels * 9 * out + 3 * out,
             channels * 9 * out, height * width, 0, "3·3·C_in·C_out per output pixel");
    channels = out;
  }
  const int64_t kernel = c.proj_kernel();
  const int64_t patch = kernel * kernel * channels;
  size.add("patch embedding", 1, patch * d + d, patch * d, tokens - 1, 0,
           c.stem_channels.empty() ? "P²·C·d per patch" : "(P/S)²·c_n·d per patch");
  size.add("class token + positions", 1, d + tokens * d, 0, 0, 0, "");
}

void add_block_sizes(nn::ModelSize& size, const VitConfig& c) {
  const int64_t d = c.d_model, tokens = c.tokens();
  ParamStore store;  // registration only
  nn::EncoderLayer layer(store, "enc", c.layer_config(0));
  size.add("encoder layer", c.layers, nn::count_params(store, "enc."),
           nn::count_linear_macs(store, "enc."), tokens, 2 * tokens * d,
           "qkv 3d² + proj d² + 2·d·d_ff");
  const int pos_convs = static_cast<int>(c.pos_conv_blocks.size());
  const int ffn_convs = static_cast<int>(c.ffn_conv_blocks.size());
  if (pos_convs > 0)
    size.add("positional convolution", pos_convs, 9 * d + d, 9 * d, tokens - 1, 0,
             "depthwise 3·3·d per patch");
  if (ffn_convs > 0)
    size.add("MLP convolution", ffn_convs, 9 * c.d_ff + c.d_ff, 9 * c.d_ff, tokens - 1, 0,
             "depthwise 3·3·d_ff per patch");
}

std::string encoder_summary(const VitConfig& c, const std::string& type) {
  return type + ", d_model " + std::to_string(c.d_model) + ", " + std::to_string(c.heads) +
         " heads, d_ff " + std::to_string(c.d_ff) + ", " + std::to_string(c.layers) +
         " encoder layers";
}

nn::ModelSize model_size(const VitConfig& c) {
  nn::ModelSize size;
  size.summary = encoder_summary(c, "vit") + ", pre-norm";
  size.tokens = c.tokens();
  size.sequence = std::to_string(size.tokens) + " tokens (patches + class token)";
  size.unit = "image";
  add_embedding_sizes(size, c);
  add_block_sizes(size, c);
  const int64_t d = c.d_model;
  size.add("final layer norm", 1, 2 * d, 0, 0, 0, "");
  size.add("classifier head", 1, d * c.num_classes + c.num_classes, d * c.num_classes, 1, 0,
           "once per image");
  size.finish();
  return size;
}

nn::ModelKind model_kind() {
  nn::ModelKind kind;
  kind.type = "vit";
  kind.summary = "a Vision Transformer classifier";
  kind.fields = vit_schema().infos();
  kind.size = [](const std::map<std::string, std::string>& keys) {
    return model_size(nn::settings_for_size(vit_schema(), keys));
  };
  return kind;
}

}  // namespace vitk::vit

// The captioner's sizes for `vitk info` and `vitk inspect` (common/nn/model_info.h), and its
// ModelKind.
#include "common/error.h"
#include "common/nn/model_info.h"
#include "vit/caption/model.h"

namespace vitk::caption {

nn::ModelSize model_size(const CaptionConfig& c) {
  const vit::VitConfig& e = c.encoder;
  const int64_t d = c.d_model(), V = c.vocab_size, T = c.max_length;
  const int64_t memory = c.memory_tokens();
  nn::ModelSize size;
  size.summary = vit::encoder_summary(e, "caption") + ", " + std::to_string(c.decoder_layers) +
                 " decoder layers, pre-norm";
  size.tokens = e.tokens();
  size.sequence = std::to_string(size.tokens) +
                  " tokens (patches + class token); caption: " + std::to_string(T) +
                  " target positions, vocabulary " + std::to_string(V);
  size.unit = "image + caption";
  vit::add_embedding_sizes(size, e);
  size.add("token embeddings", 1, V * d, 0, 0, 0, "lookup");
  vit::add_block_sizes(size, e);
  // The decoder: learned positions, pre-norm layers over its target positions that cross-attend to
  // the memory (the patches, and the class token if it is kept). Cross-attention keys and values
  // are projected once per memory token, not per target token.
  size.add("decoder positions", 1, T * d, 0, 0, 0, "");
  ParamStore store;  // registration only
  nn::DecoderLayer layer(store, "cap", c.decoder_layer_config());
  size.add(
      "decoder layer", c.decoder_layers, nn::count_params(store, "cap."),
      nn::count_linear_macs(store, "cap.") - 2 * d * d, T, 2 * (T + memory) * d,
      "self qkv 3d² + proj d² + cross q, proj 2d² + 2·d·d_ff; cross k, v 2d² per memory token");
  size.add("final layer norm", 2, 2 * d, 0, 0, 0, "");
  size.add(
      "output projection", 1, c.tie_embeddings ? 0 : V * d, d * V, T, 0,
      c.tie_embeddings ? "d·vocab per target token (the embedding)" : "d·vocab per target token");
  size.finish(c.decoder_layers * 2.0 * d * d * static_cast<double>(memory));
  return size;
}

nn::ModelKind model_kind() {
  nn::ModelKind kind;
  kind.type = "caption";
  kind.summary = "a captioner: a ViT encoder read by a Transformer decoder";
  kind.fields = caption_schema().infos();
  kind.size = [](const std::map<std::string, std::string>& keys) {
    return model_size(nn::settings_for_size(caption_schema(), keys));
  };
  return kind;
}

}  // namespace vitk::caption

#include "common/nn/model_info.h"

#include "common/error.h"

namespace vitk::nn {
namespace {

int64_t count_params(const ParamStore& store, const std::string& prefix = "") {
  int64_t n = 0;
  for (const auto& p : store.params())
    if (p.name.compare(0, prefix.size(), prefix) == 0) n += p.numel();
  return n;
}

// Multiply-adds per token of every 2-D weight under prefix (a Linear computes out·in per row).
int64_t count_linear_macs(const ParamStore& store, const std::string& prefix) {
  int64_t n = 0;
  for (const auto& p : store.params())
    if (p.name.compare(0, prefix.size(), prefix) == 0 && p.shape.size() == 2 && p.name.size() > 7 &&
        p.name.compare(p.name.size() - 7, 7, ".weight") == 0)
      n += p.shape[0] * p.shape[1];
  return n;
}

int64_t stem_stage_stride(const ModelSpec& s, size_t i) {
  return i < s.stem_strides.size() ? s.stem_strides[i] : 2;  // check() rejects a short list
}

int64_t stem_total_stride(const ModelSpec& s) {
  int64_t stride = 1;
  for (size_t i = 0; i < s.stem_channels.size(); ++i) stride *= stem_stage_stride(s, i);
  return stride;
}

// A ViT's patch embedding and blocks: a classifier, or a captioner's encoder.
bool has_vit(const ModelSpec& s) {
  return s.type == "vit" || s.type == "caption";
}

LayerConfig caption_decoder_layer(const ModelSpec& s) {
  LayerConfig l = s.layer;
  if (s.decoder_heads > 0) l.heads = s.decoder_heads;
  if (s.decoder_d_ff > 0) l.d_ff = s.decoder_d_ff;
  return l;
}

void check(const ModelSpec& s) {
  const auto& l = s.layer;
  if (l.d_model <= 0 || l.heads <= 0 || l.d_ff <= 0)
    throw UsageError("model: d_model, heads and d_ff must be positive");
  if (l.d_model % l.heads)
    throw UsageError("model: d_model " + std::to_string(l.d_model) +
                     " is not a multiple of heads " + std::to_string(l.heads));
  if (!has_vit(s) && s.type != "transformer" && s.type != "encoder")
    throw UsageError("model.type must be vit, transformer, encoder or caption, not '" + s.type +
                     "'");
  if (s.type == "caption" && l.d_model % caption_decoder_layer(s).heads)
    throw UsageError("model: d_model " + std::to_string(l.d_model) +
                     " is not a multiple of decoder_heads " + std::to_string(s.decoder_heads));
  if (has_vit(s) && !s.stem_strides.empty() && s.stem_strides.size() != s.stem_channels.size())
    throw UsageError("model: " + std::to_string(s.stem_strides.size()) + " stem_strides for " +
                     std::to_string(s.stem_channels.size()) + " stem_channels stages");
  if (has_vit(s) && s.patch_size % stem_total_stride(s))
    throw UsageError("model: patch_size " + std::to_string(s.patch_size) +
                     " is not a multiple of the stem's stride " +
                     std::to_string(stem_total_stride(s)));
  if (has_vit(s) && (s.pos_convs < 0 || s.pos_convs > s.encoder_layers))
    throw UsageError("model: " + std::to_string(s.pos_convs) + " positional convolutions for " +
                     std::to_string(s.encoder_layers) + " blocks (at most one after each)");
  if (has_vit(s) && (s.ffn_convs < 0 || s.ffn_convs > s.encoder_layers))
    throw UsageError("model: " + std::to_string(s.ffn_convs) + " MLP convolutions for " +
                     std::to_string(s.encoder_layers) + " blocks (at most one in each)");
  if (has_vit(s) && (s.patch_size <= 0 || s.image_size % s.patch_size))
    throw UsageError("model: patch_size " + std::to_string(s.patch_size) +
                     " must divide image_size " + std::to_string(s.image_size));
}

}  // namespace

ModelSize model_size(const ModelSpec& spec) {
  check(spec);
  const int64_t d = spec.layer.d_model;
  ModelSize size;
  // One real layer of each kind, registered into a scratch store.
  ParamStore store;
  EncoderLayer enc(store, "enc", spec.layer);
  const int64_t enc_params = count_params(store, "enc.");
  const int64_t enc_macs = count_linear_macs(store, "enc.");
  const std::string enc_note = "qkv 3d² + proj d² + 2·d·d_ff";

  const bool vit = has_vit(spec), caption = spec.type == "caption";
  const int64_t patches = (spec.image_size / spec.patch_size) * (spec.image_size / spec.patch_size);
  const int64_t tokens = vit ? patches + 1 : spec.sequence_length;
  size.tokens = tokens;
  auto add = [&](std::string name, int count, int64_t params, int64_t macs, int64_t positions,
                 int64_t attention_macs, std::string note) {
    size.blocks.push_back(
        {std::move(name), count, params, macs, attention_macs, std::move(note), positions});
  };
  if (vit) {
    // The stem's 3×3 stages of stride 1 or 2 (conv, LayerNorm, GELU), then the projection over
    // P/S × P/S of the last stage's map (S: the stem's total stride).
    int64_t channels = spec.channels, side = spec.image_size;
    for (size_t i = 0; i < spec.stem_channels.size(); ++i) {
      const int64_t out = spec.stem_channels[i];
      side = (side - 1) / stem_stage_stride(spec, i) + 1;
      add("stem stage " + std::to_string(i + 1), 1, channels * 9 * out + 3 * out,
          channels * 9 * out, side * side, 0, "3·3·C_in·C_out per output pixel");
      channels = out;
    }
    const int64_t kernel = spec.patch_size / stem_total_stride(spec);
    const int64_t patch = kernel * kernel * channels;
    add("patch embedding", 1, patch * d + d, patch * d, tokens - 1, 0,
        spec.stem_channels.empty() ? "P²·C·d per patch" : "(P/S)²·c_n·d per patch");
    add("class token + positions", 1, d + tokens * d, 0, 0, 0, "");
  } else if (spec.vocab_size > 0) {
    const int copies = spec.tied_embeddings ? 1 : (spec.type == "transformer" ? 3 : 2);
    add("token embeddings", copies, spec.vocab_size * d, 0, 0, 0, "lookup");
  }
  if (caption && spec.vocab_size > 0)
    add("token embeddings", 1, spec.vocab_size * d, 0, 0, 0, "lookup");
  const int64_t attn_per_token = 2 * tokens * d;  // q·kᵀ and p·v: T·d each
  add("encoder layer", spec.encoder_layers, enc_params, enc_macs, tokens, attn_per_token, enc_note);
  if (vit && spec.pos_convs > 0)
    add("positional convolution", spec.pos_convs, 9 * d + d, 9 * d, tokens - 1, 0,
        "depthwise 3·3·d per patch");
  if (vit && spec.ffn_convs > 0)
    add("MLP convolution", spec.ffn_convs, 9 * spec.layer.d_ff + spec.layer.d_ff,
        9 * spec.layer.d_ff, tokens - 1, 0, "depthwise 3·3·d_ff per patch");
  if (spec.type == "transformer" && spec.decoder_layers > 0) {
    DecoderLayer dec(store, "dec", spec.layer);
    const int64_t dec_params = count_params(store, "dec.");
    // Cross-attention keys and values are projected once per source token, not per target token.
    const int64_t kv = 2 * d * d;
    add("decoder layer", spec.decoder_layers, dec_params, count_linear_macs(store, "dec.") - kv,
        tokens, 2 * attn_per_token,
        "self qkv 3d² + proj d² + cross q, proj 2d² + 2·d·d_ff; cross k, v 2d² per source token");
  }
  // A captioner's decoder: learned positions, pre-norm layers over its target positions that
  // cross-attend to the memory (the patches, and the class token if it is kept).
  const int64_t memory = patches + (spec.memory_class_token ? 1 : 0);
  if (caption && spec.decoder_layers > 0) {
    add("decoder positions", 1, spec.sequence_length * d, 0, 0, 0, "");
    DecoderLayer dec(store, "cap", caption_decoder_layer(spec));
    add("decoder layer", spec.decoder_layers, count_params(store, "cap."),
        count_linear_macs(store, "cap.") - 2 * d * d, spec.sequence_length,
        2 * (spec.sequence_length + memory) * d,
        "self qkv 3d² + proj d² + cross q, proj 2d² + 2·d·d_ff; cross k, v 2d² per memory token");
  }
  const bool final_norm = spec.layer.pre_norm || vit;
  if (final_norm)
    add("final layer norm", spec.type == "transformer" || caption ? 2 : 1, 2 * d, 0, 0, 0, "");
  if (caption && spec.vocab_size > 0) {
    add("output projection", 1, spec.tied_embeddings ? 0 : spec.vocab_size * d, d * spec.vocab_size,
        spec.sequence_length, 0,
        spec.tied_embeddings ? "d·vocab per target token (the embedding)"
                             : "d·vocab per target token");
  } else if (vit && !caption) {
    add("classifier head", 1, d * spec.num_classes + spec.num_classes, d * spec.num_classes, 1, 0,
        "once per image");
  } else if (spec.vocab_size > 0 && spec.type == "transformer") {
    // Its weights are counted with the embeddings (tied: the same matrix).
    add("output projection", 1, 0, d * spec.vocab_size, tokens, 0, "d·vocab per target token");
  }
  for (const auto& b : size.blocks) size.total_params += b.count * b.params;

  // Multiply-adds of one sequence (one image; one source plus one target sequence; one image and
  // its caption).
  double macs = 0, attention = 0;
  const double t = static_cast<double>(tokens);
  for (const auto& b : size.blocks) {
    macs += b.count * static_cast<double>(b.macs) * static_cast<double>(b.positions);
    attention += b.count * static_cast<double>(b.attention_macs) * static_cast<double>(b.positions);
  }
  if (spec.type == "transformer") macs += spec.decoder_layers * 2.0 * d * d * t;  // cross k, v
  if (caption) macs += spec.decoder_layers * 2.0 * d * d * static_cast<double>(memory);
  size.macs_per_sequence = macs + attention;
  size.attention_macs_per_sequence = attention;
  return size;
}

}  // namespace vitk::nn

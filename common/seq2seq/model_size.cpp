// The translation model's sizes for `vitk info` and `vitk inspect` (common/nn/model_info.h), and
// its ModelKinds: the encoder-decoder, and its encoder alone.
#include "common/error.h"
#include "common/nn/model_info.h"
#include "common/seq2seq/config.h"

namespace vitk::seq2seq {
namespace {

// Settings of `vitk info` only, beside the stored ones: the sequence length the multiply-adds are
// counted for, and the attention score (the core's four; additive and general add parameters).
struct SizeOptions {
  int64_t sequence_length = 128;
  nn::Score score = nn::Score::scaled_dot;
};

std::vector<settings::FieldInfo> size_fields(bool decoder) {
  std::vector<settings::FieldInfo> fields = transformer_schema().infos();
  if (!decoder) {
    std::vector<settings::FieldInfo> kept;
    for (auto& f : fields)
      if (f.key != "decoder_layers" && f.key != "max_length") kept.push_back(f);
    fields = kept;
  }
  settings::FieldInfo length;
  length.key = "sequence_length";
  length.help = "tokens per sequence (source and target) that the multiply-adds are counted for";
  length.default_text = "128";
  length.value_name = "N";
  length.stored = false;
  settings::FieldInfo score;
  score.key = "score";
  score.help = "attention score: scaled_dot, dot, general, additive";
  score.default_text = "scaled_dot";
  score.value_name = "NAME";
  score.stored = false;
  fields.push_back(length);
  fields.push_back(score);
  return fields;
}

// `keys` without the size-only settings, which go to `options`.
std::map<std::string, std::string> take_size_options(std::map<std::string, std::string> keys,
                                                     SizeOptions& options) {
  if (auto it = keys.find("sequence_length"); it != keys.end()) {
    try {
      options.sequence_length = SettingReader{"--model"}.integer(it->first, it->second);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    if (options.sequence_length < 1 || options.sequence_length > (1 << 20))
      throw UsageError("--model.sequence_length must be in [1, 1048576], got " + it->second);
    keys.erase(it);
  }
  if (auto it = keys.find("score"); it != keys.end()) {
    options.score = nn::parse_score(it->second);
    keys.erase(it);
  }
  return keys;
}

std::string summary(const TransformerConfig& c, const std::string& type, bool decoder) {
  return type + ", d_model " + std::to_string(c.d_model) + ", " + std::to_string(c.heads) +
         " heads, d_ff " + std::to_string(c.d_ff) + ", " + std::to_string(c.layers) +
         " encoder layers" +
         (decoder ? ", " + std::to_string(c.decoder_layers) + " decoder layers" : "") +
         (c.pre_norm ? ", pre-norm" : ", post-norm");
}

// The encoder-decoder (decoder true) or its encoder alone.
nn::ModelSize sizes(const TransformerConfig& c, const SizeOptions& o, bool decoder) {
  const int64_t d = c.d_model, tokens = o.sequence_length;
  nn::ModelSize size;
  size.summary = summary(c, decoder ? "transformer" : "encoder", decoder);
  size.tokens = tokens;
  size.sequence = std::to_string(tokens) + " tokens";
  size.unit = decoder ? "source + target sequence" : "sequence";
  const int copies = c.tied_embeddings ? 1 : (decoder ? 3 : 2);
  size.add("token embeddings", copies, c.vocab_size * d, 0, 0, 0, "lookup");
  nn::LayerConfig layer = c.layer_config();
  layer.score = o.score;
  ParamStore store;  // registration only
  nn::EncoderLayer enc(store, "enc", layer);
  const int64_t attention = 2 * tokens * d;  // q·kᵀ and p·v: T·d each
  size.add("encoder layer", c.layers, nn::count_params(store, "enc."),
           nn::count_linear_macs(store, "enc."), tokens, attention, "qkv 3d² + proj d² + 2·d·d_ff");
  if (decoder) {
    nn::DecoderLayer dec(store, "dec", layer);
    // Cross-attention keys and values are projected once per source token, not per target token.
    size.add("decoder layer", c.decoder_layers, nn::count_params(store, "dec."),
             nn::count_linear_macs(store, "dec.") - 2 * d * d, tokens, 2 * attention,
             "self qkv 3d² + proj d² + cross q, proj 2d² + 2·d·d_ff; cross k, v 2d² per source "
             "token");
  }
  if (c.pre_norm) size.add("final layer norm", decoder ? 2 : 1, 2 * d, 0, 0, 0, "");
  // Its weights are counted with the embeddings (tied: the same matrix).
  if (decoder)
    size.add("output projection", 1, 0, d * c.vocab_size, tokens, 0, "d·vocab per target token");
  size.finish(decoder ? c.decoder_layers * 2.0 * d * d * static_cast<double>(tokens) : 0.0);
  return size;
}

nn::ModelKind kind(bool decoder) {
  nn::ModelKind k;
  k.type = decoder ? "transformer" : "encoder";
  k.summary = decoder ? "the encoder-decoder Transformer of translation"
                      : "the translation model's encoder alone";
  k.fields = size_fields(decoder);
  k.size = [decoder](const std::map<std::string, std::string>& keys) {
    SizeOptions o;
    const auto rest = take_size_options(keys, o);
    return sizes(nn::settings_for_size(transformer_schema(), rest), o, decoder);
  };
  return k;
}

}  // namespace

nn::ModelSize model_size(const TransformerConfig& config, int64_t sequence_length) {
  SizeOptions o;
  o.sequence_length = sequence_length;
  return sizes(config, o, /*decoder=*/true);
}

nn::ModelKind model_kind() {
  return kind(/*decoder=*/true);
}
nn::ModelKind encoder_kind() {
  return kind(/*decoder=*/false);
}

}  // namespace vitk::seq2seq

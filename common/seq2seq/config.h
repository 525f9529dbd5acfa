#pragma once
// The settings of the translation model (vitk::seq2seq::Transformer), as a struct, as text for
// checkpoint attributes and the [model] section of a config file, and the fixed token ids of
// every vocabulary (common/vocabulary.h).
#include <cstdint>
#include <map>
#include <string>

#include "common/error.h"
#include "common/nn/model_info.h"
#include "common/nn/nn.h"
#include "common/settings.h"
#include "common/vocabulary.h"

namespace vitk::seq2seq {

// The special ids every vocabulary reserves, so that a model and its tokenizer agree.
constexpr int32_t kPadId = Vocabulary::kPad;
constexpr int32_t kUnkId = Vocabulary::kUnk;
constexpr int32_t kBosId = Vocabulary::kBos;
constexpr int32_t kEosId = Vocabulary::kEos;

// The translation model's settings, one line each: type, name (the [model] key of a config file,
// --model.NAME and the checkpoint attribute), default, values allowed, help (common/settings.h).
// transformer_schema() adds activation (relu | gelu). max_length counts BOS/EOS; tied_embeddings
// is one matrix for the source embedding, the target embedding and the output projection (the
// paper, §3.4), whose gradients of its three uses add up.
#define VITK_TRANSFORMER_SETTINGS(X)                                                               \
  X(int64_t, vocab_size, 8000, between(5, 1 << 24),                                                \
    "one vocabulary for source and target (mt-train: the tokenizer's, --vocab-size)")              \
  X(int64_t, d_model, 512, between(1, 65536), "model width")                                       \
  X(int64_t, heads, 8, at_least(1), "attention heads")                                             \
  X(int64_t, d_ff, 2048, between(1, 1 << 20), "feed-forward inner width")                          \
  X(int, layers, 6, between(1, 1000), "encoder layers")                                            \
  X(int, decoder_layers, 6, between(1, 1000), "decoder layers")                                    \
  X(float, dropout, 0.1f, fraction(), "after embeddings, on residual branches and inside the FFN") \
  X(float, attention_dropout, 0.f, fraction(), "on the attention weights")                         \
  X(bool, pre_norm, false, any(), "true: pre-norm; false: the paper's post-norm")                  \
  X(bool, tied_embeddings, true, any(),                                                            \
    "one matrix for source and target embeddings and the output layer")                            \
  X(int64_t, max_length, 1024, between(2, 1 << 20),                                                \
    "longest source or target in tokens, with BOS/EOS")                                            \
  X(float, norm_eps, 1e-5f, positive(), "layer norm epsilon")

struct TransformerConfig {
  VITK_TRANSFORMER_SETTINGS(VITK_SETTING_MEMBER)
  ops::Activation activation = ops::Activation::relu;

  nn::LayerConfig layer_config() const;  // the core's settings of every layer
  void validate() const;                 // vitk::UsageError naming the model option at fault
};

// The core's settings of every layer of a model whose settings are named as the translation
// model's (d_model, heads, d_ff, activation, pre_norm, dropout, attention_dropout, norm_eps): the
// translation model's and the text classifier's.
template <class C>
nn::LayerConfig layer_config_of(const C& c) {
  nn::LayerConfig l;
  l.d_model = c.d_model;
  l.heads = c.heads;
  l.d_ff = c.d_ff;
  l.activation = c.activation;
  l.pre_norm = c.pre_norm;
  l.dropout = c.dropout;
  l.attention_dropout = c.attention_dropout;
  l.norm_eps = c.norm_eps;
  return l;
}

// Adds the setting "activation" (relu or gelu) of such a model to its schema.
template <class C>
void add_activation_setting(settings::Schema<C>& schema) {
  schema.add_custom(
      "activation", "relu or gelu", "NAME",
      [](const C& c) { return std::string(ops::activation_name(c.activation)); },
      [](C& c, const SettingReader& r, const std::string& text) {
        try {
          c.activation = ops::parse_activation(text);
        } catch (const UsageError& e) {
          throw Error(r.where("activation") + ": " + e.what());
        }
      },
      nullptr);
}

// The settings table (VITK_TRANSFORMER_SETTINGS and activation) as a schema.
const settings::Schema<TransformerConfig>& transformer_schema();
// The configuration as text, for checkpoint attributes and a config file's [model] section:
// "type" = "transformer" and every field of transformer_schema(). Floats read back exactly.
std::map<std::string, std::string> to_config_map(const TransformerConfig& config);
// The reverse: missing keys keep their defaults; an unknown key, a bad value or a type other than
// "transformer" throws vitk::Error naming `source` (e.g. the checkpoint path) and the key.
TransformerConfig from_config_map(const std::map<std::string, std::string>& map,
                                  const std::string& source);

// Sizes for `vitk info` and `vitk inspect` (common/nn/model_info.h) of source and target sequences
// of sequence_length tokens. model_kind() registers the translation model ("transformer"),
// encoder_kind() its encoder alone ("encoder"); both also take `vitk info`'s sequence_length and
// attention score.
nn::ModelSize model_size(const TransformerConfig& config, int64_t sequence_length);
nn::ModelKind model_kind();
nn::ModelKind encoder_kind();

}  // namespace vitk::seq2seq

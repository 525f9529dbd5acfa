// TextClassifierConfig <-> text, validation, the core settings of its layers and its size.
#include "common/seq2seq/text_config.h"

#include "common/error.h"
#include "common/seq2seq/config.h"

namespace vitk::seq2seq {
namespace {

TextPool parse_pool(const std::string& text) {
  if (text == "mean") return TextPool::mean;
  if (text == "cls") return TextPool::cls;
  throw UsageError("pool must be 'mean' or 'cls', got '" + text + "'");
}

settings::Schema<TextClassifierConfig> make_schema() {
  using Self = TextClassifierConfig;
  settings::Schema<TextClassifierConfig> schema("text_classifier", "text classifier");
  schema VITK_TEXT_CLASSIFIER_SETTINGS(VITK_SETTING_FIELD);
  add_activation_setting(schema);
  schema.add_custom(
      "pool",
      "mean (of the encoder's outputs over the sentence) or cls (a class token's output row)",
      "NAME", [](const Self& c) { return std::string(text_pool_name(c.pool)); },
      [](Self& c, const SettingReader& r, const std::string& text) {
        try {
          c.pool = parse_pool(text);
        } catch (const UsageError& e) {
          throw Error(r.where("pool") + ": " + e.what());
        }
      },
      nullptr);
  return schema;
}

}  // namespace

const char* text_pool_name(TextPool p) {
  return p == TextPool::cls ? "cls" : "mean";
}

const settings::Schema<TextClassifierConfig>& text_classifier_schema() {
  static const auto* schema = new settings::Schema<TextClassifierConfig>(make_schema());
  return *schema;
}

nn::LayerConfig TextClassifierConfig::layer_config() const {
  return layer_config_of(*this);
}

void TextClassifierConfig::validate() const {
  text_classifier_schema().check(*this);
  if (d_model % heads != 0)
    throw UsageError("model.d_model " + std::to_string(d_model) +
                     " must be a positive multiple of heads " + std::to_string(heads));
}

std::map<std::string, std::string> to_config_map(const TextClassifierConfig& c) {
  return text_classifier_schema().to_map(c);
}

TextClassifierConfig text_config_from_map(const std::map<std::string, std::string>& map,
                                          const std::string& source) {
  const TextClassifierConfig c = text_classifier_schema().read(map, source);
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw Error(source + ": " + e.what());
  }
  return c;
}

nn::ModelKind text_classifier_kind() {
  nn::ModelKind k;
  k.type = "text_classifier";
  k.summary = "a Transformer encoder, pooled, and a linear layer over the labels";
  k.fields = text_classifier_schema().infos();
  k.size = [](const std::map<std::string, std::string>& keys) {
    const TextClassifierConfig c = nn::settings_for_size(text_classifier_schema(), keys);
    const int64_t d = c.d_model, tokens = c.max_length;
    nn::ModelSize size;
    size.summary = "text_classifier, d_model " + std::to_string(d) + ", " +
                   std::to_string(c.heads) + " heads, d_ff " + std::to_string(c.d_ff) + ", " +
                   std::to_string(c.layers) + " encoder layers, " +
                   (c.pre_norm ? "pre-norm" : "post-norm") + ", " + text_pool_name(c.pool) +
                   " pooling";
    size.tokens = tokens;
    size.sequence = std::to_string(tokens) + " tokens (max_length)";
    size.unit = "sentence";
    size.add("token embeddings", 1, c.vocab_size * d, 0, 0, 0, "lookup");
    if (c.pool == TextPool::cls) size.add("class token", 1, d, 0, 0, 0, "");
    ParamStore store;  // registration only
    nn::EncoderLayer enc(store, "enc", c.layer_config());
    size.add("encoder layer", c.layers, nn::count_params(store, "enc."),
             nn::count_linear_macs(store, "enc."), tokens, 2 * tokens * d,
             "qkv 3d² + proj d² + 2·d·d_ff");
    if (c.pre_norm) size.add("final layer norm", 1, 2 * d, 0, 0, 0, "");
    size.add("head", 1, c.num_classes * (d + 1), d * c.num_classes, 1, 0, "d·classes");
    size.finish();
    return size;
  };
  return k;
}

}  // namespace vitk::seq2seq

// TransformerConfig <-> text, validation and the core settings of its layers.
#include "common/seq2seq/config.h"

#include "common/error.h"

namespace vitk::seq2seq {
namespace {

settings::Schema<TransformerConfig> make_transformer_schema() {
  using Self = TransformerConfig;
  settings::Schema<TransformerConfig> schema("transformer", "translation model");
  schema VITK_TRANSFORMER_SETTINGS(VITK_SETTING_FIELD);
  schema.add_custom(
      "activation", "relu or gelu", "NAME",
      [](const TransformerConfig& c) { return std::string(ops::activation_name(c.activation)); },
      [](TransformerConfig& c, const SettingReader& r, const std::string& text) {
        try {
          c.activation = ops::parse_activation(text);
        } catch (const UsageError& e) {
          throw Error(r.where("activation") + ": " + e.what());
        }
      },
      nullptr);
  return schema;
}

}  // namespace

const settings::Schema<TransformerConfig>& transformer_schema() {
  static const auto* schema = new settings::Schema<TransformerConfig>(make_transformer_schema());
  return *schema;
}

nn::LayerConfig TransformerConfig::layer_config() const {
  nn::LayerConfig c;
  c.d_model = d_model;
  c.heads = heads;
  c.d_ff = d_ff;
  c.activation = activation;
  c.pre_norm = pre_norm;
  c.dropout = dropout;
  c.attention_dropout = attention_dropout;
  c.norm_eps = norm_eps;
  return c;
}

void TransformerConfig::validate() const {
  // Each setting's range (ceilings far above any real model, so that a damaged or hostile value is
  // named here instead of being built; the memory a size within them takes is weighed against the
  // machine's, common/seq2seq/checkpoint.h), then what they must satisfy together.
  transformer_schema().check(*this);
  if (d_model % heads != 0)
    throw UsageError("model.d_model " + std::to_string(d_model) +
                     " must be a positive multiple of heads " + std::to_string(heads));
}

std::map<std::string, std::string> to_config_map(const TransformerConfig& c) {
  return transformer_schema().to_map(c);
}

TransformerConfig from_config_map(const std::map<std::string, std::string>& map,
                                  const std::string& source) {
  const TransformerConfig c = transformer_schema().read(map, source);
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw Error(source + ": " + e.what());
  }
  return c;
}

}  // namespace vitk::seq2seq

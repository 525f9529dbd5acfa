// TransformerConfig <-> text, validation and the core settings of its layers.
#include "common/seq2seq/config.h"

#include "common/error.h"

namespace vitk::seq2seq {
namespace {

settings::Schema<TransformerConfig> make_transformer_schema() {
  using Self = TransformerConfig;
  settings::Schema<TransformerConfig> schema("transformer", "translation model");
  schema VITK_TRANSFORMER_SETTINGS(VITK_SETTING_FIELD);
  add_activation_setting(schema);
  return schema;
}

}  // namespace

const settings::Schema<TransformerConfig>& transformer_schema() {
  static const auto* schema = new settings::Schema<TransformerConfig>(make_transformer_schema());
  return *schema;
}

nn::LayerConfig TransformerConfig::layer_config() const {
  return layer_config_of(*this);
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

// CaptionConfig: the decoder's core settings, validation and the configuration as text.
#include <string>

#include "common/error.h"
#include "vit/caption/model.h"

namespace vitk::caption {

nn::LayerConfig CaptionConfig::decoder_layer_config() const {
  nn::LayerConfig l;
  l.d_model = d_model();
  l.heads = decoder_heads;
  l.d_ff = d_ff();
  l.activation = ops::Activation::gelu;
  l.pre_norm = true;
  l.dropout = decoder_dropout;
  l.attention_dropout = decoder_attention_dropout;
  l.norm_eps = 1e-5f;  // PyTorch's nn.TransformerDecoderLayer default
  return l;
}

namespace {

settings::Schema<CaptionConfig> make_caption_schema() {
  using Self = CaptionConfig;
  settings::Schema<CaptionConfig> schema("caption", "captioning model");
  schema.include(vit::vit_schema(), &CaptionConfig::encoder, {"num_classes"});
  schema VITK_CAPTION_SETTINGS(VITK_SETTING_FIELD);
  return schema;
}

}  // namespace

const settings::Schema<CaptionConfig>& caption_schema() {
  static const auto* schema = new settings::Schema<CaptionConfig>(make_caption_schema());
  return *schema;
}

void CaptionConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError("model." + what);
  };
  encoder.validate();
  need(encoder.num_classes == 0, "num_classes: a captioning encoder has no head (0)");
  caption_schema().check(*this);
  need(d_model() % decoder_heads == 0, "decoder_heads " + std::to_string(decoder_heads) +
                                           " must divide d_model " + std::to_string(d_model()));
  need(encoder.patch_drop == 0.f || memory_class_token,
       "patch_drop: the memory without the class token needs every patch");
  need(!memory_positions || d_model() % 4 == 0,
       "memory_positions: d_model " + std::to_string(d_model()) +
           " must be a multiple of 4 (sine and cosine of rows and of columns)");
  need(!memory_positions || encoder.patch_drop == 0.f,
       "memory_positions: the positions are those of every patch; patch_drop must be 0");
}

std::map<std::string, std::string> to_config_map(const CaptionConfig& c) {
  return caption_schema().to_map(c);
}

CaptionConfig caption_config_from_map(const std::map<std::string, std::string>& map,
                                      const std::string& source) {
  const auto type = map.find("type");
  if (type == map.end() || type->second != "caption")
    throw Error(source + ": model.type is '" + (type == map.end() ? "" : type->second) +
                "', not a captioning model ('caption')");
  const CaptionConfig c = caption_schema().read(map, source);
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw Error(source + ": " + e.what());
  }
  return c;
}

}  // namespace vitk::caption

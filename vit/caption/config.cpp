// CaptionConfig: the decoder's core settings, validation and the configuration as text.
#include <string>

#include "common/config_text.h"
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

void CaptionConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError("model." + what);
  };
  encoder.validate();
  need(encoder.num_classes == 0, "num_classes: a captioning encoder has no head (0)");
  need(vocab_size >= 5 && vocab_size <= (1 << 24),
       "vocab_size must be in [5, 16777216], got " + std::to_string(vocab_size));
  need(max_length >= 2 && max_length <= 4096,
       "max_length must be in [2, 4096], got " + std::to_string(max_length));
  need(decoder_layers >= 1 && decoder_layers <= 1000,
       "decoder_layers must be in [1, 1000], got " + std::to_string(decoder_layers));
  need(decoder_heads >= 1 && d_model() % decoder_heads == 0,
       "decoder_heads " + std::to_string(decoder_heads) + " must divide d_model " +
           std::to_string(d_model()));
  need(decoder_d_ff >= 0 && decoder_d_ff <= (1 << 20), "decoder_d_ff must be in [0, 1048576]");
  need(decoder_dropout >= 0.f && decoder_dropout < 1.f, "decoder_dropout must be in [0, 1)");
  need(decoder_attention_dropout >= 0.f && decoder_attention_dropout < 1.f,
       "decoder_attention_dropout must be in [0, 1)");
  need(encoder.patch_drop == 0.f || memory_class_token,
       "patch_drop: the memory without the class token needs every patch");
  need(!memory_positions || d_model() % 4 == 0,
       "memory_positions: d_model " + std::to_string(d_model()) +
           " must be a multiple of 4 (sine and cosine of rows and of columns)");
  need(!memory_positions || encoder.patch_drop == 0.f,
       "memory_positions: the positions are those of every patch; patch_drop must be 0");
}

namespace {

const char* const kCaptionKeys[] = {"vocab_size",
                                    "max_length",
                                    "decoder_layers",
                                    "decoder_heads",
                                    "decoder_d_ff",
                                    "decoder_dropout",
                                    "decoder_attention_dropout",
                                    "tie_embeddings",
                                    "memory_class_token",
                                    "memory_positions"};

}  // namespace

std::map<std::string, std::string> to_config_map(const CaptionConfig& c) {
  std::map<std::string, std::string> m = to_config_map(c.encoder);
  m.erase("num_classes");
  m["type"] = "caption";
  m["vocab_size"] = std::to_string(c.vocab_size);
  m["max_length"] = std::to_string(c.max_length);
  m["decoder_layers"] = std::to_string(c.decoder_layers);
  m["decoder_heads"] = std::to_string(c.decoder_heads);
  m["decoder_d_ff"] = std::to_string(c.decoder_d_ff);
  m["decoder_dropout"] = float_text(c.decoder_dropout);
  m["decoder_attention_dropout"] = float_text(c.decoder_attention_dropout);
  m["tie_embeddings"] = c.tie_embeddings ? "true" : "false";
  m["memory_class_token"] = c.memory_class_token ? "true" : "false";
  m["memory_positions"] = c.memory_positions ? "true" : "false";
  return m;
}

CaptionConfig caption_config_from_map(const std::map<std::string, std::string>& map,
                                      const std::string& source) {
  const auto type = map.find("type");
  if (type == map.end() || type->second != "caption")
    throw Error(source + ": model.type is '" + (type == map.end() ? "" : type->second) +
                "', not a captioning model ('caption')");
  std::map<std::string, std::string> encoder = map;
  encoder["type"] = "vit";
  encoder["num_classes"] = "0";
  encoder["pool"] = map.count("pool") ? map.at("pool") : "token";
  CaptionConfig c;
  for (const char* key : kCaptionKeys) encoder.erase(key);
  c.encoder = vit::from_config_map(encoder, source);
  const SettingReader r{source};
  auto integer = [&](const std::string& key, int64_t& out) {
    if (const auto it = map.find(key); it != map.end()) out = r.integer(key, it->second);
  };
  auto real = [&](const std::string& key, float& out) {
    if (const auto it = map.find(key); it != map.end()) out = r.real(key, it->second);
  };
  auto boolean = [&](const std::string& key, bool& out) {
    if (const auto it = map.find(key); it != map.end()) out = r.boolean(key, it->second);
  };
  int64_t layers = c.decoder_layers;
  integer("vocab_size", c.vocab_size);
  integer("max_length", c.max_length);
  integer("decoder_layers", layers);
  if (layers < 1 || layers > 1000)
    throw Error(r.where("decoder_layers") + ": expected 1 to 1000, got " + std::to_string(layers));
  c.decoder_layers = static_cast<int>(layers);
  integer("decoder_heads", c.decoder_heads);
  integer("decoder_d_ff", c.decoder_d_ff);
  real("decoder_dropout", c.decoder_dropout);
  real("decoder_attention_dropout", c.decoder_attention_dropout);
  boolean("tie_embeddings", c.tie_embeddings);
  boolean("memory_class_token", c.memory_class_token);
  boolean("memory_positions", c.memory_positions);
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw Error(source + ": " + e.what());
  }
  return c;
}

}  // namespace vitk::caption

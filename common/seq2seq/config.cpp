// TransformerConfig <-> text, validation and the core settings of its layers.
#include "common/seq2seq/config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "common/config_text.h"
#include "common/error.h"

namespace vitk::seq2seq {
namespace {

using Reader = SettingReader;

// An int setting (a layer count): a value beyond int is out of range, not wrapped to another.
int int_setting(const Reader& r, const std::string& key, const std::string& value) {
  const int64_t v = r.integer(key, value);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    throw Error(r.where(key) + ": " + value + " is out of range");
  return static_cast<int>(v);
}

}  // namespace

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
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError("model." + what);
  };
  // Room for the four reserved ids and at least one ordinary token.
  need(vocab_size > kEosId + 1,
       "vocab_size must be at least 5 (pad, unk, bos, eos and one token), got " +
           std::to_string(vocab_size));
  // Ceilings far above any real model, so that a damaged or hostile value is named here instead
  // of being built; the memory a size within them takes is weighed against the machine's
  // (common/seq2seq/checkpoint.h).
  auto at_most = [&](int64_t value, int64_t limit, const std::string& key) {
    need(value <= limit,
         key + " must be at most " + std::to_string(limit) + ", got " + std::to_string(value));
  };
  at_most(vocab_size, 1 << 24, "vocab_size");
  at_most(d_model, 65536, "d_model");
  at_most(d_ff, 1 << 20, "d_ff");
  at_most(encoder_layers, 1000, "layers (encoder)");
  at_most(decoder_layers, 1000, "decoder_layers");
  at_most(max_length, 1 << 20, "max_length");
  need(d_model > 0 && heads > 0 && d_model % heads == 0,
       "d_model " + std::to_string(d_model) + " must be a positive multiple of heads " +
           std::to_string(heads));
  need(d_ff > 0, "d_ff must be positive");
  need(encoder_layers >= 1, "layers (encoder) must be at least 1");
  need(decoder_layers >= 1, "decoder_layers must be at least 1");
  need(dropout >= 0 && dropout < 1, "dropout must be in [0, 1)");
  need(attention_dropout >= 0 && attention_dropout < 1, "attention_dropout must be in [0, 1)");
  need(max_length >= 2, "max_length must be at least 2");
  need(norm_eps > 0, "norm_eps must be positive");
}

std::map<std::string, std::string> to_config_map(const TransformerConfig& c) {
  std::map<std::string, std::string> m;
  m["type"] = "transformer";
  m["vocab_size"] = std::to_string(c.vocab_size);
  m["d_model"] = std::to_string(c.d_model);
  m["heads"] = std::to_string(c.heads);
  m["d_ff"] = std::to_string(c.d_ff);
  m["layers"] = std::to_string(c.encoder_layers);
  m["decoder_layers"] = std::to_string(c.decoder_layers);
  m["dropout"] = float_text(c.dropout);
  m["attention_dropout"] = float_text(c.attention_dropout);
  m["activation"] = ops::activation_name(c.activation);
  m["pre_norm"] = c.pre_norm ? "true" : "false";
  m["tied_embeddings"] = c.tie_embeddings ? "true" : "false";
  m["max_length"] = std::to_string(c.max_length);
  m["norm_eps"] = float_text(c.norm_eps);
  return m;
}

TransformerConfig from_config_map(const std::map<std::string, std::string>& map,
                                  const std::string& source) {
  TransformerConfig c;
  Reader r{source};
  auto type = map.find("type");
  if (type != map.end() && type->second != "transformer")
    throw Error(source + ": a '" + type->second + "' model, not a translation model (transformer)");
  for (const auto& [key, value] : map) {
    if (key == "type") continue;
    if (key == "vocab_size")
      c.vocab_size = r.integer(key, value);
    else if (key == "d_model")
      c.d_model = r.integer(key, value);
    else if (key == "heads")
      c.heads = r.integer(key, value);
    else if (key == "d_ff")
      c.d_ff = r.integer(key, value);
    else if (key == "layers")
      c.encoder_layers = int_setting(r, key, value);
    else if (key == "decoder_layers")
      c.decoder_layers = int_setting(r, key, value);
    else if (key == "dropout")
      c.dropout = r.real(key, value);
    else if (key == "attention_dropout")
      c.attention_dropout = r.real(key, value);
    else if (key == "activation") {
      try {
        c.activation = ops::parse_activation(value);
      } catch (const UsageError& e) {
        throw Error(r.where(key) + ": " + e.what());
      }
    } else if (key == "pre_norm")
      c.pre_norm = r.boolean(key, value);
    else if (key == "tied_embeddings")
      c.tie_embeddings = r.boolean(key, value);
    else if (key == "max_length")
      c.max_length = r.integer(key, value);
    else if (key == "norm_eps")
      c.norm_eps = r.real(key, value);
    else
      throw Error(source + ": unknown model setting '" + key + "'");
  }
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw Error(source + ": " + e.what());
  }
  return c;
}

}  // namespace vitk::seq2seq

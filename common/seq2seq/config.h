#pragma once
// The settings of the translation model (vitk::seq2seq::Transformer), as a struct, as text for
// checkpoint attributes and the [model] section of a config file, and the fixed token ids of
// every vocabulary (common/vocabulary.h).
#include <cstdint>
#include <map>
#include <string>

#include "common/nn/nn.h"
#include "common/vocabulary.h"

namespace vitk::seq2seq {

// The special ids every vocabulary reserves, so that a model and its tokenizer agree.
constexpr int32_t kPadId = Vocabulary::kPad;
constexpr int32_t kUnkId = Vocabulary::kUnk;
constexpr int32_t kBosId = Vocabulary::kBos;
constexpr int32_t kEosId = Vocabulary::kEos;

struct TransformerConfig {
  int64_t vocab_size = 8000;  // one vocabulary for source and target
  int64_t d_model = 512;
  int64_t heads = 8;
  int64_t d_ff = 2048;
  int encoder_layers = 6;
  int decoder_layers = 6;
  float dropout = 0.1f;  // after embeddings + positions, on residual branches and inside the FFN
  float attention_dropout = 0.f;  // on the attention weights
  ops::Activation activation = ops::Activation::relu;
  bool pre_norm = false;  // false: the paper's post-norm; true: pre-norm with final norms
  // One matrix for the source embedding, the target embedding and the output projection (the
  // paper, §3.4): gradients of its three uses add up.
  bool tie_embeddings = true;
  int64_t max_length = 1024;  // longest source or target sequence (positions), with BOS/EOS
  float norm_eps = 1e-5f;

  nn::LayerConfig layer_config() const;  // the core's settings of every layer
  void validate() const;                 // vitk::UsageError naming the model option at fault
};

// The configuration as text, with the keys of the [model] section that `vitk info` also reads:
// "type" (= "transformer"), "vocab_size", "d_model", "heads", "d_ff", "layers" (encoder layers),
// "decoder_layers", "dropout", "attention_dropout", "activation" (relu | gelu), "pre_norm",
// "tied_embeddings", "max_length", "norm_eps". Floats read back exactly.
std::map<std::string, std::string> to_config_map(const TransformerConfig& config);
// The reverse: missing keys keep their defaults; an unknown key, a bad value or a type other than
// "transformer" throws vitk::Error naming `source` (e.g. the checkpoint path) and the key.
TransformerConfig from_config_map(const std::map<std::string, std::string>& map,
                                  const std::string& source);

}  // namespace vitk::seq2seq

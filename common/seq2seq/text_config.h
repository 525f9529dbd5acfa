#pragma once
// The settings of the text classifier (vitk::seq2seq::TextClassifier: a sentence -> one of
// num_classes labels), as a struct, as text for checkpoint attributes and the [model] section of
// a config file, and its size for `vitk info`.
#include <cstdint>
#include <map>
#include <string>

#include "common/nn/model_info.h"
#include "common/nn/nn.h"
#include "common/settings.h"

namespace vitk::seq2seq {

// How the encoder's outputs become one vector per sentence.
enum class TextPool {
  mean,  // the mean over the sentence's tokens (EOS included, padding not)
  cls,   // a learned class token read before the first token: its output row
};
const char* text_pool_name(TextPool p);  // "mean" | "cls"

// The text classifier's settings, one line each: type, name (the [model] key of a config file,
// --model.NAME and the checkpoint attribute), default, values allowed, help (common/settings.h).
// text_classifier_schema() adds activation (relu | gelu) and pool (mean | cls). The encoder's
// settings mean what they mean in the translation model, so that its encoder loads
// (--encoder-from); max_length counts EOS and the class token.
#define VITK_TEXT_CLASSIFIER_SETTINGS(X)                                                        \
  X(int64_t, vocab_size, 8000, between(5, 1 << 24), "vocabulary (text-train: the tokenizer's)") \
  X(int64_t, num_classes, 2, between(2, 1 << 20), "labels (text-train: the training file's)")   \
  X(int64_t, d_model, 256, between(1, 65536), "model width")                                    \
  X(int64_t, heads, 4, at_least(1), "attention heads")                                          \
  X(int64_t, d_ff, 1024, between(1, 1 << 20), "feed-forward inner width")                       \
  X(int, layers, 3, between(1, 1000), "encoder layers")                                         \
  X(float, dropout, 0.1f, fraction(),                                                           \
    "after embeddings, on residual branches, in the FFN, pooled")                               \
  X(float, attention_dropout, 0.f, fraction(), "on the attention weights")                      \
  X(bool, pre_norm, false, any(), "true: pre-norm (with a final norm); false: post-norm")       \
  X(int64_t, max_length, 256, between(2, 1 << 20),                                              \
    "longest sentence in tokens, with EOS and the class token")                                 \
  X(float, norm_eps, 1e-5f, positive(), "layer norm epsilon")

struct TextClassifierConfig {
  VITK_TEXT_CLASSIFIER_SETTINGS(VITK_SETTING_MEMBER)
  ops::Activation activation = ops::Activation::relu;
  TextPool pool = TextPool::mean;

  nn::LayerConfig layer_config() const;  // the core's settings of every encoder layer
  void validate() const;                 // vitk::UsageError naming the model option at fault
};

const settings::Schema<TextClassifierConfig>& text_classifier_schema();
// "type" = "text_classifier" and every field of text_classifier_schema(); floats read back exactly.
std::map<std::string, std::string> to_config_map(const TextClassifierConfig& config);
// The reverse: missing keys keep their defaults; an unknown key, a bad value or another type
// throws vitk::Error naming `source` and the key.
TextClassifierConfig text_config_from_map(const std::map<std::string, std::string>& map,
                                          const std::string& source);

// `vitk info` and `vitk inspect`: the text classifier ("text_classifier").
nn::ModelKind text_classifier_kind();

}  // namespace vitk::seq2seq

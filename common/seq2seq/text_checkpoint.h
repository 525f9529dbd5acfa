#pragma once
// Text classifier checkpoints: the model's parameters by name, its TextClassifierConfig as
// attributes, the labels as class names and the tokenizer as bytes, so that a checkpoint alone
// classifies; a run's last.h5 also holds the optimizer and the training state. Loading checks the
// type, every size against the stored tensors and the machine's memory, and names the file and
// the key or tensor at fault. Also: the translation model's encoder as a starting point
// (`text-train --encoder-from`).
#include <memory>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "common/seq2seq/text_model.h"

namespace vitk::seq2seq {

// Everything but the tensors.
struct TextMeta {
  TextClassifierConfig config;
  std::string tokenizer;            // serialized SentencePiece ModelProto
  std::vector<std::string> labels;  // num_classes names, in the order of the logits
  io::CheckpointMeta meta;
};

// vitk::Error naming `path` when it is not a text classifier checkpoint (another model type, no
// tokenizer, labels that do not match num_classes), its sizes do not match its tensors, or the
// model would not fit in memory.
TextMeta read_text_meta(const std::string& path);

// A model ready to classify: built from the checkpoint's configuration, weights loaded (int8
// files of `vitk quantize` too).
struct LoadedText {
  TextMeta meta;
  std::unique_ptr<ParamStore> params;
  std::unique_ptr<TextClassifier> model;
};
LoadedText load_text_classifier(const std::string& path);

// The least memory a model of this configuration takes while a checkpoint loads. Saturating.
uint64_t memory_bytes(const TextClassifierConfig& config);

// --encoder-from: the encoder settings of the translation checkpoint at `path` (d_model, heads,
// d_ff, layers, pre_norm, activation, norm_eps, vocabulary) over `config`, and its tokenizer.
// vitk::Error naming the file when it is not a translation checkpoint.
struct EncoderStart {
  TextClassifierConfig config;
  std::string tokenizer;
  std::string path;
};
EncoderStart read_encoder_start(const std::string& path, const TextClassifierConfig& config);
// Copies the translation model's embedding and encoder tensors into `model`'s (encoder_params()),
// all of them, each by name ("embed_tokens.weight" or "encoder.embed_tokens.weight" into
// "encoder.embed_tokens.weight"); the class token and the head keep their initialisation. Returns
// the number of tensors copied; vitk::Error naming the file and the tensor that is missing or of
// another shape.
int64_t load_encoder_from(const EncoderStart& start, ParamStore& params, TextClassifier& model);

}  // namespace vitk::seq2seq

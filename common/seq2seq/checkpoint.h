#pragma once
// Translation checkpoints: the Transformer's parameters by name, its TransformerConfig as
// attributes and the tokenizer as bytes (so that a checkpoint alone can translate); a run's
// last.h5 also holds the optimizer moments and the training state (common/train/state.h). Written
// atomically by io::save_checkpoint; loading checks every name and shape and names the file and
// the tensor at fault. Also: averaging checkpoints (`vitk average`).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/io/checkpoint.h"
#include "common/params.h"
#include "common/seq2seq/model.h"
#include "common/train/state.h"

namespace vitk::seq2seq {

// The name of the SentencePiece model under /files (io::CheckpointMeta::files).
constexpr const char* kTokenizerFile = "sentencepiece.model";

// Everything but the tensors.
struct TranslationMeta {
  TransformerConfig config;
  std::string tokenizer;  // serialized SentencePiece ModelProto
  io::CheckpointMeta meta;
  std::optional<train::TrainState> state;  // only in a run's last.h5
};

// Writes the weights with the configuration and the tokenizer atomically to path; `step` is the
// number of optimizer steps taken.
void save_translation(const std::string& path, const ParamStore& params,
                      const TransformerConfig& config, const std::string& tokenizer, int64_t step);

// The tokenizer a translation checkpoint stores; vitk::Error naming `path` when it has none.
const std::string& tokenizer_bytes(const io::CheckpointMeta& meta, const std::string& path);

// Reads the attributes and the tokenizer. vitk::Error naming the file when it is not a
// translation checkpoint (another model type, no tokenizer) or is damaged.
TranslationMeta read_translation_meta(const std::string& path);

// The configuration of the translation checkpoint at `path` (its attributes `meta`), checked
// before any model is built from it: every size key present, each value within
// TransformerConfig::validate's limits, the stored tensors' names and shapes (no data read)
// against what the values imply, and the memory the model needs against the machine's.
// vitk::Error naming the file and the configuration key at fault.
TransformerConfig stored_config(const std::string& path, const io::CheckpointMeta& meta);

// The least memory a model of this configuration takes while a checkpoint loads (parameters
// three times over: values, gradients, the read's copy; the position table). Saturating.
uint64_t memory_bytes(const TransformerConfig& config);

// A model ready to translate: built from the checkpoint's configuration, weights loaded.
struct LoadedTranslation {
  TranslationMeta meta;
  std::unique_ptr<ParamStore> params;
  std::unique_ptr<Transformer> model;
};
LoadedTranslation load_translation(const std::string& path);

// The element-wise mean (accumulated in double) of the checkpoints' parameters, saved atomically
// to `output` with the first one's configuration and tokenizer and the largest step, without
// training state. Every checkpoint must have the same configuration, tokenizer, tensor names and
// shapes: vitk::Error naming the file (and the setting or tensor) otherwise. Returns the number
// of parameters averaged.
int64_t average_checkpoints(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace vitk::seq2seq

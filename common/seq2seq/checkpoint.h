#pragma once
// Translation checkpoints: the Transformer's parameters by name, its TransformerConfig as
// attributes, the SentencePiece model as bytes (so that a checkpoint alone can translate) and,
// for a run to continue exactly, the optimizer moments, the step and a TrainState. Written
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

namespace vitk::optim {
class Optimizer;
}

namespace vitk::seq2seq {

// The name of the SentencePiece model under /files (io::CheckpointMeta::files).
constexpr const char* kTokenizerFile = "sentencepiece.model";

// Where a training run stands, beyond the weights, the optimizer's moments and its step count:
// what `vitk mt-train --resume` needs to take the very next step it would have taken.
struct TrainState {
  int64_t epoch = 0;                       // the epoch in progress (0-based)
  int64_t batch = 0;                       // batches of that epoch's list already trained
  int64_t batches_in_epoch = 0;            // the length of that list (a check on resume)
  int64_t max_tokens = 0;                  // the batch size the list was cut with
  uint64_t seed = 0;                       // --seed: data order, scheduled sampling
  uint64_t rng_seed = 0, rng_counter = 0;  // the dropout stream
  double best_bleu = -1;                   // best validation BLEU so far (-1: none yet)
  int64_t best_step = 0;
  int64_t bad_validations = 0;  // validations since the best (early stopping)
  double loss_sum = 0;          // Σ loss · tokens since the last validation
  int64_t loss_tokens = 0;
  int64_t last_validation = 0;  // the step of the last validation (0: none)

  std::vector<uint64_t> words() const;  // as stored in the rng_state attribute
  // Throws vitk::Error naming `path` when the words are not a TrainState.
  static TrainState from_words(const std::vector<uint64_t>& words, const std::string& path);
};

// Everything but the tensors.
struct TranslationMeta {
  TransformerConfig config;
  std::string tokenizer;  // serialized SentencePiece ModelProto
  io::CheckpointMeta meta;
  std::optional<TrainState> state;  // only in a run's last.h5
};

// Writes the weights (and, for a resumable checkpoint, the state and the optimizer's moments)
// atomically to path; `step` is the number of optimizer steps taken.
void save_translation(const std::string& path, const ParamStore& params,
                      const TransformerConfig& config, const std::string& tokenizer, int64_t step,
                      const TrainState* state = nullptr, optim::Optimizer* optimizer = nullptr);

// Reads the attributes and the tokenizer. vitk::Error naming the file when it is not a
// translation checkpoint (another model type, no tokenizer) or is damaged.
TranslationMeta read_translation_meta(const std::string& path);

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

#pragma once
// Training of the translation Transformer (`vitk mt-train`), as in "Attention Is All You Need":
// its options, and the run as a seq2seq::TranslationTask (common/seq2seq/train_task.h) of the one
// training loop (common/train/trainer.h, which says what a run directory holds; translation
// checkpoints also hold the tokenizer). Validation loss and BLEU every --valid-freq steps and at
// the end, keep-best, early stopping, and checkpoints that resume bit for bit, also from the
// middle of an epoch. tools/cmd_mt_train.cpp only maps options onto TrainOptions.
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/ops/ops.h"
#include "common/seq2seq/config.h"
#include "common/train/trainer.h"

namespace vitk::seq2seq {

// Named after the options; validate() names the option at fault as "--name".
struct TrainOptions {
  TrainOptions();
  // The loop's options (common/train/trainer.h): --output, --resume, --epochs (10), --max-steps,
  // --valid-freq (valid_every: steps between validations, 1000), --early-stopping (validations
  // without a better BLEU), --keep-last (step-N.h5 of the last K validations), --seed,
  // --clip-grad, --precision (bf16 keeps f32 master weights, gradients and Adam moments),
  // --log-interval, --profile, --profile-every, --accum-steps, --bucket-mb, --checkpoint-every.
  train::Options loop;
  std::string train;         // --train: TSV, or sources with --train-target
  std::string train_target;  // --train-target
  std::string valid, valid_target;
  std::string spm;  // --spm: a SentencePiece .model; empty: train one on the training text

  seq2seq::TransformerConfig model;           // vocab_size is the tokenizer's
  std::vector<std::string> model_keys_given;  // keys of to_config_map given as --model.KEY
  int vocab_size = 8000;                      // --vocab-size of the SentencePiece model trained
  std::string spm_type = "bpe";               // --spm-type: bpe | unigram

  int64_t max_tokens = 4096;     // --max-tokens per batch (padded source or target)
  float lr_factor = 1.f;         // --lr-factor: the schedule's factor
  float lr = 0.f;                // --lr: the peak rate instead (after warmup); 0: from the factor
  int64_t warmup_steps = 4000;   // --warmup-steps
  float label_smoothing = 0.1f;  // --label-smoothing
  int beam_size = 1;             // --beam-size of the validation decode (1: greedy)
  float length_penalty = 0.6f;
  int64_t valid_batch_size = 64;   // sentences per validation search
  float scheduled_sampling = 0.f;  // --scheduled-sampling: P(feed the model's own prediction)

  void validate() const;  // vitk::UsageError "--lr-factor must be ..., got ..."
};

class TranslationData;  // common/seq2seq/train_task.h

// Runs (or resumes) a run with the one training loop (train::Trainer: the run directory, resume,
// Ctrl-C, metrics.csv, best.h5, step-N.h5) and logs to `log`; the corpora and the tokenizer come
// through `data`. Options, data and the checkpoint to resume are all checked before anything is
// written (vitk::UsageError for a bad option, vitk::Error for a bad file). `stop` (may be null) is
// polled after every step: when non-zero the run saves last.h5 and returns
// train::End::interrupted.
train::Result train(const TrainOptions& options, TranslationData& data, std::ostream& log,
                    bool tty = false, const std::atomic<int>* stop = nullptr);

}  // namespace vitk::seq2seq

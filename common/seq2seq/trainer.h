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
  std::string train;         // --train: TSV, or sources with --train-target
  std::string train_target;  // --train-target
  std::string valid, valid_target;
  std::string output;  // --output: the run directory
  std::string resume;  // --resume: a run's last.h5
  std::string spm;     // --spm: a SentencePiece .model; empty: train one on the training text

  seq2seq::TransformerConfig model;           // vocab_size is the tokenizer's
  std::vector<std::string> model_keys_given;  // keys of to_config_map given as --model.KEY
  int vocab_size = 8000;                      // --vocab-size of the SentencePiece model trained
  std::string spm_type = "bpe";               // --spm-type: bpe | unigram

  int64_t max_tokens = 4096;     // --max-tokens per batch (padded source or target)
  float lr_factor = 1.f;         // --lr-factor: the schedule's factor
  float lr = 0.f;                // --lr: the peak rate instead (after warmup); 0: from the factor
  int64_t warmup_steps = 4000;   // --warmup-steps
  float label_smoothing = 0.1f;  // --label-smoothing
  float clip_grad = 0.f;         // --clip-grad: max global L2 norm; 0: off
  int epochs = 10;
  int64_t max_steps = 0;      // --max-steps in all (0: no limit)
  int64_t valid_freq = 1000;  // --valid-freq: steps between validations
  int beam_size = 1;          // --beam-size of the validation decode (1: greedy)
  float length_penalty = 0.6f;
  int64_t valid_batch_size = 64;   // sentences per validation search
  int early_stopping = 0;          // --early-stopping: validations without a better BLEU; 0: off
  float scheduled_sampling = 0.f;  // --scheduled-sampling: P(feed the model's own prediction)
  int keep_last = 0;               // --keep-last: step-N.h5 of the last K validations
  uint64_t seed = 42;
  int64_t log_interval = 50;  // steps between progress lines when not on a terminal
  // --profile: print where the training steps spend their time (ops::profile, exclusive time
  // per op and shape) at the end of the run, and every profile_every steps when that is > 0.
  bool profile = false;
  int64_t profile_every = 0;
  // Data parallelism (common/train/trainer.h): --accum-steps micro-batches per rank and step (the
  // global batch is the same, cut finer); --bucket-mb, the size of the gradient all-reduces.
  int accum_steps = 1;
  double bucket_mb = 25;
  int64_t checkpoint_every = 0;  // --checkpoint-every: last.h5 also after every N-th step
  // --precision of the matrix products in training and validation; bf16 keeps f32 master
  // weights, gradients and Adam moments, so checkpoints do not depend on it.
  ops::Precision precision = ops::Precision::f32;

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

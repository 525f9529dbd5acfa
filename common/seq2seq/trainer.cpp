// `vitk mt-train`: its options checked, and the run as a TranslationTask of the one training
// loop.
#include "common/seq2seq/trainer.h"

#include <cmath>

#include "common/error.h"
#include "common/progress.h"
#include "common/seq2seq/train_task.h"

namespace vitk::seq2seq {
namespace {

void need(bool ok, const std::string& option, const std::string& what, double got) {
  if (!ok) throw UsageError("--" + option + " must be " + what + ", got " + format_general(got, 6));
}

}  // namespace

TrainOptions::TrainOptions() {
  loop.epochs = 10;
  loop.valid_unit = train::Every::steps;
  loop.valid_every = 1000;
  loop.lr_option = "--lr-factor";
}

void TrainOptions::validate() const {
  if (train.empty()) throw UsageError("--train is required: the training pairs");
  if (valid.empty()) throw UsageError("--valid is required: the validation pairs");
  if (loop.output.empty()) throw UsageError("--output is required: the run directory");
  loop.validate();
  need(vocab_size >= 5, "vocab-size", "at least 5", vocab_size);
  if (spm_type != "bpe" && spm_type != "unigram")
    throw UsageError("--spm-type must be 'bpe' or 'unigram', got '" + spm_type + "'");
  need(max_tokens >= 1, "max-tokens", "at least 1", static_cast<double>(max_tokens));
  need(lr_factor > 0 && std::isfinite(lr_factor), "lr-factor", "positive", lr_factor);
  need(lr >= 0 && std::isfinite(lr), "lr", "positive (0: from --lr-factor)", lr);
  need(warmup_steps >= 1, "warmup-steps", "at least 1", static_cast<double>(warmup_steps));
  need(label_smoothing >= 0 && label_smoothing < 1, "label-smoothing", "in [0, 1)",
       label_smoothing);
  need(loop.valid_every >= 1, "valid-freq", "at least 1", static_cast<double>(loop.valid_every));
  need(beam_size >= 1, "beam-size", "at least 1", beam_size);
  need(length_penalty >= 0 && std::isfinite(length_penalty), "length-penalty", ">= 0",
       length_penalty);
  need(valid_batch_size >= 1, "valid-batch-size", "at least 1",
       static_cast<double>(valid_batch_size));
  need(scheduled_sampling >= 0 && scheduled_sampling <= 1, "scheduled-sampling",
       "a probability in [0, 1]", scheduled_sampling);
}

train::Result train(const TrainOptions& options, TranslationData& data, std::ostream& log, bool tty,
                    const std::atomic<int>* stop) {
  options.validate();
  TranslationTask task(options, data);
  return train::Trainer(task, options.loop, log, tty, stop).run();
}

}  // namespace vitk::seq2seq

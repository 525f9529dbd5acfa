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

void TrainOptions::validate() const {
  if (train.empty()) throw UsageError("--train is required: the training pairs");
  if (valid.empty()) throw UsageError("--valid is required: the validation pairs");
  if (output.empty()) throw UsageError("--output is required: the run directory");
  need(vocab_size >= 5, "vocab-size", "at least 5", vocab_size);
  if (spm_type != "bpe" && spm_type != "unigram")
    throw UsageError("--spm-type must be 'bpe' or 'unigram', got '" + spm_type + "'");
  need(max_tokens >= 1, "max-tokens", "at least 1", static_cast<double>(max_tokens));
  need(lr_factor > 0 && std::isfinite(lr_factor), "lr-factor", "positive", lr_factor);
  need(lr >= 0 && std::isfinite(lr), "lr", "positive (0: from --lr-factor)", lr);
  need(warmup_steps >= 1, "warmup-steps", "at least 1", static_cast<double>(warmup_steps));
  need(label_smoothing >= 0 && label_smoothing < 1, "label-smoothing", "in [0, 1)",
       label_smoothing);
  need(clip_grad >= 0 && std::isfinite(clip_grad), "clip-grad", ">= 0 (0: off)", clip_grad);
  need(epochs >= 1, "epochs", "at least 1", epochs);
  need(max_steps >= 0, "max-steps", ">= 0 (0: no limit)", static_cast<double>(max_steps));
  need(valid_freq >= 1, "valid-freq", "at least 1", static_cast<double>(valid_freq));
  need(beam_size >= 1, "beam-size", "at least 1", beam_size);
  need(length_penalty >= 0 && std::isfinite(length_penalty), "length-penalty", ">= 0",
       length_penalty);
  need(valid_batch_size >= 1, "valid-batch-size", "at least 1",
       static_cast<double>(valid_batch_size));
  need(early_stopping >= 0, "early-stopping", ">= 0 (0: off)", early_stopping);
  need(scheduled_sampling >= 0 && scheduled_sampling <= 1, "scheduled-sampling",
       "a probability in [0, 1]", scheduled_sampling);
  need(keep_last >= 0, "keep-last", ">= 0", keep_last);
  need(log_interval >= 1, "log-interval", "at least 1", static_cast<double>(log_interval));
  need(profile_every >= 0, "profile-every", ">= 0 (0: only at the end)",
       static_cast<double>(profile_every));
}

train::Result train(const TrainOptions& options, TranslationData& data, std::ostream& log, bool tty,
                    const std::atomic<int>* stop) {
  options.validate();
  train::Options loop = train::loop_options(options);
  loop.valid_unit = train::Every::steps;
  loop.valid_every = options.valid_freq;
  loop.early_stopping = options.early_stopping;
  loop.keep_last = options.keep_last;
  loop.lr_option = "--lr-factor";
  TranslationTask task(options, data);
  return train::Trainer(task, loop, log, tty, stop).run();
}

}  // namespace vitk::seq2seq

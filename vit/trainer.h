#pragma once
// Training and evaluation of a Vision Transformer, as timm's train.py does it: AdamW without
// weight decay on biases, norms, class token and positions; linear warmup then cosine decay per
// step; label smoothing or Mixup/CutMix soft targets; global-norm clipping; an optional EMA of the
// weights; validation every epoch; checkpoints that resume bit for bit, also from the middle of an
// epoch. tools/cmd_train.cpp only maps options onto TrainOptions and EvalOptions.
//
// Fine-tuning (`vitk finetune`, tools/cmd_finetune.cpp) is the same loop started from a
// checkpoint's weights (TrainOptions::finetune): positions resampled to a new input size, the head
// kept or replaced by a zero one, SGD or AdamW (vit/finetune.h has the recipes), optionally with
// layer-wise learning-rate decay. Its runs resume, average and checkpoint as training runs do.
//
// A run directory (--output) holds:
//   last.h5      everything a resume needs: weights, AdamW moments (and the EMA weights), step,
//                epoch, batch position, RNG state; rewritten (atomically) every epoch, when
//                stopped by --max-steps and when interrupted
//   best.h5      the weights with the best validation top-1 so far (the raw weights or their EMA,
//                whichever scored higher), without optimizer state: what `vitk eval` and
//                `vitk classify` take
//   ema.h5       the EMA weights at the end of the last epoch (--model-ema only)
//   metrics.csv  one row per epoch: epoch, step, lr, train_loss, train_acc, val_loss, val_top1,
//                val_top5, images_per_s, seconds (and ema_val_loss, ema_val_top1, ema_val_top5)
#include <array>
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "common/progress.h"
#include "common/tensor.h"
#include "datasets/augment.h"
#include "datasets/dataset.h"
#include "vit/vit.h"

namespace vitk::datasets {
class Loader;
}

namespace vitk::vit {

// Where a fine-tuning run starts (vitk finetune's options). The run's model is the checkpoint's,
// at image_height × image_width, with a new head when num_classes is set; model settings given in
// TrainOptions::model must agree with the checkpoint except those that do not touch the weights
// (dropout, attention_dropout, drop_path, patch_drop and the eval transform: resize, crop_fraction,
// interpolation), which the run takes.
struct FinetuneOptions {
  bool enabled = false;  // set by vitk finetune: `from` is required unless the run resumes
  std::string from;      // --from: any vitk checkpoint (a run's, or one written by vitk import)
  int64_t image_height = 0, image_width = 0;  // --image-size; 0: the checkpoint's
  std::optional<bool> align_corners;          // --align-corners; unset: the checkpoint's convention
  int64_t num_classes = 0;  // --num-classes: a new zero head (it must be the data's count); 0: keep
  std::string labels;       // --labels: a file of class names in the data's class order
};

// Named after timm's train.py arguments; validate() names the option at fault as "--name".
struct TrainOptions {
  std::string data;      // --data: training images (datasets::open_dataset, train split)
  std::string val_data;  // --val-data: empty means the validation split of --data
  std::string output;    // --output: the run directory; empty means runs/train-<date>-<time>
  std::string resume;    // --resume: a checkpoint written by a run (usually OUTPUT/last.h5)

  VitConfig model;  // num_classes 0 means: the number of classes in the data
  // The model settings given explicitly (keys of to_config_map): a resumed run keeps the
  // checkpoint's model and refuses a given setting that contradicts it.
  std::vector<std::string> model_keys_given;

  int epochs = 30;
  int64_t batch_size = 128;
  float lr = 5e-4f;           // peak learning rate, after warmup
  float min_lr = 1e-5f;       // at the end of the cosine
  float warmup_epochs = 5.f;  // linear warmup from 0, per step; fractions allowed
  float weight_decay =
      0.05f;                  // only on parameters with decay = true: decoupled (AdamW) or L2 (SGD)
  std::string opt = "adamw";  // --opt: adamw | sgd (momentum, PyTorch's rule)
  float momentum = 0.9f;      // --momentum (SGD)
  float layer_decay = 1.f;    // --layer-decay in (0, 1]; 1: off (vit/finetune.h)
  float clip_grad = 0.f;      // max global L2 norm of the gradients; 0: no clipping
  float smoothing = 0.1f;     // label smoothing (also folded into Mixup/CutMix targets)
  datasets::AugmentOptions augment;  // --scale --ratio --hflip --reprob --mixup --cutmix ...
  bool model_ema = false;
  double model_ema_decay = 0.9998;
  uint64_t seed = 42;
  int64_t max_steps = 0;      // stop after this many optimizer steps in all (0: no limit)
  int64_t log_interval = 50;  // steps between progress lines when not on a terminal
  // --val-interval: validate after every val_interval-th epoch and always after the run's last
  // one; 0: only after the last. best.h5 can only come from a validated epoch.
  int64_t val_interval = 1;
  int prefetch = 3;  // batches the loader prepares ahead
  // --profile: print where the training steps spend their time (ops::profile, exclusive time
  // per op and shape) at the end of the run, and every profile_every steps when that is > 0.
  bool profile = false;
  int64_t profile_every = 0;
  // --precision of the matrix products, in training and validation. bf16 keeps f32 master
  // weights, gradients and optimizer state: checkpoints do not depend on it.
  ops::Precision precision = ops::Precision::f32;

  FinetuneOptions finetune;

  void validate() const;  // vitk::UsageError "--lr must be ..., got ..."
};

enum class TrainEnd {
  finished,     // every epoch ran
  max_steps,    // --max-steps reached
  interrupted,  // *stop was set (SIGINT, SIGTERM): a checkpoint was saved
};

struct TrainResult {
  TrainEnd end = TrainEnd::finished;
  int64_t steps = 0;             // optimizer steps in all (with those before a resume)
  int64_t epochs_done = 0;       // complete epochs (with validation)
  double best_top1 = -1;         // best validation top-1 in percent (-1: no validation yet)
  std::string checkpoint;        // the last checkpoint written (last.h5)
  double images_per_second = 0;  // training throughput of this run, after its first steps
};

// Runs (or resumes) a training run and logs to `log`. Every option is checked and the data and
// the checkpoint to resume are opened before anything is written (vitk::UsageError for a bad
// option, vitk::Error for a bad path or file). `stop`, if given, is polled after every step and
// between validation batches: when it is non-zero the run finishes the current step, saves
// last.h5 and returns TrainEnd::interrupted. Progress goes to `log`, as a bar when `tty`.
TrainResult train(const TrainOptions& options, std::ostream& log, bool tty = false,
                  const std::atomic<int>* stop = nullptr);

// ---- Evaluation --------------------------------------------------------------------------------

// Predictions at two precisions on the same images (vitk eval --compare-precision).
struct PrecisionComparison {
  ops::Precision precision = ops::Precision::f32;  // the second one
  int64_t top1 = 0;                                // images right at the second precision
  int64_t agree = 0;         // images with the same arg-max at both precisions
  double max_abs_diff = 0;   // largest |logit difference| over all images and classes
  double mean_abs_diff = 0;  // mean |logit difference|
  double max_abs_logit = 0;  // largest |logit| at the first precision, for scale
};

struct EvalResult {
  int64_t classes = 0;
  int64_t count = 0;               // images
  double loss = 0;                 // mean cross-entropy (no smoothing)
  int64_t top1 = 0, top5 = 0;      // images whose label is the arg-max / among the 5 largest
  std::vector<int64_t> confusion;  // [classes × classes], row = true class, column = predicted
  bool complete = true;            // false when stopped early by `stop`
  std::optional<PrecisionComparison> comparison;  // with EvalSettings::compare

  double top1_percent() const { return count ? 100.0 * top1 / count : 0.0; }
  double top5_percent() const { return count ? 100.0 * top5 / count : 0.0; }
  int64_t at(int64_t truth, int64_t predicted) const {
    return confusion[static_cast<size_t>(truth * classes + predicted)];
  }
};

// How evaluate() runs the model.
struct EvalSettings {
  ops::Precision precision = ops::Precision::f32;
  bool packed_weights = false;  // nn::Context::packed_weights
  // Also run every batch at this precision and compare the predictions (EvalResult::comparison).
  std::optional<ops::Precision> compare;
};

// One pass of `loader` (an evaluation loader: training = false) through the model in inference
// mode. `arena` holds the activations; `progress` (may be null) is updated per batch; `stop`
// (may be null) ends the pass early (complete = false).
EvalResult evaluate(VisionTransformer& model, datasets::Loader& loader, Arena& arena,
                    Progress* progress = nullptr, const std::atomic<int>* stop = nullptr,
                    const EvalSettings& settings = {});

struct EvalOptions {
  std::string model;  // --model: a checkpoint
  std::string data;   // --data
  // --image-size: run the checkpoint at another size, its positions resampled (vit/checkpoint.h);
  // 0: its own. --align-corners: the resampling's convention (unset: the checkpoint's).
  int64_t image_height = 0, image_width = 0;
  std::optional<bool> align_corners;
  datasets::Split split = datasets::Split::val;
  int64_t batch_size = 128;
  int prefetch = 3;
  ops::Precision precision = ops::Precision::f32;   // --precision
  std::optional<ops::Precision> compare_precision;  // --compare-precision
};

// Loads the checkpoint, evaluates it on the data and prints the report to `out` (the data's
// classes must be the model's: vitk::Error otherwise).
EvalResult run_eval(const EvalOptions& options, std::ostream& out, bool tty = false);

// Top-1 and top-5 lines, per-class accuracy and the confusion matrix as aligned tables with the
// class names (the matrix only up to 40 classes).
std::string format_eval_report(const EvalResult& result,
                               const std::vector<std::string>& class_names);
// "bf16 against f32 on the same 10000 images: top-1 agreement ..." (result.comparison set).
std::string format_comparison(const EvalResult& result, ops::Precision first);

}  // namespace vitk::vit

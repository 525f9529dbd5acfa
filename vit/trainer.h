#pragma once
// Training and fine-tuning of a Vision Transformer, as timm's train.py does it: AdamW without
// weight decay on biases, norms, class token and positions; linear warmup then cosine decay per
// step; label smoothing or Mixup/CutMix soft targets; global-norm clipping; an optional EMA of the
// weights; validation every epoch. The model plugs into the one training loop as a
// vit::VitTask (vit/train_task.h); train::Trainer (common/train/trainer.h) runs it and says what a
// run directory holds. tools/cmd_train.cpp only maps options onto TrainOptions.
//
// Fine-tuning (`vitk finetune`, tools/cmd_finetune.cpp) is the same loop started from a
// checkpoint's weights (TrainOptions::finetune): positions resampled to a new input size, the head
// kept or replaced by a zero one, SGD or AdamW (vit/finetune.h has the recipes), optionally with
// layer-wise learning-rate decay.
#include <array>
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/train/trainer.h"
#include "datasets/augment.h"
#include "vit/resample.h"
#include "vit/vit.h"

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
  PosInterpolation pos_interpolation = PosInterpolation::bicubic;  // --pos-interpolation
  int64_t num_classes = 0;  // --num-classes: a new zero head (it must be the data's count); 0: keep
  std::string labels;       // --labels: a file of class names in the data's class order
};

// Named after timm's train.py arguments; validate() names the option at fault as "--name".
struct TrainOptions {
  TrainOptions();
  // The loop's options (common/train/trainer.h), named as timm's: --output (empty means
  // runs/train-<date>-<time>), --resume, --epochs (30), --steps (the run's length in optimizer
  // steps instead, vit_jax's total_steps: the warmup and cosine span them), --max-steps, --seed,
  // --clip-grad, --precision (bf16 keeps f32 master weights, gradients and optimizer state),
  // --model-ema (decay 0.9998), --log-interval, --val-interval (valid_every: validate after every
  // N-th epoch and after the last; 0: only after the last), --profile, --profile-every,
  // --accum-steps, --bucket-mb, --checkpoint-every.
  train::Options loop;
  std::string data;      // --data: training images (datasets::open_dataset, train split)
  std::string val_data;  // --val-data: empty means the validation split of --data

  VitConfig model;  // num_classes 0 means: the number of classes in the data
  // The model settings given explicitly (keys of to_config_map): a resumed run keeps the
  // checkpoint's model and refuses a given setting that contradicts it.
  std::vector<std::string> model_keys_given;

  int64_t batch_size = 128;
  float lr = 5e-4f;           // peak learning rate, after warmup
  float min_lr = 1e-5f;       // at the end of the cosine
  float warmup_epochs = 5.f;  // linear warmup from 0, per step; fractions allowed
  // With --steps and no --warmup-epochs: the recipe's warmup as a share of the steps (0: use
  // warmup_epochs).
  float warmup_share = 0.f;
  // --warmup-epochs was given on the command line (not by the recipe or a --config preset, which
  // a command-line --steps may shorten): with --steps it must end before the run does.
  bool warmup_epochs_given = false;
  float weight_decay =
      0.05f;                  // only on parameters with decay = true: decoupled (AdamW) or L2 (SGD)
  std::string opt = "adamw";  // --opt: adamw | sgd (momentum, PyTorch's rule)
  float momentum = 0.9f;      // --momentum (SGD)
  float layer_decay = 1.f;    // --layer-decay in (0, 1]; 1: off (vit/finetune.h)
  // --freeze-patch-embed: the run's first steps in which the patch embedding (patch_embed.*: the
  // conv stem and the projection) learns at rate 0 (its optimizer state still accumulates).
  int64_t freeze_patch_embed = 0;
  float smoothing = 0.1f;            // label smoothing (also folded into Mixup/CutMix targets)
  datasets::AugmentOptions augment;  // --scale --ratio --hflip --reprob --mixup --cutmix ...
  // The augmentation options given (command line or config file, by name: "scale", "no-aug"):
  // a fine-tuning or resumed run takes the others from its checkpoint's record (vit/finetune.h).
  std::set<std::string> augment_given;
  int prefetch = 3;  // batches the loader prepares ahead

  FinetuneOptions finetune;

  void validate() const;  // vitk::UsageError "--lr must be ..., got ..."
};

// Runs (or resumes) a training or fine-tuning run with the one training loop (train::Trainer:
// the run directory, resume, Ctrl-C, metrics.csv, best.h5) and logs to `log`. Every option is
// checked and the data and the checkpoint to resume are opened before anything is written
// (vitk::UsageError for a bad option, vitk::Error for a bad path or file). `stop`, if given, is
// polled after every step and between validation batches: when it is non-zero the run finishes
// the current step, saves last.h5 and returns train::End::interrupted.
train::Result train(const TrainOptions& options, std::ostream& log, bool tty = false,
                    const std::atomic<int>* stop = nullptr);

}  // namespace vitk::vit

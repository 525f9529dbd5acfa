// `vitk train` and `vitk finetune`: their options checked, and the run as a VitTask of the one
// training loop.
#include "vit/trainer.h"

#include <cmath>
#include <ctime>

#include "common/error.h"
#include "common/progress.h"
#include "vit/train_task.h"

namespace vitk::vit {
namespace {

constexpr int64_t kMaxSteps = 1'000'000'000;  // --steps: far beyond any run, and an int's epochs

void need(bool ok, const std::string& option, const std::string& what, double got) {
  if (!ok) throw UsageError("--" + option + " must be " + what + ", got " + format_general(got, 6));
}

std::string default_output(const char* kind) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "-%Y%m%d-%H%M%S", &tm);
  return std::string("runs/") + kind + buf;
}

}  // namespace

TrainOptions::TrainOptions() {
  loop.epochs = 30;
  loop.model_ema_decay = 0.9998;
  loop.valid_unit = train::Every::epochs;
  loop.lr_option = "--lr";
}

void TrainOptions::validate() const {
  if (finetune.enabled && finetune.from.empty() && loop.resume.empty())
    throw UsageError("--from is required: the checkpoint to fine-tune (or --resume a run)");
  if (data.empty()) throw UsageError("--data is required: the training images");
  loop.validate();
  const int64_t steps = loop.steps;
  need(batch_size >= 1, "batch-size", "at least 1", static_cast<double>(batch_size));
  need(lr > 0 && std::isfinite(lr), "lr", "positive", lr);
  need(min_lr >= 0 && min_lr <= lr, "min-lr", "in [0, --lr]", min_lr);
  need(steps <= kMaxSteps, "steps", "in [0, " + std::to_string(kMaxSteps) + "] (0: whole --epochs)",
       static_cast<double>(steps));
  if (steps > 0)
    need(warmup_epochs >= 0 && std::isfinite(warmup_epochs), "warmup-epochs", ">= 0",
         warmup_epochs);
  else
    need(warmup_epochs >= 0 && warmup_epochs < loop.epochs, "warmup-epochs", "in [0, --epochs)",
         warmup_epochs);
  need(weight_decay >= 0 && std::isfinite(weight_decay), "weight-decay", ">= 0", weight_decay);
  if (opt != "adamw" && opt != "sgd")
    throw UsageError("--opt must be 'adamw' or 'sgd', got '" + opt + "'");
  need(momentum >= 0 && momentum < 1, "momentum", "in [0, 1)", momentum);
  need(freeze_patch_embed >= 0, "freeze-patch-embed", ">= 0 (0: off)",
       static_cast<double>(freeze_patch_embed));
  need(layer_decay > 0 && layer_decay <= 1, "layer-decay", "in (0, 1] (1: off)", layer_decay);
  need(finetune.num_classes >= 0, "num-classes", "at least 1",
       static_cast<double>(finetune.num_classes));
  need(smoothing >= 0 && smoothing < 1, "smoothing", "in [0, 1)", smoothing);
  const auto& a = augment;
  if (!(a.scale[0] > 0 && a.scale[0] <= a.scale[1] && a.scale[1] <= 1))
    throw UsageError("--scale must be two numbers 0 < MIN <= MAX <= 1, got " +
                     format_general(a.scale[0]) + " " + format_general(a.scale[1]));
  if (!(a.ratio[0] > 0 && a.ratio[0] <= a.ratio[1] && std::isfinite(a.ratio[1])))
    throw UsageError("--ratio must be two numbers 0 < MIN <= MAX, got " +
                     format_general(a.ratio[0]) + " " + format_general(a.ratio[1]));
  need(a.hflip >= 0 && a.hflip <= 1, "hflip", "a probability in [0, 1]", a.hflip);
  need(a.reprob >= 0 && a.reprob <= 1, "reprob", "a probability in [0, 1]", a.reprob);
  if (a.crop_padding < 0)
    throw UsageError("--crop-padding must be >= 0 (0: off), got " + std::to_string(a.crop_padding));
  need(a.mixup >= 0 && std::isfinite(a.mixup), "mixup", ">= 0 (0: off)", a.mixup);
  need(a.cutmix >= 0 && std::isfinite(a.cutmix), "cutmix", ">= 0 (0: off)", a.cutmix);
  need(a.mixup_prob >= 0 && a.mixup_prob <= 1, "mixup-prob", "a probability in [0, 1]",
       a.mixup_prob);
  need(a.mixup_switch_prob >= 0 && a.mixup_switch_prob <= 1, "mixup-switch-prob",
       "a probability in [0, 1]", a.mixup_switch_prob);
  need(loop.valid_every >= 0, "val-interval", ">= 0 (0: only after the last epoch)",
       static_cast<double>(loop.valid_every));
  need(prefetch >= 1, "prefetch", "at least 1", prefetch);
}

train::Result train(const TrainOptions& options, std::ostream& log, bool tty,
                    const std::atomic<int>* stop) {
  options.validate();
  train::Options loop = options.loop;
  if (loop.output.empty())
    loop.output = default_output(options.finetune.enabled ? "finetune" : "train");
  VitTask task(options);
  return train::Trainer(task, loop, log, tty, stop).run();
}

}  // namespace vitk::vit

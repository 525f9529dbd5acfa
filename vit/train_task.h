#pragma once
// The Vision Transformer as a task of the one training loop (common/train/task.h): images and
// labels from a dataset through the threaded loader (augmentation, Mixup/CutMix), the ViT, cross-
// entropy with label smoothing or soft targets, validation by top-1/top-5 accuracy, AdamW or SGD
// with warmup and cosine decay. `vitk train` and `vitk finetune` run it (vit/trainer.h); `vitk
// bench vit-step` times its step on one batch held in memory.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/train/task.h"
#include "datasets/dataset.h"
#include "datasets/loader.h"
#include "vit/trainer.h"
#include "vit/vit.h"

namespace vitk::vit {

class VitTask : public train::Task {
 public:
  // A training or fine-tuning run on the data of `options`.
  explicit VitTask(const TrainOptions& options);
  // The step benchmark's task: `config` trained on `batch` again and again.
  VitTask(const VitConfig& config, const TrainOptions& options, datasets::Batch batch);
  ~VitTask() override;

  train::TaskInfo info() const override;
  void setup(const io::CheckpointMeta* resumed, uint64_t seed,
             const train::Partition& partition) override;
  ParamStore& params() override { return *params_; }
  std::unique_ptr<optim::Optimizer> make_optimizer() override;
  std::unique_ptr<optim::Schedule> make_schedule() override;
  int64_t batches_in_epoch(int64_t epoch) override;
  void start_epoch(int64_t epoch, int64_t first) override;
  bool next_batch() override;
  std::pair<std::string, int64_t> batching() const override;
  train::StepStats forward_loss(nn::Context& ctx, int64_t step, int micro) override;
  void backward(nn::Context& ctx) override;
  train::Metrics validate(const train::ValidateContext& v) override;
  std::string describe(const train::Metrics& m) const override;
  std::string describe_best(double value) const override;
  io::CheckpointMeta checkpoint_meta() const override;
  void log_setup(std::ostream& log) const override;

  const VitConfig& config() const { return cfg_; }

 private:
  void open_data();
  void build_model(const io::CheckpointMeta* resumed, uint64_t seed);
  void open_loaders(uint64_t seed);
  int64_t total_steps() const;   // of the schedule: --steps, or epochs × batches per epoch
  int64_t warmup_steps() const;  // --warmup-epochs (or the recipe's share of --steps) in steps
  // --freeze-patch-embed and a given --warmup-epochs within the run's steps (vitk::UsageError).
  void check_run_length() const;
  void hold_patch_embed(bool hold);  // --freeze-patch-embed: its lr scales 0, or as they were

  const TrainOptions& o_;
  std::unique_ptr<datasets::Dataset> train_set_, val_set_;
  std::vector<std::string> class_names_;
  VitConfig cfg_;
  std::optional<VitConfig> initial_;  // fine-tuning from a checkpoint: its model
  bool new_head_ = false, align_corners_ = false;
  // The augmentation the run uses: the options, with those not given taken from the checkpoint a
  // fine-tuning or resumed run starts from (augment_taken_ names them).
  datasets::AugmentOptions augment_;
  std::vector<std::string> augment_taken_;
  int64_t bpe_ = 0;  // batches per epoch
  // The patch embedding's parameters and their learning-rate scales (--freeze-patch-embed).
  std::vector<std::pair<Parameter*, float>> patch_embed_;
  bool patch_embed_held_ = false;
  train::Partition part_;

  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<VisionTransformer> model_;
  std::unique_ptr<datasets::Loader> train_loader_, val_loader_;
  int64_t val_batches_ = 0;               // of the whole validation set, over every rank
  std::optional<datasets::Batch> fixed_;  // the benchmark's batch
  datasets::Batch batch_;                 // the current one
  Tensor dlogits_;                        // d(loss)/d(logits) of the current batch
};

}  // namespace vitk::vit

#pragma once
// Training a captioning model (`vitk caption-train`) as a task of the one training loop
// (common/train/task.h): the images of a caption set through the threaded loader (the eval
// transform: flips and crops would change what a caption says), one of each image's captions per
// step (drawn from (seed, epoch, image), or the one the model finds likeliest: --references),
// teacher forcing with label-smoothed cross-entropy plus the doubly stochastic attention penalty,
// AdamW with warmup and a cosine per step, the encoder new, or initialised from a ViT checkpoint
// (--encoder-from) and then frozen or trained at its own learning rate. Validation: the loss of
// each image's first caption, and greedy captions scored by corpus BLEU-4 against every reference
// (and exact scene match on generated scenes), each rank decoding its share of the images and the
// captions put together before scoring; best.h5 is the best BLEU. The checkpoint holds the
// SentencePiece model trained on the training captions (with --phrases as single pieces).
// Extensions (vit/caption/extension.h) add what a recipe needs beyond that: the generated scenes'
// guided attention, article loss, teacher and article augmentation (vit/caption/scenes/).
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "common/train/task.h"
#include "common/train/trainer.h"
#include "datasets/captions.h"
#include "datasets/loader.h"
#include "datasets/tokenizer.h"
#include "vit/caption/extension.h"
#include "vit/caption/model.h"

namespace vitk::caption {

// The caption files and image folders a run reads: --data DIR finds them in vitk's scene layout
// (DIR/captions_{train,val}.json, DIR/images/{train,val}) or COCO 2017's
// (DIR/annotations/captions_{train,val}2017.json, DIR/{train,val}2017); the explicit options
// override either.
struct CaptionDataPaths {
  std::string train_captions, train_images, val_captions, val_images;
};
CaptionDataPaths caption_data_paths(const std::string& data, const CaptionDataPaths& given);

// --hflip-swap's pairs of words, and their text as the option spells it: "left:right,up:down".
using WordSwaps = std::vector<std::pair<std::string, std::string>>;
std::string word_swaps_text(const WordSwaps& swaps);

// Named after the options; validate() names the option at fault as "--name".
struct CaptionTrainOptions {
  CaptionTrainOptions();
  // The loop's options (common/train/trainer.h): --output, --resume, --epochs (10), --steps (the
  // run's length in optimizer steps instead), --max-steps, --seed, --clip-grad (1), --precision,
  // --model-ema (decay 0.999), --val-interval (valid_every: epochs between validations; 0: only
  // the last), --log-interval, --profile, --profile-every, --accum-steps, --bucket-mb,
  // --checkpoint-every.
  train::Options loop;
  std::string data;        // --data DIR (above)
  CaptionDataPaths paths;  // --train-captions, --train-images, --val-captions, --val-images
  std::string spm;         // --spm: a SentencePiece .model; empty: train one on the captions
  int vocab_size = 1000;   // --vocab-size of the SentencePiece model trained
  // --phrases: phrases the trained SentencePiece model keeps as one piece each
  // (datasets::TokenizerOptions::phrases), normalised as the captions are.
  std::vector<std::string> phrases;
  CaptionConfig model;  // vocab_size is the tokenizer's
  std::vector<std::string> model_keys_given;
  std::string encoder_from;  // --encoder-from: a ViT checkpoint whose encoder weights start the run
  // --encoder-lr-scale: the encoder's learning rate as a share of --lr; 0 freezes it (no backward
  // through it at all).
  float encoder_lr_scale = 1.f;
  float attention_penalty = 0.f;  // --attention-penalty: λ of the doubly stochastic penalty
  // --references: which of an image's reference captions a step trains on. "random": one drawn
  // per image and epoch. "likeliest": the one the model gives the highest mean token
  // log-probability before the step (teacher-forced, as at inference), a hard-EM choice that
  // lets the model settle on one way to say an image instead of spreading its probability over
  // all of them (multiple-choice learning).
  std::string references = "random";
  // --hflip: the probability of mirroring a training image left-right; its captions are then read
  // with the words of each hflip_swap pair exchanged (--hflip-swap, "left:right" by default), so
  // that "a bag to the left of a coat" becomes "a bag to the right of a coat".
  float hflip = 0.f;
  WordSwaps hflip_swap{{"left", "right"}};

  int64_t batch_size = 64;
  float lr = 5e-4f, min_lr = 1e-5f;
  float warmup_epochs = 1.f;
  // Given on the command line (not a preset's, which a --steps may shorten): it must end before
  // the run does.
  bool warmup_epochs_given = false;
  float weight_decay = 0.05f;
  float smoothing = 0.1f;  // --label-smoothing
  int64_t val_images = 0;  // --val-images-max: validate on the first N images only (0: all)
  int prefetch = 3;

  void validate() const;
};

class CaptionTask : public train::Task {
 public:
  // The extensions' hooks are called in their order; they must outlive the task.
  explicit CaptionTask(const CaptionTrainOptions& options,
                       std::vector<TaskExtension*> extensions = {});
  ~CaptionTask() override;

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

  CaptionModel& model() { return *model_; }
  const datasets::Tokenizer& tokenizer() const { return tokenizer_; }

  // What an extension reads of the run (after setup() has read it).
  const CaptionTrainOptions& options() const { return o_; }
  const CaptionDataPaths& paths() const { return paths_; }
  const datasets::CaptionSet& train_set() const { return train_set_; }
  const datasets::Dataset& train_images() const { return *train_images_; }
  const CaptionConfig& config() const { return cfg_; }  // the model's
  // The token ids of every caption of training image `image` (BOS/EOS not included), cut to the
  // model's positions; `mirrored`: with the words of --hflip-swap exchanged (--hflip only).
  const std::vector<std::vector<int32_t>>& caption_ids(size_t image, bool mirrored) const;
  uint64_t seed() const { return seed_; }
  int64_t epoch() const { return epoch_; }
  const train::Partition& partition() const { return part_; }
  // The current training batch; whether the loader mirrored its row `row`; the caption that row
  // trains on, and its index among caption_ids(image, mirrored_row(row)).
  const datasets::Batch& batch() const { return batch_; }
  bool mirrored_row(int64_t row) const;
  const std::vector<int32_t>& target_of(int64_t row) const;
  size_t target_index(int64_t row) const;

 private:
  void open_data();
  void check_warmup() const;  // a given --warmup-epochs shorter than the run (vitk::UsageError)
  void build_model(const io::CheckpointMeta* resumed, uint64_t seed);
  int64_t total_steps() const;
  // The token ids of every caption of the training images (BOS/EOS not included), cut to the
  // model's positions.
  void encode_captions();
  // target_in/target_out/lengths for rows [begin, end) of the current batch.
  // The reference captions of the current batch's row `row` as token ids: its image's, or their
  // mirror images' when the loader mirrored it.
  const std::vector<std::vector<int32_t>>& references_of(int64_t row) const;
  // The caption row `row` is trained on this epoch under --references random.
  const std::vector<int32_t>& caption_of(int64_t row) const;
  // --references likeliest: chosen_[row] for each row of the current batch.
  void choose_likeliest();
  void make_targets(int64_t begin, int64_t end, Tensor& in, Tensor& out, Tensor& lengths) const;

  const CaptionTrainOptions& o_;
  std::vector<TaskExtension*> extensions_;
  CaptionDataPaths paths_;
  datasets::CaptionSet train_set_, val_set_;
  std::unique_ptr<datasets::Dataset> train_images_;
  datasets::Tokenizer tokenizer_;
  std::vector<std::vector<std::vector<int32_t>>> train_ids_;  // [image][caption] -> ids
  std::vector<std::vector<std::vector<int32_t>>>
      mirrored_ids_;          // the same, words swapped (--hflip)
  int64_t cut_captions_ = 0;  // longer than the model's positions
  CaptionConfig cfg_;
  uint64_t seed_ = 0;
  int64_t bpe_ = 0, epoch_ = 0;
  int64_t global_tokens_ = 0;  // target tokens of the current global batch, every rank's
  std::vector<const std::vector<int32_t>*> chosen_;  // --references likeliest: each row's caption
  Arena choice_arena_;
  int64_t encoder_tensors_ = 0;
  train::Partition part_;

  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<CaptionModel> model_;
  std::unique_ptr<datasets::Loader> loader_;
  datasets::Batch batch_;
  Tensor target_in_, target_out_, lengths_, dlogits_;  // the current micro-batch's
};

// Runs (or resumes) a captioning run (train::Trainer) with the given extensions (in their order)
// and logs to `log`; everything is checked before anything is written. `stop` as
// train::Trainer's.
train::Result train_captions(const CaptionTrainOptions& options,
                             const std::vector<TaskExtension*>& extensions, std::ostream& log,
                             bool tty = false, const std::atomic<int>* stop = nullptr);
// ... without extensions.
train::Result train_captions(const CaptionTrainOptions& options, std::ostream& log,
                             bool tty = false, const std::atomic<int>* stop = nullptr);

}  // namespace vitk::caption

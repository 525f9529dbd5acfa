#pragma once
// The caption-train options that only make sense on vitk's generated Fashion-MNIST scenes
// (datasets/scenes.h, `vitk make-scenes`: captions with each article's box and grid cell), as an
// extension of the general captioning task (vit/caption/extension.h): guided attention, the article
// loss and its teacher (vit/caption/scenes/losses.h, teacher.h), and the articles' flips and
// erasing (datasets::flip_articles, erase_articles).
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "common/train/trainer.h"
#include "vit/caption/extension.h"
#include "vit/caption/scenes/guides.h"
#include "vit/caption/scenes/losses.h"
#include "vit/caption/scenes/teacher.h"
#include "vit/caption/task.h"

namespace vitk::caption::scenes {

// Named after the options; validate() names the option at fault as "--name".
struct SceneTrainOptions {
  // --article-flip: the probability of mirroring each article inside its box
  // (datasets::flip_articles): every caption stays true.
  float article_flip = 0.f;
  // --article-erase: the probability of random erasing inside each article's box
  // (datasets::erase_articles): the classifier's random erasing, one article at a time, so that no
  // article vanishes from its captions.
  float article_erase = 0.f;
  // --guided-attention: λ of guided attention (supervised attention, as Marian's guided
  // alignment): the position that writes an article's noun in the training caption is trained to
  // put the last decoder layer's cross-attention (the mean of its heads) inside that article's
  // grid cell, loss −λ · log(its attention mass there), the mean over the global batch's nouns.
  float guided_attention = 0.f;
  // --article-loss: λ of an auxiliary classification of the articles: the output layer, reading
  // the mean of the memory tokens in the cell of each article the training caption names, should
  // write its noun (article_loss), loss −λ · log p(noun), the mean over the global batch's nouns.
  // It teaches the encoder the articles directly.
  float article_loss = 0.f;
  // --teacher: a classifier distilled onto the article loss (vit/caption/scenes/teacher.h), its
  // logits taking a share --distillation-alpha of each noun's article loss (ArticleTeacher), soft
  // at temperature --distillation-tau or hard (its top class), as DeiT's options.
  std::string teacher;
  std::string distillation_type = "soft";
  float distillation_alpha = 0.5f;
  float distillation_tau = 1.f;

  void validate() const;
};

// The scenes' options as an extension of the captioning task. With every option off it adds
// nothing to a run but "guided attention off, article loss off" to the run header's loss line.
class SceneExtras : public TaskExtension {
 public:
  explicit SceneExtras(const SceneTrainOptions& options);  // options.validate() first

  void check_data(const CaptionTask& task) override;
  void setup(const CaptionTask& task) override;
  bool keeps_attention() const override { return o_.guided_attention > 0.f; }
  void augment(const CaptionTask& task, datasets::Batch& batch) override;
  void start_batch(const CaptionTask& task) override;
  double add_loss(const CaptionTask& task, const CaptionModel::LossHooks& model, int64_t begin,
                  int64_t end) override;
  std::vector<std::string> loss_terms() const override;
  void log_setup(std::ostream& log) const override;
  void recipe(std::map<std::string, std::string>& recipe) const override;

 private:
  // Every training box inside the model's image (else a UsageError naming `option`).
  void check_article_boxes(const CaptionTask& task, const std::string& option) const;
  // The nouns of the training caption of the current batch's row `row`.
  const std::vector<GuidePoint>& guide_points_of(const CaptionTask& task, int64_t row) const;
  // For rows [begin, end) of the current batch, each noun of its target caption with the patches
  // of the article's cell (mirrored with the image).
  std::vector<AttentionGuide> guides(const CaptionTask& task, int64_t begin, int64_t end) const;

  SceneTrainOptions o_;
  // --guided-attention and --article-loss: the nouns of each training caption (and of its
  // words-swapped mirror), [image][caption] as the ids are.
  GuidePoints points_, mirrored_points_;
  TeacherLabels teacher_;      // --teacher (its logits empty without)
  int64_t global_guides_ = 0;  // the nouns in the current global batch, every rank's
};

// caption::train_captions with the scenes' options.
train::Result train_captions(const CaptionTrainOptions& options, const SceneTrainOptions& scenes,
                             std::ostream& log, bool tty = false,
                             const std::atomic<int>* stop = nullptr);

}  // namespace vitk::caption::scenes

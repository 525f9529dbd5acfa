#pragma once
// The extension interface of the captioning task (vit/caption/task.h): what a training recipe adds
// to the general captioner, plugged in through hooks that the task calls at fixed points of a run,
// without the task knowing of it. vitk's generated scenes (vit/caption/scenes/extras.h) add guided
// attention, the article loss with its teacher and the articles' augmentation this way. An
// extension reads the run through the task's accessors (CaptionTask::train_set(), batch(), ...)
// and adds loss terms through the model's hooks (CaptionModel::LossHooks).
//
// A resumed run calls the same hooks as a new one: an extension keys whatever it draws by
// (CaptionTask::seed(), epoch(), image), as the task does, and keeps no state of its own in the
// checkpoint beyond its recipe attributes.
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "datasets/loader.h"
#include "vit/caption/model.h"

namespace vitk::caption {

class CaptionTask;

class TaskExtension {
 public:
  virtual ~TaskExtension() = default;

  // After the caption sets are read, before the task checks them: may refuse data it cannot use
  // (vitk::UsageError).
  virtual void check_data(const CaptionTask& /*task*/) {}
  // After the tokenizer, the model and the training captions' token ids are ready: its checks
  // against them, and its set-up (which may be heavy: a teacher reading the training set).
  virtual void setup(const CaptionTask& /*task*/) {}
  // Whether the training forward must keep the last decoder layer's cross-attention weights for
  // add_loss (CaptionModel::LossHooks::attention).
  virtual bool keeps_attention() const { return false; }
  // Each training batch as the loader made it, before the task chooses its references: may change
  // its images (batch.mirrored: the rows the loader mirrored, whose captions have their words
  // swapped).
  virtual void augment(const CaptionTask& /*task*/, datasets::Batch& /*batch*/) {}
  // Once the batch's training captions are chosen (CaptionTask::target_index): what add_loss needs
  // of the whole batch, summed over the ranks here (CaptionTask::partition()).
  virtual void start_batch(const CaptionTask& /*task*/) {}
  // After the training forward of the batch's rows [begin, end) (rows 0.. of the model's
  // forward): adds loss terms through `model`, whose gradients the next backward() takes, and
  // returns their value for the loss the step reports.
  virtual double add_loss(const CaptionTask& /*task*/, const CaptionModel::LossHooks& /*model*/,
                          int64_t /*begin*/, int64_t /*end*/) {
    return 0;
  }
  // The run's header (CaptionTask::log_setup): terms of its "loss:" line, after the attention
  // penalty's ("guided attention off"), and whole lines after that line.
  virtual std::vector<std::string> loss_terms() const { return {}; }
  virtual void log_setup(std::ostream& /*log*/) const {}
  // The checkpoints' recipe attributes (io::CheckpointMeta::recipe) of its options.
  virtual void recipe(std::map<std::string, std::string>& /*recipe*/) const {}
};

}  // namespace vitk::caption

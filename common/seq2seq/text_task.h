#pragma once
// Training the text classifier (`vitk text-train`) as a task of the one training loop
// (common/train/task.h): labelled sentences (the labels in order of first appearance in the
// training file), a SentencePiece vocabulary (trained on the training text, --spm, or the one of
// the translation model whose encoder starts the run, --encoder-from), batches of --batch-size
// sentences of similar length, label-smoothed cross-entropy, AdamW with linear warmup and a
// cosine per step, the encoder new or the translation model's, then frozen or trained at its own
// rate. Validation: loss, top-1 and macro-F1; best.h5 is the best top-1. The task reads no files
// itself: the sentences and the tokenizer come through TextData, which `vitk text-train`
// implements with datasets/.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/text_checkpoint.h"
#include "common/seq2seq/text_model.h"
#include "common/train/task.h"
#include "common/train/trainer.h"
#include "common/vocabulary.h"

namespace vitk::seq2seq {

// Sentences with a label each, as read.
struct LabelledText {
  std::string name;                 // the file, for messages
  std::vector<std::string> text;    // one sentence per item
  std::vector<std::string> labels;  // its label
  std::vector<int64_t> lines;       // its line in the file (1-based)
};

// What the task needs from the data layer.
class TextData {
 public:
  virtual ~TextData() = default;
  // `text<TAB>label` lines or fastText's `__label__LABEL text`; vitk::Error naming the file and
  // line of what is wrong (an empty line, a tab with no text before it, no label).
  virtual LabelledText read(const std::string& path) = 0;
  // A new vocabulary of `vocab_size` pieces (`type` bpe or unigram) trained on `text`.
  virtual std::unique_ptr<Vocabulary> train_vocabulary(const std::vector<std::string>& text,
                                                       int vocab_size, const std::string& type) = 0;
  virtual std::unique_ptr<Vocabulary> load_vocabulary(const std::string& path) = 0;  // --spm
  virtual std::unique_ptr<Vocabulary> vocabulary_from_bytes(const std::string& bytes) = 0;
};

// Named after the options; validate() names the option at fault as "--name".
struct TextTrainOptions {
  TextTrainOptions();
  // The loop's options (common/train/trainer.h): --output, --resume, --epochs (10), --steps,
  // --max-steps, --seed, --clip-grad (1), --precision, --model-ema, --val-interval (epochs
  // between validations), --log-interval, --profile, --accum-steps, --bucket-mb,
  // --checkpoint-every.
  train::Options loop;
  std::string train, valid;  // --train, --valid: labelled sentences
  std::string spm;           // --spm: a SentencePiece .model; empty: train one on the training text
  int vocab_size = 8000;     // --vocab-size of the SentencePiece model trained
  std::string spm_type = "bpe";
  TextClassifierConfig model;  // vocab_size and num_classes are the tokenizer's and the data's
  std::vector<std::string> model_keys_given;
  std::string encoder_from;      // --encoder-from: a translation checkpoint (mt-train)
  float encoder_lr_scale = 1.f;  // --encoder-lr-scale: the encoder's share of --lr; 0 freezes it
  int64_t batch_size = 64;       // sentences per global batch
  float lr = 5e-4f, min_lr = 1e-6f;
  float warmup_epochs = 1.f;
  float weight_decay = 0.01f;
  float smoothing = 0.1f;  // --label-smoothing

  void validate() const;
};

// The classification figures of predicted against true labels over `classes` classes.
struct ClassScores {
  int64_t count = 0, correct = 0;
  std::vector<int64_t> confusion;  // [classes × classes], row = true class, column = predicted
  double top1_percent() const { return count ? 100.0 * correct / count : 0.0; }
  // The mean F1 (percent) over the classes that occur in the truth or the predictions.
  double macro_f1_percent() const;
  int64_t classes() const;
};
ClassScores score_classes(const std::vector<int32_t>& truth, const std::vector<int32_t>& predicted,
                          int64_t classes);

class TextTask : public train::Task {
 public:
  TextTask(const TextTrainOptions& options, TextData& data);  // `data` outlives the task
  ~TextTask() override;

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

  TextClassifier& model() { return *model_; }
  const std::vector<std::string>& labels() const { return labels_; }

 private:
  // Sentences as ids (pieces + EOS, cut to the model's length) and label indices.
  struct Encoded {
    std::vector<std::vector<int>> ids;
    std::vector<int32_t> labels;
    int64_t cut = 0;  // sentences longer than the model takes, cut
  };
  struct Batch {
    std::vector<int64_t> rows;  // indices into the encoded set
  };
  void make_vocabulary(const TextMeta* resumed, const EncoderStart* start);
  void make_labels(const io::CheckpointMeta* resumed);
  Encoded encode(const LabelledText& t) const;
  void build_model(const TextMeta* resumed, const EncoderStart* start, uint64_t seed);
  std::vector<Batch> epoch_batches(int64_t epoch) const;
  void tensors(const Encoded& e, const std::vector<int64_t>& rows, Tensor& ids, Tensor& lengths,
               Tensor& labels) const;
  int64_t batches_per_epoch() const;  // every epoch has ceil(sentences / batch) batches
  int64_t total_steps() const;

  const TextTrainOptions& o_;
  TextData* data_;
  LabelledText train_text_, valid_text_;
  Encoded train_, valid_;
  std::unique_ptr<Vocabulary> vocabulary_;
  std::string vocabulary_note_, encoder_note_;
  std::vector<std::string> labels_;
  std::map<std::string, int32_t> label_index_;  // label -> its index in labels_
  TextClassifierConfig cfg_;
  uint64_t seed_ = 0;
  train::Partition part_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<TextClassifier> model_;
  int64_t listed_epoch_ = -1;
  std::vector<Batch> batches_;
  size_t next_ = 0;
  const Batch* batch_ = nullptr;
  Tensor ids_, lengths_, targets_;  // the current part's
  Tensor dlogits_;
  bool empty_part_ = false;
};

// Runs (or resumes) a run with the one training loop and logs to `log`; everything a user can get
// wrong is checked before anything is written. `stop` as train::Trainer's.
train::Result train_text(const TextTrainOptions& options, TextData& data, std::ostream& log,
                         bool tty = false, const std::atomic<int>* stop = nullptr);

}  // namespace vitk::seq2seq

#pragma once
// The translation Transformer as a task of the one training loop (common/train/task.h), as in
// "Attention Is All You Need": Adam (β 0.9, 0.98, ε 1e-9) with the inverse-square-root schedule,
// label smoothing, dropout, batches by number of tokens; teacher forcing, optionally with scheduled
// sampling; validation by loss and BLEU of greedy or beam translations. `vitk mt-train` runs it
// (common/seq2seq/trainer.h); `vitk bench mt-step` times its step on one batch held in memory.
//
// The task reads no files itself: the corpora and the tokenizer come through TranslationData,
// which `vitk mt-train` implements with datasets/ (parallel.h, tokenizer.h).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/seq2seq/batches.h"
#include "common/seq2seq/model.h"
#include "common/seq2seq/trainer.h"
#include "common/train/task.h"
#include "common/vocabulary.h"

namespace vitk::seq2seq {

// Sentence pairs as read.
struct ParallelText {
  std::string name;  // "data.tsv" or "src + tgt", for messages
  std::vector<std::string> source, target;
  int64_t read = 0, empty = 0;  // lines read; pairs skipped for an empty side
};

// What the task needs from the data layer.
class TranslationData {
 public:
  virtual ~TranslationData() = default;
  // A TSV of source<TAB>target (target_path empty), or the two sides line by line. vitk::Error
  // naming the file and line of what is wrong.
  virtual ParallelText read(const std::string& path, const std::string& target_path) = 0;
  // A new vocabulary trained on `text` (TrainOptions::vocab_size, spm_type); vitk::Error saying
  // why it cannot be.
  virtual std::unique_ptr<Vocabulary> train_vocabulary(const std::vector<std::string>& text,
                                                       const TrainOptions& options) = 0;
  virtual std::unique_ptr<Vocabulary> load_vocabulary(const std::string& path) = 0;  // --spm
  // The vocabulary a checkpoint stores (Vocabulary::bytes()).
  virtual std::unique_ptr<Vocabulary> vocabulary_from_bytes(const std::string& bytes) = 0;
};

class TranslationTask : public train::Task {
 public:
  // A run of `vitk mt-train`; `data` must outlive the task.
  TranslationTask(const TrainOptions& options, TranslationData& data);
  // The step benchmark's task: `config` trained on `batch` again and again.
  TranslationTask(const TransformerConfig& config, const TrainOptions& options, TokenBatch batch);
  ~TranslationTask() override;

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

 private:
  // A corpus as text (for BLEU) and as ids (for the loss): the pairs that fit the model.
  struct Corpus {
    ParallelText text;
    std::vector<std::vector<int>> src, tgt;
    int64_t too_long = 0;
  };
  void make_vocabulary(const io::CheckpointMeta* resumed);
  void encode(Corpus& c) const;
  optim::InverseSqrt schedule() const;
  void list_epoch(int64_t epoch);  // epoch_batches_ of `epoch`
  Tensor sampled_inputs(nn::Context& ctx, int64_t step, const TokenBatch& part);

  const TrainOptions& o_;
  TranslationData* data_ = nullptr;
  Corpus train_, valid_;
  std::unique_ptr<Vocabulary> vocabulary_;
  std::string vocabulary_note_;
  TransformerConfig cfg_;
  uint64_t seed_ = 0;

  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<TokenBatcher> batcher_;
  std::vector<TokenBatch> valid_batches_;
  // The epoch whose batches are listed, and the next one to take.
  int64_t listed_epoch_ = -1;
  std::vector<TokenBatch> epoch_batches_;
  size_t next_ = 0;
  std::optional<TokenBatch> fixed_;    // the benchmark's batch
  const TokenBatch* batch_ = nullptr;  // the global batch
  train::Partition part_;
  std::vector<TokenBatch> parts_;  // its parts (split_batch), with more than one
  bool empty_part_ = false;        // the last forward_loss had no sentences
  Tensor dlogits_;
};

}  // namespace vitk::seq2seq

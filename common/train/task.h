#pragma once
// What a model gives the one training loop (train::Trainer): its parameters, its batches, the
// loss and backward of a batch, a validation that returns named figures, and what to store in a
// checkpoint beside the weights. The loop owns everything else a run does, whatever the model
// (common/train/trainer.h). vitk's tasks: vit::VitTask (`vitk train`, `vitk finetune`) and
// seq2seq::TranslationTask (`vitk mt-train`).
//
// A step, as the loop runs it (train::Step):
//   zero grads -> for each micro-batch: arena reset, forward_loss(ctx), backward(ctx)
//   -> sum the gradients and the figures over the ranks -> loss finite? -> clip -> lr(step)
//   -> optimizer step
//
// Data parallelism (common/dist/): every rank holds the whole model and takes its share of every
// global batch (Partition); the batch options (--batch-size, --max-tokens) mean the global batch,
// so a run trains the same model on any number of ranks.
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/dist/world.h"
#include "common/io/checkpoint.h"
#include "common/nn/nn.h"
#include "common/optim/optim.h"
#include "common/params.h"
#include "common/progress.h"

namespace vitk::train {

// How a global batch is shared out: this rank's share of every global batch is cut into `accum`
// micro-batches, so the global batch is cut into ranks × accum parts; part p = rank · accum +
// micro. The data that decides a part (order, augmentation) is keyed by (seed, epoch, sample),
// never by the rank, so that the parts together are the batch a single process would train on.
struct Partition {
  int rank = 0, ranks = 1;
  int accum = 1;  // --accum-steps
  // For what the ranks must agree on in setup (a vocabulary trained once, on rank 0); null: a
  // world of one.
  dist::World* world = nullptr;
  int parts() const { return ranks * accum; }
  int part(int micro) const { return rank * accum + micro; }
};

// What a step reports. Sums, not means, so that micro-batches and ranks add up.
struct StepStats {
  double loss = 0;      // the global batch's mean loss (the loop stops on a non-finite one)
  double loss_sum = 0;  // Σ loss over the batch's items
  int64_t items = 0;    // what the loss is averaged over: images, target tokens
  int64_t correct = 0;  // items predicted right (TaskInfo::train_accuracy)
  int64_t units = 0;    // what the throughput counts (TaskInfo::unit)
  StepStats& operator+=(const StepStats& o);
};

// A validation's figures by name, in the order of the metrics.csv columns ("loss", "top1", ...);
// `extra` ones are shown in the log only.
struct Metrics {
  std::vector<std::pair<std::string, double>> values;
  std::vector<std::pair<std::string, double>> extra;
  bool complete = true;  // false: stopped early by the stop flag (the loop validates again)
  double get(const std::string& name) const;  // vitk::Error when there is no such figure
};

// How the loop speaks of the task.
struct TaskInfo {
  std::string unit = "images";         // what StepStats::units counts: "<unit>_per_s" in the CSV
  std::string progress_unit = "step";  // the progress bar counts these per epoch
  std::string rate_unit = "img/s";     // the progress bar's rate
  bool train_accuracy = false;         // StepStats::correct is meaningful: a train_acc column
  // The validation figure that decides best.h5 and early stopping, and which way is better.
  std::string best_metric = "top1";
  bool higher_is_better = true;
  std::vector<std::string> metric_names;  // Metrics::values' names, for the CSV header
};

// What validate() is given.
struct ValidateContext {
  // Every rank validates its share (whole batches) and the figures are summed over the world, in
  // the order a single process adds them, so they equal a single process's exactly.
  dist::World* world = nullptr;  // required
  Arena* arena = nullptr;
  ops::Precision precision = ops::Precision::f32;
  std::ostream* log = nullptr;  // for a progress bar
  bool tty = false;
  // May be null; when set, stop early (complete = false). Null under data parallelism: the ranks
  // must all finish a validation (a stop request is taken at the next step).
  const std::atomic<int>* stop = nullptr;
  std::string label = "validate";  // the progress bar's label ("validate EMA")
};

class Task {
 public:
  virtual ~Task() = default;
  virtual TaskInfo info() const = 0;
  // Opens the data and builds the model: a new one, or the one `resumed` describes (its weights
  // and optimizer state are the loop's to load), refusing given settings that contradict it.
  // `seed` keys the data order and augmentation; `partition` says which parts of each global
  // batch this process trains on. Everything a user can get wrong is checked here, before the
  // loop writes anything.
  virtual void setup(const io::CheckpointMeta* resumed, uint64_t seed,
                     const Partition& partition) = 0;
  // The model's parameters (finalized, initialised or loaded) and the optimizer the task trains
  // them with, with its hyper-parameters (AdamW, SGD).
  virtual ParamStore& params() = 0;
  virtual std::unique_ptr<optim::Optimizer> make_optimizer() = 0;
  // The learning rate of each step.
  virtual std::unique_ptr<optim::Schedule> make_schedule() = 0;

  // ---- data
  virtual int64_t batches_in_epoch(int64_t epoch) = 0;
  // Begins `epoch` at batch `first` (a resumed run passes where it stopped).
  virtual void start_epoch(int64_t epoch, int64_t first) = 0;
  // Makes the epoch's next batch the current one; false at the end of the epoch.
  virtual bool next_batch() = 0;
  // A figure that decides how batches are cut ("--batch-size" 128, "--max-tokens" 4096): a run
  // resumed in the middle of an epoch must cut them the same way.
  virtual std::pair<std::string, int64_t> batching() const = 0;

  // ---- a step on the current batch. `step` counts the optimizer steps already taken.
  // Forward and loss of this rank's `micro`-th part of the current global batch (Partition),
  // keeping d(loss)/d(output) for backward, scaled so that the gradients summed over all parts
  // are those of the global batch's mean loss. ctx's arena was reset; a task may reset it again
  // before its real forward (a pass that picks the step's inputs). An empty part (fewer sentences
  // than parts) returns zero figures and keeps nothing.
  virtual StepStats forward_loss(nn::Context& ctx, int64_t step, int micro) = 0;
  // Backward from the kept d(output), adding into the parameter gradients (zeroed by the loop);
  // nothing for an empty part.
  virtual void backward(nn::Context& ctx) = 0;

  // ---- validation of the current weights
  virtual Metrics validate(const ValidateContext& v) = 0;
  // "loss 0.4123 top-1 88.38% top-5 99.50%": the figures for a log line.
  virtual std::string describe(const Metrics& m) const = 0;
  // "top-1 88.38%": the best figure for the run's last line.
  virtual std::string describe_best(double value) const = 0;

  // ---- checkpoints: the configuration, class names and files (a tokenizer) the task's model
  // needs to be rebuilt and run; the loop adds the step, the training state and the optimizer.
  virtual io::CheckpointMeta checkpoint_meta() const = 0;
  // Lines about the data, the model and the optimizer for the run's header.
  virtual void log_setup(std::ostream& log) const = 0;
};

}  // namespace vitk::train

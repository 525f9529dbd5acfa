#pragma once
// The one training loop, for every model (a train::Task): the run directory and its files,
// checkpoint cadence, resume, Ctrl-C and SIGTERM, non-finite losses, throughput, --profile,
// metrics.csv, progress, the EMA of the weights, the learning-rate schedule, clipping and the
// optimizer step (train::Step). `vitk train`, `vitk finetune` and `vitk mt-train` are tasks run by
// it.
//
// A run directory holds:
//   last.h5      everything a resume needs: weights, optimizer moments (and the EMA), the step and
//                the training state (common/train/state.h); rewritten atomically after every
//                metrics row, every --checkpoint-every steps, when --max-steps stops the run and
//                when it is interrupted
//   best.h5      the weights that scored best at validation so far (the raw weights or their EMA,
//                whichever scored better), without optimizer state
//   ema.h5       with --model-ema: the averaged weights at the last metrics row
//   step-N.h5    with --keep-last K: the weights at each of the last K validations
//   metrics.csv  one row per report (below): step, epoch (epochs done, a fraction within one),
//                lr, train_loss, [train_acc], val_<figure>..., [ema_val_<figure>...],
//                <unit>_per_s, seconds (since the previous row)
//
// Data parallelism: under mpirun every rank runs this loop on its share of each global batch
// (train::Partition); the gradients, the step's figures, stop requests and validation figures are
// summed over the ranks, so every rank takes the same decisions. Rank 0 alone prints and writes
// the run directory; every rank reads the checkpoint it resumes. A run resumes on any number of
// ranks.
//
// Reports: with validation counted in epochs (ViT), a row after every epoch, with the validation
// figures every `valid_every` epochs and after the last; counted in steps (translation), a row at
// every validation, every `valid_every` steps. Either way the run validates its final weights
// when it ends, unless --max-steps stops it in the middle of an epoch whose row is still to come.
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include "common/ops/ops.h"
#include "common/train/task.h"

namespace vitk::train {

enum class Every { epochs, steps };

// The loop's options. Every model's training options embed them (TrainOptions::loop), so that
// they are declared, checked and passed on once.
struct Options {
  std::string output;  // the run directory
  std::string resume;  // a run's last.h5; empty: a new run
  int epochs = 1;
  // The run's length in optimizer steps instead of `epochs` (0: off): the epochs these steps need,
  // the last cut short at step `steps` and ended as any last epoch is (validated, reported). The
  // task's schedule should span them (vit --steps).
  int64_t steps = 0;
  int64_t max_steps = 0;  // optimizer steps in all; 0: no limit
  uint64_t seed = 42;     // a new run's data order, augmentation and dropout
  float clip_grad = 0;    // max global L2 norm of the gradients; 0: off
  ops::Precision precision = ops::Precision::f32;
  Every valid_unit = Every::epochs;
  int64_t valid_every = 1;       // epochs or steps between validations; 0 (epochs): only the last
  int early_stopping = 0;        // validations without a better figure before stopping; 0: off
  int keep_last = 0;             // step-N.h5 of the last K validations; 0: none
  int64_t checkpoint_every = 0;  // also rewrite last.h5 after every N-th step; 0: only at reports
  bool model_ema = false;
  double model_ema_decay = 0.9998;
  int64_t log_interval = 50;       // steps between progress lines when not on a terminal
  bool profile = false;            // --profile: where the steps spend their time, at the end ...
  int64_t profile_every = 0;       // ... and every so many steps
  std::string lr_option = "--lr";  // the option a message about a diverging loss names
  // Data parallelism (common/dist/): this process's world (null: dist::world(), the one mpirun
  // made or a world of one), the micro-batches per rank and step, the all-reduce bucket size, the
  // seconds a rank waits in a collective before naming the rank it has not heard from and ending.
  dist::World* world = nullptr;
  int accum_steps = 1;
  size_t bucket_bytes = 25u << 20;
  double collective_timeout = 300;
  bool check_final_claims = false;  // tests: StepOptions::check_final_claims

  // vitk::UsageError naming the option at fault as its command line spells it ("--epochs must be
  // at least 1, got 0").
  void validate() const;
};

enum class End { finished, max_steps, early_stopped, interrupted };

struct Result {
  End end = End::finished;
  int64_t steps = 0;        // optimizer steps in all (with those before a resume)
  int64_t epochs_done = 0;  // complete epochs
  bool has_best = false;
  double best = 0;              // the best validation figure (TaskInfo::best_metric)
  Metrics last;                 // the last validation's figures (empty: none this run)
  std::string checkpoint;       // last.h5
  double units_per_second = 0;  // training throughput of this run, after its first steps
};

class Trainer {
 public:
  // `stop`, if given, is polled after every step and between validation batches: when non-zero
  // the run finishes the current step, saves last.h5 and ends as End::interrupted (with several
  // ranks: when it is set on any of them, all stop after the same step; a validation under way
  // finishes first). Progress goes to `log` (rank 0's), as a redrawn bar when `tty`.
  Trainer(Task& task, Options options, std::ostream& log, bool tty = false,
          const std::atomic<int>* stop = nullptr);
  ~Trainer();
  // Runs (or resumes) the run. Options, data and the checkpoint to resume are all checked (by
  // the task's setup) before anything is written: vitk::UsageError for a bad option, vitk::Error
  // for a bad file.
  Result run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vitk::train

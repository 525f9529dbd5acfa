#pragma once
// Where a training run stands, beyond its weights and optimizer moments: everything `--resume`
// needs to take the very step the run would have taken next. Stored in a run's last.h5 as named
// attributes of the group /train_state (and /train_state/rng/<name> for each random stream), so
// that h5py reads it: f["train_state"].attrs["epoch"],
// f["train_state/rng/dropout"].attrs["counter"]. Checkpoints written before this format kept the
// same facts as numbered words in a root attribute `rng_state`; they are still read.
#include <cstdint>
#include <map>
#include <string>

#include "common/io/checkpoint.h"

namespace vitk::train {

struct RngState {
  uint64_t seed = 0, counter = 0;  // ops::Rng's state
};

struct TrainState {
  int64_t step = 0;              // optimizer steps taken
  int64_t epoch = 0;             // the epoch in progress (0-based)
  int64_t batch = 0;             // batches of that epoch trained
  int64_t batches_in_epoch = 0;  // how many it has (checked when a run resumes in its middle)
  std::string batching;          // what cut the batches ("batch-size", "max-tokens") ...
  int64_t batch_size = 0;        // ... and its value
  uint64_t seed = 0;             // --seed: data order, augmentation
  std::map<std::string, RngState> rngs;  // random streams by name ("dropout")

  // Since the last metrics row (and the row's figures):
  double loss_sum = 0;  // Σ loss over the items trained
  int64_t loss_items = 0;
  int64_t correct = 0;
  double seconds = 0;        // wall time, across resumes
  int64_t last_report = -1;  // the step of the last metrics row (-1: none yet)

  // The best validation so far (best.h5) and early stopping.
  bool has_best = false;
  double best = 0;
  int64_t best_step = 0, best_epoch = 0;  // best_epoch: epochs done when it was measured
  int64_t bad_validations = 0;            // validations since the best
  bool has_ema = false;                   // the optimizer state holds an EMA of the weights

  // The named values for io::CheckpointMeta::train_state.
  std::map<std::string, io::StateValue> values() const;
};

// Whether the checkpoint holds a training state (either format).
bool has_train_state(const io::CheckpointMeta& meta);
// The training state of a checkpoint read with io::read_checkpoint_meta. vitk::Error naming
// `path` when it has none (best.h5, an averaged or imported checkpoint) or it is damaged.
TrainState read_train_state(const io::CheckpointMeta& meta, const std::string& path);

}  // namespace vitk::train

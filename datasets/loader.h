#pragma once
// Batches from a Dataset, assembled by a background thread so the model never waits: decode,
// augment (training) or the eval transform, normalise, stack; Mixup/CutMix on the whole batch.
//
// Shards (data-parallel training, `mpirun -np N`): each of N ranks runs its own Loader with
// shard {rank, N} and gets its share of every batch. A shard changes which rows a loader hands
// out, never what is in them: every random draw is keyed by (seed, epoch, sample) or (seed, epoch,
// batch), so the ranks' shards put side by side in rank order are bitwise the unsharded batch, and
// a config trains the same model on any N.
#include <cstdint>
#include <memory>
#include <string>

#include "common/tensor.h"
#include "datasets/augment.h"
#include "datasets/dataset.h"
#include "datasets/preprocess.h"

namespace vitk::datasets {

struct Batch {
  // B is the loader's rows: the batch size, or a training shard's B/N (see Shard); in evaluation,
  // less by the unreadable samples left out (see Loader::next).
  Tensor images;   // f32 [B, C, H, W], normalised
  Tensor labels;   // i32 [B]
  Tensor targets;  // f32 [B, classes] soft targets in every batch of a run with Mixup/CutMix
                   // on (λ = 1 batches too, as timm), else empty
  int64_t epoch = 0, index = 0;  // which (global) batch of which epoch this is
  // Training with hflip > 0: per row, 1 when the image was mirrored left-right (a captioner then
  // swaps "left" and "right" in its captions); else empty.
  std::vector<uint8_t> mirrored;
};

// Which share of the data this loader yields: shard `index` of `count` (a rank and the number of
// ranks; {0, 1} is everything).
// - Training: batch_size stays the GLOBAL batch B (it must be a multiple of count); global batch i
//   of the epoch is as without shards and this loader yields its rows [index·B/N, (index+1)·B/N)
//   for every i, so batches_per_epoch() is the global count. With Mixup/CutMix a row's mirror
//   (global row B−1−i) is usually another shard's: the loader decodes and augments that row too
//   (the same keyed draws) so that images and soft targets are still the unsharded batch's rows.
//   That costs decoding up to twice the shard's rows (all B rows on each of 2 ranks) on mixed
//   batches; batches left unmixed (λ = 1) decode only the shard's own rows.
// - Evaluation: whole batches, the ones whose global index % count == index, each as without
//   shards (Batch::index is the global index); batches_per_epoch() counts this shard's batches and
//   start_epoch's first_batch counts them too (a shard may have none when there are fewer batches
//   than ranks). Summing per-batch figures over the ranks gives the unsharded totals.
// skipped() and the warnings are per loader: a shard reports the unreadable samples it met,
// mirrors included, so one sample may be reported by several ranks.
struct Shard {
  int index = 0, count = 1;
};

struct LoaderOptions {
  int64_t batch_size = 128;
  int64_t height = 224, width = 224;  // model input
  int channels = 3;
  int64_t num_classes = 0;  // for soft targets
  bool training = false;    // shuffle, augment, mix, drop the last partial batch
  uint64_t seed = 0;        // order and augmentation
  AugmentOptions augment;   // training only
  datasets::Preprocess preprocess;
  int prefetch = 3;  // batches prepared ahead
  Shard shard;       // this loader's share (see Shard)
};

class Loader {
 public:
  Loader(const Dataset& data, LoaderOptions options);
  ~Loader();  // stops and joins the background thread
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t batches_per_epoch() const;  // this loader's: a training shard has them all
  // Begins `epoch` at batch `first_batch` (a resumed run passes where it stopped). Training order
  // is a permutation drawn from (seed, epoch); evaluation goes in order.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the epoch (blocks while it is being prepared); false at the epoch's end.
  // An unreadable sample is reported once on stderr ("warning: skipping PATH: reason"). Training
  // replaces it by another sample of the dataset (the other rows keep their order); evaluation
  // leaves it out, so its batch has fewer rows (none when no sample of it could be read). A data
  // error that is not per-sample is rethrown.
  bool next(Batch& batch);
  int64_t skipped() const;  // distinct unreadable samples met so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vitk::datasets

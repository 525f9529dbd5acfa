#pragma once
// Batches from a Dataset, assembled by a background thread so the model never waits: decode,
// augment (training) or the eval transform, normalise, stack; Mixup/CutMix on the whole batch.
#include <cstdint>
#include <memory>
#include <string>

#include "common/tensor.h"
#include "datasets/augment.h"
#include "datasets/dataset.h"
#include "datasets/preprocess.h"

namespace vitk::datasets {

struct Batch {
  Tensor images;   // f32 [B, C, H, W], normalised
  Tensor labels;   // i32 [B]
  Tensor targets;  // f32 [B, classes] soft targets in every batch of a run with Mixup/CutMix
                   // on (λ = 1 batches too, as timm), else empty
  int64_t epoch = 0, index = 0;  // which batch of which epoch this is
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
};

class Loader {
 public:
  Loader(const Dataset& data, LoaderOptions options);
  ~Loader();  // stops and joins the background thread
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t batches_per_epoch() const;
  // Begins `epoch` at batch `first_batch` (a resumed run passes where it stopped). Training order
  // is a permutation drawn from (seed, epoch); evaluation goes in order.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the epoch (blocks while it is being prepared); false at the epoch's end.
  // An unreadable sample is reported once on stderr ("warning: skipping PATH: reason") and
  // replaced by another sample of the dataset; a data error that is not per-sample is rethrown.
  bool next(Batch& batch);
  int64_t skipped() const;  // distinct unreadable samples met so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vitk::datasets

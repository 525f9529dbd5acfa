#pragma once
// Evaluation of a ViT checkpoint on a labelled dataset (`vitk eval`), and the validation pass of
// a training run (vit/train_task.cpp): loss, top-1 and top-5 accuracy, per-class accuracy and the
// confusion matrix, optionally the agreement of two precisions.
#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ops/ops.h"
#include "common/progress.h"
#include "common/tensor.h"
#include "datasets/dataset.h"
#include "datasets/loader.h"
#include "vit/resample.h"
#include "vit/vit.h"

namespace vitk::vit {

// Predictions at two precisions on the same images (vitk eval --compare-precision).
struct PrecisionComparison {
  ops::Precision precision = ops::Precision::f32;  // the second one
  int64_t top1 = 0;                                // images right at the second precision
  int64_t agree = 0;         // images with the same arg-max at both precisions
  double max_abs_diff = 0;   // largest |logit difference| over all images and classes
  double mean_abs_diff = 0;  // mean |logit difference|
  double max_abs_logit = 0;  // largest |logit| at the first precision, for scale
};

struct EvalResult {
  int64_t classes = 0;
  int64_t count = 0;               // images read and scored
  int64_t skipped = 0;             // unreadable images left out (Loader::skipped)
  double loss = 0;                 // mean cross-entropy (no smoothing)
  int64_t top1 = 0, top5 = 0;      // images whose label is the arg-max / among the 5 largest
  std::vector<int64_t> confusion;  // [classes × classes], row = true class, column = predicted
  bool complete = true;            // false when stopped early by `stop`
  // Σ loss of each batch by its index (Batch::index): a sharded validation adds the ranks' batches
  // in a single process's order.
  std::vector<std::pair<int64_t, double>> batch_loss_sums;
  std::optional<PrecisionComparison> comparison;  // with EvalSettings::compare

  double top1_percent() const { return count ? 100.0 * top1 / count : 0.0; }
  double top5_percent() const { return count ? 100.0 * top5 / count : 0.0; }
  int64_t at(int64_t truth, int64_t predicted) const {
    return confusion[static_cast<size_t>(truth * classes + predicted)];
  }
};

// How evaluate() runs the model.
struct EvalSettings {
  ops::Precision precision = ops::Precision::f32;
  bool packed_weights = false;  // nn::Context::packed_weights
  // Also run every batch at this precision and compare the predictions (EvalResult::comparison).
  std::optional<ops::Precision> compare;
  // Keep only the form the products use of each weight (nn::Context::one_copy_of_weights): for a
  // model that only runs (vitk eval), never for one that trains on after the evaluation.
  bool one_copy_of_weights = false;
  // For a message about non-finite logits: the checkpoint's path, and the name of row `row` of
  // the loader's batch `batch` ("" when unknown).
  std::string model;
  std::function<std::string(int64_t batch, int64_t row)> name_row;
};

// One pass of `loader` (an evaluation loader: training = false) through the model in inference
// mode. `arena` holds the activations; `progress` (may be null) is updated per batch; `stop`
// (may be null) ends the pass early (complete = false).
EvalResult evaluate(VisionTransformer& model, datasets::Loader& loader, Arena& arena,
                    Progress* progress = nullptr, const std::atomic<int>* stop = nullptr,
                    const EvalSettings& settings = {});

struct EvalOptions {
  std::string model;  // --model: a checkpoint
  std::string data;   // --data
  // --image-size: run the checkpoint at another size, its positions resampled (vit/checkpoint.h);
  // 0: its own. --align-corners: the resampling's convention (unset: the checkpoint's).
  int64_t image_height = 0, image_width = 0;
  std::optional<bool> align_corners;
  PosInterpolation pos_interpolation = PosInterpolation::bicubic;  // --pos-interpolation
  datasets::Split split = datasets::Split::val;
  int64_t batch_size = 128;
  int prefetch = 3;
  ops::Precision precision = ops::Precision::f32;   // --precision
  std::optional<ops::Precision> compare_precision;  // --compare-precision
};

// The loader options that feed `config`'s model its evaluation batches (the eval transform, no
// augmentation); a training loader starts from them.
datasets::LoaderOptions eval_loader_options(const VitConfig& config, int64_t batch_size,
                                            int prefetch);

// Loads the checkpoint, evaluates it on the data and prints the report to `out` (the data's
// classes must be the model's: vitk::Error otherwise).
EvalResult run_eval(const EvalOptions& options, std::ostream& out, bool tty = false);

// Top-1 and top-5 lines, per-class accuracy and the confusion matrix as aligned tables with the
// class names (the matrix only up to 40 classes).
std::string format_eval_report(const EvalResult& result,
                               const std::vector<std::string>& class_names);
// "bf16 against f32 on the same 10000 images: top-1 agreement ..." (result.comparison set).
std::string format_comparison(const EvalResult& result, ops::Precision first);

}  // namespace vitk::vit

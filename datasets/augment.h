#pragma once
// Training augmentation as timm's create_transform and Mixup do it, every random draw taken from a
// counter-based Rng so that a sample's augmentation depends only on (seed, epoch, index) and never
// on threads or on where a run was resumed.
#include <array>
#include <cstdint>

#include <opencv2/core.hpp>

#include "common/ops/ops.h"
#include "common/tensor.h"

namespace vitk::datasets {

struct AugmentOptions {
  // Random resized crop (timm --scale, --ratio); off: the eval transform instead.
  bool random_resized_crop = true;
  std::array<float, 2> scale{0.08f, 1.f};
  std::array<float, 2> ratio{3.f / 4.f, 4.f / 3.f};
  float hflip = 0.5f;  // probability (timm --hflip)
  // Random crop after padding (torchvision's RandomCrop(size, padding=N), fill 0): the image
  // shifted by whole pixels, up to crop_padding on each axis, the uncovered border black.
  int64_t crop_padding = 0;
  // Random erasing (timm --reprob, mode "pixel"): one rectangle of area (0.02, 1/3) of the image
  // and log-uniform aspect (0.3, 1/0.3), filled with N(0, 1) noise in normalised space.
  float reprob = 0.f;
  // Mixup / CutMix (timm --mixup, --cutmix, --mixup-prob, --mixup-switch-prob): alphas of the Beta
  // distributions (0 = off), probability of mixing a batch, and of CutMix when both are on.
  float mixup = 0.f;
  float cutmix = 0.f;
  float mixup_prob = 1.f;
  float mixup_switch_prob = 0.5f;
  float smoothing = 0.1f;  // label smoothing folded into mixed targets (timm --smoothing)
  bool mixing() const { return (mixup > 0.f || cutmix > 0.f) && mixup_prob > 0.f; }
};

// Crop of random area fraction in `scale` and aspect ratio in `ratio` (log-uniform), resized to
// height × width with `interpolation` (cv::INTER_*); after 10 failed draws a centre crop, as
// torchvision's RandomResizedCrop. 8-bit in, 8-bit out, same channels.
cv::Mat random_resized_crop(const cv::Mat& image, int64_t height, int64_t width,
                            const std::array<float, 2>& scale, const std::array<float, 2>& ratio,
                            int interpolation, ops::Rng& rng);
// Mirrors left-right with probability p (in place); true when it did.
bool random_hflip(cv::Mat& image, float p, ops::Rng& rng);
// torchvision's RandomCrop(size, padding=pad, fill=0) on normalised chw [C, H, W] floats, in
// place: pads `pad` pixels of fill[c] (a black pixel, normalised) on every side and keeps the
// H × W window at a uniform top, left in [0, 2·pad]. Two draws when pad > 0, none at 0.
void random_translate(float* chw, int64_t channels, int64_t height, int64_t width, int64_t pad,
                      const float* fill, ops::Rng& rng);
// On normalised chw [C, H, W] floats, in place, with probability p. True when it erased (it
// gives up, as timm does, when 10 draws of the rectangle do not fit).
bool random_erasing(float* chw, int64_t channels, int64_t height, int64_t width, float p,
                    ops::Rng& rng);

// Mixup / CutMix in timm's mode "batch": row i of a batch of B rows is mixed with its mirror,
// row B−1−i (the middle row of an odd batch is its own mirror and is left alone). The work is
// split in three so that a shard of the batch (one rank's rows, datasets/loader.h) can produce
// exactly the rows the whole batch would have: draw_mix once per global batch, mix_pair on each
// pair of rows (the shard supplies a mirror row that another rank owns from its own decode),
// mix_target per row.
struct MixDraw {
  double lam = 1.0;     // the weight of a row's own image and label; CutMix: the kept area
  bool cutmix = false;  // else Mixup
  bool apply = false;   // λ < 1 and B > 1: the images change (else only the targets are made)
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;  // CutMix: rows [y0, y1) × columns [x0, x1) swapped
};
// The batch's draws (timm's Mixup._params_per_batch and rand_bbox): with probability
// 1 − mixup_prob none (λ = 1); else CutMix or Mixup and λ ~ Beta(α, α), and for CutMix a box of
// about (1 − λ) of the image with λ corrected to the area kept. `batch` is the GLOBAL batch size.
MixDraw draw_mix(const AugmentOptions& options, int64_t batch, int64_t height, int64_t width,
                 ops::Rng& rng);
// Mixes a pair in place: `first` is row i, `second` row B−1−i, with i < B−1−i, each normalised
// chw [C, H, W]. Mixup: x = λ·x + (1 − λ)·x_mirror for both; CutMix: the box swapped. Nothing
// when !mix.apply.
void mix_pair(const MixDraw& mix, float* first, float* second, int64_t channels, int64_t height,
              int64_t width);
// One row of soft targets, f32 [classes]: λ·smooth(one_hot(label)) +
// (1 − λ)·smooth(one_hot(mirror_label)), smooth(v) = v·(1 − ε) + ε/classes; each weighted term
// rounded to float before it is added (never fused into an FMA), as mix_batch always did.
void mix_target(double lam, int32_t label, int32_t mirror_label, int64_t classes, float smoothing,
                float* row);
// The three on a whole batch: images [B, C, H, W] in place, targets f32 [B, classes] (allocated
// when their shape differs). Returns λ (1 when the batch is left alone).
float mix_batch(Tensor& images, const Tensor& labels, int64_t classes,
                const AugmentOptions& options, ops::Rng& rng, Tensor& targets);
// A draw from Beta(alpha, alpha) (via two Gamma draws).
double sample_beta(double alpha, ops::Rng& rng);

}  // namespace vitk::datasets

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
// Mirrors left-right with probability p (in place).
void random_hflip(cv::Mat& image, float p, ops::Rng& rng);
// torchvision's RandomCrop(size, padding=pad, fill=0) on normalised chw [C, H, W] floats, in
// place: pads `pad` pixels of fill[c] (a black pixel, normalised) on every side and keeps the
// H × W window at a uniform top, left in [0, 2·pad]. Two draws when pad > 0, none at 0.
void random_translate(float* chw, int64_t channels, int64_t height, int64_t width, int64_t pad,
                      const float* fill, ops::Rng& rng);
// On normalised chw [C, H, W] floats, in place, with probability p.
void random_erasing(float* chw, int64_t channels, int64_t height, int64_t width, float p,
                    ops::Rng& rng);

// Mixes a batch with itself reversed (timm's mode "batch"): images [B, C, H, W] in place;
// targets f32 [B, classes] = λ·smooth(one_hot(label)) + (1 − λ)·smooth(one_hot(label of the
// mirror)), where smooth(v) = v·(1 − ε) + ε/classes and, for CutMix, λ is the kept area. With
// probability 1 − mixup_prob the batch is left alone (λ = 1). Returns λ.
float mix_batch(Tensor& images, const Tensor& labels, int64_t classes,
                const AugmentOptions& options, ops::Rng& rng, Tensor& targets);
// A draw from Beta(alpha, alpha) (via two Gamma draws).
double sample_beta(double alpha, ops::Rng& rng);

}  // namespace vitk::datasets

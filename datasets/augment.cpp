// Training augmentation with torchvision's and timm's sampling rules (RandomResizedCrop,
// RandomHorizontalFlip, RandomErasing, Mixup/CutMix in "batch" mode), drawing from ops::Rng.
#include "datasets/augment.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "common/error.h"

namespace vitk::datasets {
namespace {

// Uniform in [0, 1) with 53 bits, and in (0, 1] for logarithms.
double uniform01(ops::Rng& rng) {
  return static_cast<double>(rng.next_u64() >> 11) * 0x1p-53;
}
double uniform_open0(ops::Rng& rng) {
  return (static_cast<double>(rng.next_u64() >> 11) + 1.0) * 0x1p-53;
}
double uniform(ops::Rng& rng, double lo, double hi) {
  return lo + (hi - lo) * uniform01(rng);
}
// An integer in [lo, hi] (inclusive), as Python's random.randint.
int64_t randint(ops::Rng& rng, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(rng.next_u64() % span);
}
// Python's round(): half to even (the default floating-point rounding mode).
int64_t py_round(double x) {
  return static_cast<int64_t>(std::nearbyint(x));
}

// log Gamma(alpha, 1) draw (Marsaglia and Tsang, 2000). Kept in logs so that tiny alphas, whose
// draws underflow a double, still give a Beta draw instead of 0/0.
double log_gamma_draw(double alpha, ops::Rng& rng) {
  if (alpha < 1.0) {
    // Gamma(a) = Gamma(a + 1) · U^(1/a).
    return log_gamma_draw(alpha + 1.0, rng) + std::log(uniform_open0(rng)) / alpha;
  }
  const double d = alpha - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = rng.normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform_open0(rng);
    if (u < 1.0 - 0.0331 * x * x * x * x) return std::log(d * v);
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return std::log(d * v);
  }
}

}  // namespace

cv::Mat random_resized_crop(const cv::Mat& image, int64_t height, int64_t width,
                            const std::array<float, 2>& scale, const std::array<float, 2>& ratio,
                            int interpolation, ops::Rng& rng) {
  if (image.empty() || image.depth() != CV_8U)
    throw Error("random_resized_crop: expected a non-empty 8-bit image");
  if (height <= 0 || width <= 0 || height > 65535 || width > 65535)
    throw Error("random_resized_crop: bad output size " + std::to_string(height) + "x" +
                std::to_string(width));
  if (!(scale[0] > 0.f && scale[0] <= scale[1]) || !(ratio[0] > 0.f && ratio[0] <= ratio[1]))
    throw Error("random_resized_crop: scale and ratio must be positive (min, max) pairs");
  const int64_t h_in = image.rows, w_in = image.cols;
  const double area = static_cast<double>(h_in) * w_in;
  const double log_r0 = std::log(ratio[0]), log_r1 = std::log(ratio[1]);
  int64_t top = 0, left = 0, h = h_in, w = w_in;
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target_area = area * uniform(rng, scale[0], scale[1]);
    const double aspect = std::exp(uniform(rng, log_r0, log_r1));
    const int64_t cw = py_round(std::sqrt(target_area * aspect));
    const int64_t ch = py_round(std::sqrt(target_area / aspect));
    if (cw > 0 && cw <= w_in && ch > 0 && ch <= h_in) {
      top = randint(rng, 0, h_in - ch);
      left = randint(rng, 0, w_in - cw);
      h = ch, w = cw;
      found = true;
    }
  }
  if (!found) {
    // The centre crop of the whole image, narrowed to the nearest allowed aspect ratio.
    const double in_ratio = static_cast<double>(w_in) / h_in;
    if (in_ratio < ratio[0]) {
      w = w_in;
      h = std::clamp<int64_t>(py_round(w / static_cast<double>(ratio[0])), 1, h_in);
    } else if (in_ratio > ratio[1]) {
      h = h_in;
      w = std::clamp<int64_t>(py_round(h * static_cast<double>(ratio[1])), 1, w_in);
    }
    top = (h_in - h) / 2;
    left = (w_in - w) / 2;
  }
  const cv::Mat crop = image(cv::Rect(static_cast<int>(left), static_cast<int>(top),
                                      static_cast<int>(w), static_cast<int>(h)));
  cv::Mat out;
  if (h == height && w == width)
    out = crop.clone();
  else
    cv::resize(crop, out, cv::Size(static_cast<int>(width), static_cast<int>(height)), 0, 0,
               interpolation);
  return out;
}

bool random_hflip(cv::Mat& image, float p, ops::Rng& rng) {
  // One draw whatever p is, so that the draws after it do not depend on p.
  if (rng.uniform() >= p) return false;
  cv::flip(image, image, 1);
  return true;
}

void random_translate(float* chw, int64_t channels, int64_t height, int64_t width, int64_t pad,
                      const float* fill, ops::Rng& rng) {
  if (pad <= 0) return;
  const int64_t top = randint(rng, 0, 2 * pad), left = randint(rng, 0, 2 * pad);
  const int64_t dy = top - pad, dx = left - pad;  // output (y, x) is input (y + dy, x + dx)
  std::vector<float> row(static_cast<size_t>(width));
  for (int64_t c = 0; c < channels; ++c) {
    float* plane = chw + c * height * width;
    // Rows in the order that never overwrites a source row before it is read.
    for (int64_t k = 0; k < height; ++k) {
      const int64_t y = dy > 0 ? k : height - 1 - k;
      const int64_t sy = y + dy;
      std::fill(row.begin(), row.end(), fill[c]);
      if (sy >= 0 && sy < height)
        for (int64_t x = std::max<int64_t>(0, -dx); x < std::min(width, width - dx); ++x)
          row[static_cast<size_t>(x)] = plane[sy * width + x + dx];
      std::copy(row.begin(), row.end(), plane + y * width);
    }
  }
}

bool random_erasing(float* chw, int64_t channels, int64_t height, int64_t width, float p,
                    ops::Rng& rng) {
  // timm: erase when random() <= p; uniform() < p gives the same odds and never erases at p = 0.
  if (!(rng.uniform() < p)) return false;
  const double area = static_cast<double>(height) * width;
  constexpr double kMinArea = 0.02, kMaxArea = 1.0 / 3.0;
  // timm's default aspect range (0.3, 1/0.3), log-uniform.
  const double log_a0 = std::log(0.3), log_a1 = std::log(1.0 / 0.3);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = uniform(rng, kMinArea, kMaxArea) * area;
    const double aspect = std::exp(uniform(rng, log_a0, log_a1));
    const int64_t h = py_round(std::sqrt(target_area * aspect));
    const int64_t w = py_round(std::sqrt(target_area / aspect));
    if (w < width && h < height) {
      const int64_t top = randint(rng, 0, height - h);
      const int64_t left = randint(rng, 0, width - w);
      // Mode "pixel": every value of the box is its own N(0, 1) draw.
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t y = top; y < top + h; ++y) {
          float* row = chw + (c * height + y) * width;
          for (int64_t x = left; x < left + w; ++x) row[x] = static_cast<float>(rng.normal());
        }
      return true;
    }
  }
  return false;
}

double sample_beta(double alpha, ops::Rng& rng) {
  if (!(alpha > 0.0) || !std::isfinite(alpha))
    throw Error("sample_beta: alpha must be positive, not " + std::to_string(alpha));
  // X / (X + Y) = 1 / (1 + exp(log Y − log X)).
  const double lx = log_gamma_draw(alpha, rng);
  const double ly = log_gamma_draw(alpha, rng);
  return 1.0 / (1.0 + std::exp(ly - lx));
}

MixDraw draw_mix(const AugmentOptions& options, int64_t batch, int64_t height, int64_t width,
                 ops::Rng& rng) {
  if (batch < 0 || height < 0 || width < 0)
    throw Error("draw_mix: a batch of " + std::to_string(batch) + " images of " +
                std::to_string(height) + "x" + std::to_string(width) + " is not a batch");
  // timm's Mixup._params_per_batch, then cutmix_bbox_and_lam with the area-corrected λ.
  MixDraw mix;
  if (options.mixing() && uniform01(rng) < options.mixup_prob) {
    if (options.mixup > 0.f && options.cutmix > 0.f)
      mix.cutmix = uniform01(rng) < options.mixup_switch_prob;
    else
      mix.cutmix = options.cutmix > 0.f;
    mix.lam = sample_beta(mix.cutmix ? options.cutmix : options.mixup, rng);
  }
  mix.apply = mix.lam < 1.0 && batch > 1;
  if (mix.apply && mix.cutmix) {
    // rand_bbox: a box of (1 − λ) of the area centred anywhere, clipped to the image.
    const int64_t h = height, w = width;
    const double cut = std::sqrt(1.0 - mix.lam);
    const int64_t cut_h = static_cast<int64_t>(h * cut), cut_w = static_cast<int64_t>(w * cut);
    const int64_t cy = randint(rng, 0, h - 1), cx = randint(rng, 0, w - 1);
    mix.y0 = std::clamp<int64_t>(cy - cut_h / 2, 0, h);
    mix.y1 = std::clamp<int64_t>(cy + cut_h / 2, 0, h);
    mix.x0 = std::clamp<int64_t>(cx - cut_w / 2, 0, w);
    mix.x1 = std::clamp<int64_t>(cx + cut_w / 2, 0, w);
    mix.lam = 1.0 - static_cast<double>((mix.y1 - mix.y0) * (mix.x1 - mix.x0)) /
                        static_cast<double>(h * w);
  }
  return mix;
}

void mix_pair(const MixDraw& mix, float* first, float* second, int64_t channels, int64_t height,
              int64_t width) {
  if (!mix.apply) return;
  const int64_t c = channels, h = height, w = width;
  float* p = first;
  float* q = second;
  if (mix.cutmix) {
    // Each row takes the box from the other: swapping the boxes does both at once.
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t yy = mix.y0; yy < mix.y1; ++yy) {
        const int64_t off = (ch * h + yy) * w;
        std::swap_ranges(p + off + mix.x0, p + off + mix.x1, q + off + mix.x0);
      }
  } else {
    // x_i = λ·x_i + (1 − λ)·x_j for both rows, each element read before it is written.
    const float l = static_cast<float>(mix.lam), m = static_cast<float>(1.0 - mix.lam);
    const int64_t sample = c * h * w;
    for (int64_t k = 0; k < sample; ++k) {
      const float a = p[k], bb = q[k];
      p[k] = l * a + m * bb;
      q[k] = l * bb + m * a;
    }
  }
}

namespace {

// The soft targets' values: off = ε/classes, and the products added at the two labels, rounded
// to float before they are added (mix_batch has always computed them once per batch, so they were
// never fused into an FMA with the add). Out of line so that no compiler fuses them where
// mix_target is inlined: a row's targets are the same bits whichever code path makes them.
struct TargetWeights {
  float off, own, mirror;
};
[[gnu::noinline]] TargetWeights target_weights(double lam, int64_t classes, float smoothing) {
  const double eps = smoothing;
  const float off = static_cast<float>(eps / classes);
  const float on = static_cast<float>(1.0 - eps + eps / classes);
  return {off, static_cast<float>(lam) * (on - off), static_cast<float>(1.0 - lam) * (on - off)};
}

}  // namespace

void mix_target(double lam, int32_t label, int32_t mirror_label, int64_t classes, float smoothing,
                float* row) {
  const TargetWeights t = target_weights(lam, classes, smoothing);
  std::fill(row, row + classes, t.off);
  row[label] += t.own;
  row[mirror_label] += t.mirror;
}

float mix_batch(Tensor& images, const Tensor& labels, int64_t classes,
                const AugmentOptions& options, ops::Rng& rng, Tensor& targets) {
  if (images.rank() != 4 || images.dtype() != DType::f32)
    throw Error("mix_batch: images must be f32 [B, C, H, W], got " + shape_str(images.shape()));
  const int64_t b = images.dim(0), c = images.dim(1), h = images.dim(2), w = images.dim(3);
  if (labels.dtype() != DType::i32 || labels.numel() != b)
    throw Error("mix_batch: labels must be i32 [" + std::to_string(b) + "], got " +
                shape_str(labels.shape()));
  if (classes <= 0) throw Error("mix_batch: the number of classes must be positive");
  const int32_t* y = labels.i32();
  for (int64_t i = 0; i < b; ++i)
    if (y[i] < 0 || y[i] >= classes)
      throw Error("mix_batch: label " + std::to_string(y[i]) + " of row " + std::to_string(i) +
                  " is outside 0.." + std::to_string(classes - 1));

  const MixDraw mix = draw_mix(options, b, h, w, rng);
  float* x = images.f32();
  const int64_t sample = c * h * w;
  // Row i with row b−1−i; the middle row of an odd batch is its own mirror and stays.
  for (int64_t i = 0; i < b / 2; ++i)
    mix_pair(mix, x + i * sample, x + (b - 1 - i) * sample, c, h, w);

  if (targets.shape() != Shape{b, classes} || targets.dtype() != DType::f32)
    targets = Tensor({b, classes}, DType::f32);
  float* t = targets.f32();
  for (int64_t i = 0; i < b; ++i)
    mix_target(mix.lam, y[i], y[b - 1 - i], classes, options.smoothing, t + i * classes);
  return static_cast<float>(mix.lam);
}

}  // namespace vitk::datasets

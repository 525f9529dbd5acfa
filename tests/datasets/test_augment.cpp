// Augmentation: shapes, the sampling rules of torchvision / timm, and determinism under a seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "common/error.h"
#include "datasets/augment.h"

using namespace vitk;
using namespace vitk::datasets;

namespace {

const std::array<float, 2> kScale{0.35f, 1.f};
const std::array<float, 2> kRatio{3.f / 4.f, 4.f / 3.f};

// A textured 8-bit image, so that different crops give different pixels.
cv::Mat texture(int rows, int cols, int channels) {
  cv::Mat m(rows, cols, CV_8UC(channels));
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x)
      for (int c = 0; c < channels; ++c)
        m.ptr<uint8_t>(y)[x * channels + c] = static_cast<uint8_t>((x * 7 + y * 13 + c * 50) % 256);
  return m;
}

bool same(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

TEST(RandomResizedCrop, ShapeChannelsAndDeterminism) {
  for (int channels : {1, 3}) {
    const cv::Mat img = texture(40, 56, channels);
    ops::Rng a(7), b(7), c(8);
    const cv::Mat x = random_resized_crop(img, 24, 32, kScale, kRatio, cv::INTER_LINEAR, a);
    const cv::Mat y = random_resized_crop(img, 24, 32, kScale, kRatio, cv::INTER_LINEAR, b);
    const cv::Mat z = random_resized_crop(img, 24, 32, kScale, kRatio, cv::INTER_LINEAR, c);
    EXPECT_EQ(x.rows, 24);
    EXPECT_EQ(x.cols, 32);
    EXPECT_EQ(x.type(), CV_8UC(channels));
    EXPECT_TRUE(same(x, y));
    EXPECT_FALSE(same(x, z));
  }
  ops::Rng rng(1);
  EXPECT_THROW(random_resized_crop(cv::Mat(), 8, 8, kScale, kRatio, cv::INTER_LINEAR, rng), Error);
  EXPECT_THROW(
      random_resized_crop(texture(8, 8, 1), 8, 8, {0.5f, 0.1f}, kRatio, cv::INTER_LINEAR, rng),
      Error);
}

TEST(RandomResizedCrop, CropsFollowTheScaleAndRatioRanges) {
  // Channel 0 holds x, channel 1 holds y: a nearest-neighbour enlargement of the crop shows the
  // crop's box as the range of those values.
  const int size = 100;
  cv::Mat coords(size, size, CV_8UC3);
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) coords.at<cv::Vec3b>(y, x) = cv::Vec3b(x, y, 0);
  double area_sum = 0;
  const int draws = 300;
  for (int seed = 0; seed < draws; ++seed) {
    ops::Rng rng(seed);
    const cv::Mat out =
        random_resized_crop(coords, 256, 256, kScale, kRatio, cv::INTER_NEAREST, rng);
    std::vector<cv::Mat> planes;
    cv::split(out, planes);
    double x0, x1, y0, y1;
    cv::minMaxLoc(planes[0], &x0, &x1);
    cv::minMaxLoc(planes[1], &y0, &y1);
    const double w = x1 - x0 + 1, h = y1 - y0 + 1;
    const double fraction = w * h / (size * size);
    // Rounding w and h to pixels moves the area and ratio a little.
    EXPECT_GE(fraction, 0.35 - 0.02) << seed;
    EXPECT_LE(fraction, 1.0);
    EXPECT_GE(w / h, 0.75 * 0.97) << seed;
    EXPECT_LE(w / h, 4.0 / 3.0 * 1.03) << seed;
    area_sum += fraction;
  }
  // The crops are not all full-size: the mean area fraction lies well inside the range.
  EXPECT_GT(area_sum / draws, 0.45);
  EXPECT_LT(area_sum / draws, 0.8);
}

TEST(RandomResizedCrop, FallsBackToACentreCropClampedToTheRatio) {
  // 10 x 100: no crop of at least 99% of the area fits the ratio range, so every draw fails and
  // torchvision's fallback takes the full height and width round(10 · 4/3) = 13, centred.
  cv::Mat wide(10, 100, CV_8UC1);
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 100; ++x) wide.at<uint8_t>(y, x) = static_cast<uint8_t>(x);
  for (int seed = 0; seed < 5; ++seed) {
    ops::Rng rng(seed);
    const cv::Mat out =
        random_resized_crop(wide, 10, 13, {0.99f, 1.f}, kRatio, cv::INTER_NEAREST, rng);
    ASSERT_EQ(out.cols, 13);
    EXPECT_EQ(out.at<uint8_t>(0, 0), (100 - 13) / 2);
    EXPECT_EQ(out.at<uint8_t>(9, 12), (100 - 13) / 2 + 12);
  }
}

TEST(RandomHflip, ProbabilityAndDeterminism) {
  const cv::Mat img = texture(5, 9, 3);
  cv::Mat mirrored;
  cv::flip(img, mirrored, 1);
  ops::Rng rng(3);
  cv::Mat m = img.clone();
  EXPECT_TRUE(random_hflip(m, 1.f, rng));
  EXPECT_TRUE(same(m, mirrored));
  m = img.clone();
  EXPECT_FALSE(random_hflip(m, 0.f, rng));
  EXPECT_TRUE(same(m, img));
  int flipped = 0;
  std::vector<bool> first;
  for (int seed = 0; seed < 1000; ++seed) {
    ops::Rng r(seed);
    cv::Mat x = img.clone();
    const bool said = random_hflip(x, 0.5f, r);
    const bool f = same(x, mirrored);
    EXPECT_TRUE(f || same(x, img));
    EXPECT_EQ(said, f) << seed;
    flipped += f;
    first.push_back(f);
  }
  EXPECT_GT(flipped, 400);
  EXPECT_LT(flipped, 600);
  for (int seed = 0; seed < 50; ++seed) {
    ops::Rng r(seed);
    cv::Mat x = img.clone();
    random_hflip(x, 0.5f, r);
    EXPECT_EQ(same(x, mirrored), first[seed]);
  }
}

// torchvision's RandomCrop(size, padding): pad with the fill on every side, keep the window at
// (top, left); as a definition on chw floats.
std::vector<float> padded_crop(const std::vector<float>& x, int64_t c, int64_t h, int64_t w,
                               int64_t pad, int64_t top, int64_t left, const float* fill) {
  std::vector<float> out(x.size());
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t xx = 0; xx < w; ++xx) {
        const int64_t sy = y + top - pad, sx = xx + left - pad;  // in the unpadded image
        const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
        out[(ch * h + y) * w + xx] = inside ? x[(ch * h + sy) * w + sx] : fill[ch];
      }
  return out;
}

TEST(RandomTranslate, IsAPaddedCropAtAUniformOffset) {
  const int64_t c = 2, h = 7, w = 9, pad = 2;
  const float fill[2] = {-0.5f, -2.f};
  std::vector<float> base(static_cast<size_t>(c * h * w));
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<float>(i) + 1.f;  // distinct
  std::vector<int> counts(25, 0);
  for (int seed = 0; seed < 1000; ++seed) {
    std::vector<float> x = base;
    ops::Rng rng(seed);
    random_translate(x.data(), c, h, w, pad, fill, rng);
    int matches = 0;
    for (int64_t top = 0; top <= 2 * pad; ++top)
      for (int64_t left = 0; left <= 2 * pad; ++left)
        if (x == padded_crop(base, c, h, w, pad, top, left, fill))
          ++matches, ++counts[static_cast<size_t>(top * 5 + left)];
    ASSERT_EQ(matches, 1) << "seed " << seed;
  }
  for (int n : counts) {  // 40 expected per offset
    EXPECT_GT(n, 15);
    EXPECT_LT(n, 70);
  }
  // Same seed, same shift; padding 0 changes nothing and draws nothing.
  std::vector<float> a = base, b = base, z = base;
  ops::Rng ra(7), rb(7), rz(7), untouched(7);
  random_translate(a.data(), c, h, w, pad, fill, ra);
  random_translate(b.data(), c, h, w, pad, fill, rb);
  EXPECT_EQ(a, b);
  random_translate(z.data(), c, h, w, 0, fill, rz);
  EXPECT_EQ(z, base);
  EXPECT_EQ(rz.next_u64(), untouched.next_u64());
}

TEST(RandomErasing, OneNoiseBoxOfTheRightSize) {
  const int64_t c = 3, h = 32, w = 40;
  std::vector<float> base(c * h * w, 5.f);  // no N(0, 1) draw is exactly 5
  std::vector<float> x(base.size(), 5.f);
  ops::Rng none(1);
  EXPECT_FALSE(random_erasing(x.data(), c, h, w, 0.f, none));
  EXPECT_EQ(x, base);
  double fraction_sum = 0;
  for (int seed = 0; seed < 200; ++seed) {
    std::fill(x.begin(), x.end(), 5.f);
    ops::Rng rng(seed);
    EXPECT_TRUE(random_erasing(x.data(), c, h, w, 1.f, rng)) << seed;
    // The changed values of channel 0 form one box, the same in every channel.
    int64_t y0 = h, y1 = -1, x0 = w, x1 = -1, changed = 0;
    for (int64_t yy = 0; yy < h; ++yy)
      for (int64_t xx = 0; xx < w; ++xx)
        if (x[yy * w + xx] != 5.f) {
          y0 = std::min(y0, yy), y1 = std::max(y1, yy);
          x0 = std::min(x0, xx), x1 = std::max(x1, xx);
          ++changed;
        }
    ASSERT_GT(changed, 0) << seed;
    const int64_t box = (y1 - y0 + 1) * (x1 - x0 + 1);
    EXPECT_EQ(changed, box) << seed;
    for (int64_t ch = 1; ch < c; ++ch)
      for (int64_t yy = 0; yy < h; ++yy)
        for (int64_t xx = 0; xx < w; ++xx) {
          const bool inside = yy >= y0 && yy <= y1 && xx >= x0 && xx <= x1;
          ASSERT_EQ(x[(ch * h + yy) * w + xx] != 5.f, inside) << seed;
        }
    const double fraction = static_cast<double>(box) / (h * w);
    EXPECT_GE(fraction, 0.02 * 0.7) << seed;  // rounding of small boxes
    EXPECT_LE(fraction, 1.0 / 3.0 * 1.15) << seed;
    fraction_sum += fraction;
  }
  // Uniform area in (0.02, 1/3): mean near 0.177.
  EXPECT_NEAR(fraction_sum / 200, 0.177, 0.03);
  // Same seed, same box and noise; another seed, another.
  std::vector<float> a = base, b = base, d = base;
  ops::Rng ra(11), rb(11), rd(12);
  random_erasing(a.data(), c, h, w, 1.f, ra);
  random_erasing(b.data(), c, h, w, 1.f, rb);
  random_erasing(d.data(), c, h, w, 1.f, rd);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, d);
}

TEST(SampleBeta, MomentsOfSymmetricBeta) {
  for (double alpha : {0.2, 0.8, 1.0, 4.0}) {
    SCOPED_TRACE(alpha);
    ops::Rng rng(42);
    const int n = 20000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      const double v = sample_beta(alpha, rng);
      ASSERT_TRUE(v >= 0.0 && v <= 1.0) << v;
      sum += v;
      sq += v * v;
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.015);
    // Var of Beta(a, a) = 1 / (4 (2a + 1)).
    const double want = 1.0 / (4.0 * (2.0 * alpha + 1.0));
    EXPECT_NEAR(var, want, 0.06 * want);
  }
  ops::Rng a(5), b(5);
  EXPECT_EQ(sample_beta(0.8, a), sample_beta(0.8, b));
  ops::Rng tiny(5);
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(std::isnan(sample_beta(0.01, tiny)));
  EXPECT_THROW(sample_beta(0.0, a), Error);
}

// A batch whose row i is filled with i + 1 and whose label is i % classes.
struct MixCase {
  Tensor images, labels, targets;
  MixCase(int64_t b, int64_t c, int64_t h, int64_t w, int64_t classes)
      : images({b, c, h, w}), labels({b}, DType::i32) {
    for (int64_t i = 0; i < b; ++i) {
      std::fill(images.f32() + i * c * h * w, images.f32() + (i + 1) * c * h * w,
                static_cast<float>(i + 1));
      labels.i32()[i] = static_cast<int32_t>(i % classes);
    }
  }
};

// Checks targets against λ: row i = λ·smooth(y_i) + (1 − λ)·smooth(y_mirror), summing to 1.
void expect_targets(const MixCase& m, int64_t classes, float lam, float eps) {
  const int64_t b = m.labels.numel();
  ASSERT_EQ(m.targets.shape(), (Shape{b, classes}));
  const float off = eps / classes, on = 1.f - eps + eps / classes;
  for (int64_t i = 0; i < b; ++i) {
    const float* row = m.targets.f32() + i * classes;
    std::vector<double> want(classes, 0.0);
    for (int64_t k = 0; k < classes; ++k) {
      want[k] += lam * (k == m.labels.i32()[i] ? on : off);
      want[k] += (1 - lam) * (k == m.labels.i32()[b - 1 - i] ? on : off);
    }
    double sum = 0;
    for (int64_t k = 0; k < classes; ++k) {
      EXPECT_NEAR(row[k], want[k], 1e-6) << i << "," << k;
      sum += row[k];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(MixBatch, MixupBlendsWithTheReversedBatch) {
  const int64_t b = 5, c = 2, h = 4, w = 3, classes = 7;
  AugmentOptions o;
  o.mixup = 0.8f;
  o.smoothing = 0.1f;
  MixCase m(b, c, h, w, classes);
  ops::Rng rng(9);
  const float lam = mix_batch(m.images, m.labels, classes, o, rng, m.targets);
  EXPECT_GT(lam, 0.f);
  EXPECT_LT(lam, 1.f);
  for (int64_t i = 0; i < b; ++i) {
    const float want = lam * (i + 1) + (1 - lam) * (b - i);
    for (int64_t k = 0; k < c * h * w; ++k)
      ASSERT_NEAR(m.images.f32()[i * c * h * w + k], want, 1e-5) << i;
  }
  expect_targets(m, classes, lam, 0.1f);
}

TEST(MixBatch, CutmixPastesABoxAndLambdaIsTheKeptArea) {
  const int64_t b = 6, c = 3, h = 16, w = 20, classes = 4;
  AugmentOptions o;
  o.cutmix = 1.f;
  o.smoothing = 0.f;
  int boxes = 0;
  for (int seed = 0; seed < 40; ++seed) {
    MixCase m(b, c, h, w, classes);
    ops::Rng rng(seed);
    const float lam = mix_batch(m.images, m.labels, classes, o, rng, m.targets);
    for (int64_t i = 0; i < b; ++i) {
      int64_t own = 0, mirror = 0;
      for (int64_t k = 0; k < c * h * w; ++k) {
        const float v = m.images.f32()[i * c * h * w + k];
        own += v == i + 1;
        mirror += v == b - i;
      }
      ASSERT_EQ(own + mirror, c * h * w) << seed;
      EXPECT_NEAR(static_cast<double>(own) / (c * h * w), lam, 1e-6) << seed;
    }
    boxes += lam < 1.f;
    expect_targets(m, classes, lam, 0.f);
  }
  EXPECT_GT(boxes, 30);  // a box of zero area is rare
}

TEST(MixBatch, SwitchAndMixProbabilities) {
  const int64_t b = 4, c = 1, h = 8, w = 8, classes = 3;
  auto run = [&](const AugmentOptions& o, uint64_t seed, MixCase& m) {
    ops::Rng rng(seed);
    return mix_batch(m.images, m.labels, classes, o, rng, m.targets);
  };
  // Switch probability 1: always CutMix (every pixel is one row's or the mirror's).
  AugmentOptions both;
  both.mixup = 0.8f;
  both.cutmix = 1.f;
  both.mixup_switch_prob = 1.f;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    MixCase m(b, c, h, w, classes);
    run(both, seed, m);
    for (int64_t k = 0; k < h * w; ++k) {
      const float v = m.images.f32()[k];
      EXPECT_TRUE(v == 1.f || v == static_cast<float>(b)) << v;
    }
  }
  // Switch probability 0: always Mixup (blended values).
  both.mixup_switch_prob = 0.f;
  MixCase blended(b, c, h, w, classes);
  const float lam = run(both, 3, blended);
  EXPECT_NEAR(blended.images.f32()[0], lam * 1 + (1 - lam) * b, 1e-5);
  // mixup_prob 0: the batch is left alone, λ = 1, targets are the smoothed one-hot labels.
  AugmentOptions never = both;
  never.mixup_prob = 0.f;
  MixCase alone(b, c, h, w, classes);
  EXPECT_EQ(run(never, 3, alone), 1.f);
  EXPECT_EQ(alone.images.f32()[0], 1.f);
  expect_targets(alone, classes, 1.f, never.smoothing);
  // mixup_prob 0.5: about half the batches are mixed.
  AugmentOptions half = both;
  half.mixup_prob = 0.5f;
  int mixed = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    MixCase m(b, c, h, w, classes);
    mixed += run(half, seed, m) < 1.f;
  }
  EXPECT_GT(mixed, 150);
  EXPECT_LT(mixed, 250);
}

TEST(MixBatch, DeterminismAndBadInput) {
  const int64_t b = 4, c = 3, h = 8, w = 8, classes = 5;
  AugmentOptions o;
  o.mixup = 0.8f;
  o.cutmix = 1.f;
  MixCase x(b, c, h, w, classes), y(b, c, h, w, classes), z(b, c, h, w, classes);
  ops::Rng rx(21), ry(21), rz(22);
  const float lx = mix_batch(x.images, x.labels, classes, o, rx, x.targets);
  const float ly = mix_batch(y.images, y.labels, classes, o, ry, y.targets);
  const float lz = mix_batch(z.images, z.labels, classes, o, rz, z.targets);
  EXPECT_EQ(lx, ly);
  EXPECT_NE(lx, lz);
  EXPECT_EQ(std::vector<float>(x.images.f32(), x.images.f32() + x.images.numel()),
            std::vector<float>(y.images.f32(), y.images.f32() + y.images.numel()));
  MixCase bad(b, c, h, w, classes);
  bad.labels.i32()[2] = classes;
  ops::Rng r(1);
  EXPECT_THROW(mix_batch(bad.images, bad.labels, classes, o, r, bad.targets), Error);
  Tensor flat({b, c * h * w});
  EXPECT_THROW(mix_batch(flat, bad.labels, classes, o, r, bad.targets), Error);
}

// mix_batch as it was before it was split into draw_mix, mix_pair and mix_target (verbatim apart
// from the names), so that the split is checked to give the same batches bit for bit.
namespace before_split {
double uniform01(ops::Rng& rng) {
  return static_cast<double>(rng.next_u64() >> 11) * 0x1p-53;
}
int64_t randint(ops::Rng& rng, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(rng.next_u64() % span);
}
float mix_batch(Tensor& images, const Tensor& labels, int64_t classes,
                const AugmentOptions& options, ops::Rng& rng, Tensor& targets) {
  const int64_t b = images.dim(0), c = images.dim(1), h = images.dim(2), w = images.dim(3);
  const int32_t* y = labels.i32();
  double lam = 1.0;
  bool cutmix = false;
  if (options.mixing() && uniform01(rng) < options.mixup_prob) {
    if (options.mixup > 0.f && options.cutmix > 0.f)
      cutmix = uniform01(rng) < options.mixup_switch_prob;
    else
      cutmix = options.cutmix > 0.f;
    lam = sample_beta(cutmix ? options.cutmix : options.mixup, rng);
  }
  float* x = images.f32();
  const int64_t sample = c * h * w;
  if (lam < 1.0 && b > 1) {
    if (cutmix) {
      const double cut = std::sqrt(1.0 - lam);
      const int64_t cut_h = static_cast<int64_t>(h * cut), cut_w = static_cast<int64_t>(w * cut);
      const int64_t cy = randint(rng, 0, h - 1), cx = randint(rng, 0, w - 1);
      const int64_t y0 = std::clamp<int64_t>(cy - cut_h / 2, 0, h);
      const int64_t y1 = std::clamp<int64_t>(cy + cut_h / 2, 0, h);
      const int64_t x0 = std::clamp<int64_t>(cx - cut_w / 2, 0, w);
      const int64_t x1 = std::clamp<int64_t>(cx + cut_w / 2, 0, w);
      lam = 1.0 - static_cast<double>((y1 - y0) * (x1 - x0)) / static_cast<double>(h * w);
      for (int64_t i = 0; i < b / 2; ++i) {
        float* p = x + i * sample;
        float* q = x + (b - 1 - i) * sample;
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t yy = y0; yy < y1; ++yy) {
            const int64_t off = (ch * h + yy) * w;
            std::swap_ranges(p + off + x0, p + off + x1, q + off + x0);
          }
      }
    } else {
      const float l = static_cast<float>(lam), m = static_cast<float>(1.0 - lam);
      for (int64_t i = 0; i < b / 2; ++i) {
        float* p = x + i * sample;
        float* q = x + (b - 1 - i) * sample;
        for (int64_t k = 0; k < sample; ++k) {
          const float a = p[k], bb = q[k];
          p[k] = l * a + m * bb;
          q[k] = l * bb + m * a;
        }
      }
    }
  }
  if (targets.shape() != Shape{b, classes} || targets.dtype() != DType::f32)
    targets = Tensor({b, classes}, DType::f32);
  const double eps = options.smoothing;
  const float off = static_cast<float>(eps / classes);
  const float on = static_cast<float>(1.0 - eps + eps / classes);
  float* t = targets.f32();
  for (int64_t i = 0; i < b; ++i) {
    float* row = t + i * classes;
    std::fill(row, row + classes, off);
    row[y[i]] += static_cast<float>(lam) * (on - off);
    row[y[b - 1 - i]] += static_cast<float>(1.0 - lam) * (on - off);
  }
  return static_cast<float>(lam);
}
}  // namespace before_split

TEST(MixBatch, SplitIntoDrawPairAndTargetGivesTheSameBatchesBitForBit) {
  const int64_t c = 3, h = 9, w = 7, classes = 6;
  AugmentOptions mixup, cutmix, both;
  mixup.mixup = 0.8f;
  cutmix.cutmix = 1.f;
  cutmix.smoothing = 0.f;
  both.mixup = 0.3f;
  both.cutmix = 0.7f;
  both.mixup_prob = 0.7f;
  both.mixup_switch_prob = 0.5f;
  both.smoothing = 0.25f;
  int mixed = 0;
  for (const AugmentOptions& o : {mixup, cutmix, both})
    for (int64_t b : {1, 2, 5, 6})
      for (uint64_t seed = 0; seed < 60; ++seed) {
        // Rows of distinct noise, so that any difference in arithmetic shows.
        Tensor images({b, c, h, w}), labels({b}, DType::i32);
        ops::Rng fill(1000 + seed);
        for (int64_t k = 0; k < images.numel(); ++k)
          images.f32()[k] = static_cast<float>(fill.normal());
        for (int64_t i = 0; i < b; ++i) labels.i32()[i] = static_cast<int32_t>((i * 5 + seed) % 6);
        Tensor want_images = images.clone(), want_targets, got_targets;
        ops::Rng r1(seed), r2(seed);
        const float want =
            before_split::mix_batch(want_images, labels, classes, o, r1, want_targets);
        const float got = mix_batch(images, labels, classes, o, r2, got_targets);
        ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0) << b << " " << seed;
        ASSERT_EQ(r1.counter(), r2.counter()) << b << " " << seed;  // the same draws
        ASSERT_EQ(std::memcmp(images.data(), want_images.data(), images.nbytes()), 0)
            << b << " " << seed;
        ASSERT_EQ(got_targets.shape(), want_targets.shape());
        ASSERT_EQ(std::memcmp(got_targets.data(), want_targets.data(), got_targets.nbytes()), 0)
            << b << " " << seed;
        mixed += got < 1.f;
      }
  EXPECT_GT(mixed, 400);
}

// draw_mix + mix_pair + mix_target on a pair held apart (as a shard holds a row and a mirror
// decoded for it) give the rows mix_batch gives.
TEST(MixBatch, PairsMixedApartMatchTheWholeBatch) {
  const int64_t b = 6, c = 2, h = 8, w = 8, classes = 4;
  AugmentOptions o;
  o.mixup = 0.8f;
  o.cutmix = 1.f;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    MixCase whole(b, c, h, w, classes);
    ops::Rng r1(seed), r2(seed);
    const float lam = mix_batch(whole.images, whole.labels, classes, o, r1, whole.targets);
    const MixDraw draw = draw_mix(o, b, h, w, r2);
    EXPECT_EQ(static_cast<float>(draw.lam), lam);
    const int64_t sample = c * h * w;
    for (int64_t i = 0; i < b; ++i) {
      MixCase fresh(b, c, h, w, classes);
      std::vector<float> own(fresh.images.f32() + i * sample,
                             fresh.images.f32() + (i + 1) * sample);
      std::vector<float> mirror(fresh.images.f32() + (b - 1 - i) * sample,
                                fresh.images.f32() + (b - i) * sample);
      if (i < b - 1 - i)
        mix_pair(draw, own.data(), mirror.data(), c, h, w);
      else
        mix_pair(draw, mirror.data(), own.data(), c, h, w);
      EXPECT_EQ(std::memcmp(own.data(), whole.images.f32() + i * sample, sample * sizeof(float)), 0)
          << seed << " row " << i;
      std::vector<float> target(classes);
      mix_target(draw.lam, fresh.labels.i32()[i], fresh.labels.i32()[b - 1 - i], classes,
                 o.smoothing, target.data());
      EXPECT_EQ(
          std::memcmp(target.data(), whole.targets.f32() + i * classes, classes * sizeof(float)), 0)
          << seed << " row " << i;
    }
  }
}

}  // namespace

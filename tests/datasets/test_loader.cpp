// The batch loader: shapes, epoch permutations, determinism under (seed, epoch) whatever the
// prefetch depth, exact resumption, eval order, unreadable samples, errors from the thread, and
// destruction mid-epoch.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/error.h"
#include "datasets/dataset.h"
#include "datasets/loader.h"
#include "datasets/preprocess.h"
#include "util/batch_util.h"
#include "util/test_util.h"

using namespace vitk;
using namespace vitk::datasets;

namespace {

namespace fs = std::filesystem;

// n grey images of rows x cols: row 0 holds the index (n <= 256), the rest a texture that
// depends on it; label = index % classes. Indices in `bad` cannot be read; loading `throw_at`
// throws (a data error that is not per-sample); loads after the first `fast` sleep 1 ms.
class Synthetic : public Dataset {
 public:
  explicit Synthetic(int64_t n, int classes = 10, int rows = 12, int cols = 12)
      : n_(n), rows_(rows), cols_(cols) {
    for (int c = 0; c < classes; ++c) names_.push_back("c" + std::to_string(c));
  }
  std::set<int64_t> bad;
  int64_t throw_at = -1;
  int64_t fast = -1;
  mutable std::atomic<int64_t> loads{0};

  int64_t size() const override { return n_; }
  int label(int64_t i) const override { return static_cast<int>(i % names_.size()); }
  const std::vector<std::string>& class_names() const override { return names_; }
  bool load(int64_t i, cv::Mat& image, std::string& error) const override {
    const int64_t k = loads++;
    if (fast >= 0 && k >= fast) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (i == throw_at) throw Error("synthetic: disk on fire at " + std::to_string(i));
    if (bad.count(i)) {
      error = "synthetic corruption";
      return false;
    }
    image = cv::Mat(rows_, cols_, CV_8UC1);
    for (int y = 0; y < rows_; ++y)
      for (int x = 0; x < cols_; ++x)
        image.at<uint8_t>(y, x) = static_cast<uint8_t>(y == 0 ? i : (y * 13 + x * 29 + i) % 256);
    return true;
  }
  std::string describe(int64_t i) const override { return "synthetic[" + std::to_string(i) + "]"; }
  std::string source() const override { return "synthetic"; }

 private:
  int64_t n_;
  int rows_, cols_;
  std::vector<std::string> names_;
};

// Options whose batches show which sample each row is: no augmentation, the image unchanged
// (squash to its own size), mean 0 and std 1, so element 0 of a row is index / 255.
LoaderOptions plain(bool training, int64_t batch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.height = o.width = 12;
  o.channels = 1;
  o.training = training;
  o.seed = 5;
  o.augment.random_resized_crop = false;
  o.augment.hflip = 0.f;
  o.preprocess.resize = "squash";
  o.preprocess.mean = {0.f};
  o.preprocess.std = {1.f};
  o.prefetch = 2;
  return o;
}

// Everything the loader can do to a training batch.
LoaderOptions augmented(int prefetch) {
  LoaderOptions o;
  o.batch_size = 8;
  o.height = o.width = 10;
  o.channels = 3;
  o.training = true;
  o.seed = 17;
  o.augment.scale = {0.35f, 1.f};
  o.augment.reprob = 0.25f;
  o.augment.crop_padding = 2;
  o.augment.mixup = 0.8f;
  o.augment.cutmix = 1.f;
  o.prefetch = prefetch;
  return o;
}

// Sample i of `data` through the eval transform of `o` (o.channels, o.height x o.width).
std::vector<float> eval_image(const Dataset& data, int64_t i, const LoaderOptions& o) {
  cv::Mat m;
  std::string why;
  if (!data.load(i, m, why)) throw Error("cannot load sample " + std::to_string(i) + ": " + why);
  std::vector<float> out(static_cast<size_t>(o.channels * o.height * o.width));
  datasets::preprocess_image(datasets::to_channels(m, o.channels), o.preprocess, o.height, o.width,
                             out.data());
  return out;
}

std::vector<int64_t> indices(const Batch& b) {
  std::vector<int64_t> out;
  const int64_t stride = b.images.numel() / b.images.dim(0);
  for (int64_t i = 0; i < b.images.dim(0); ++i)
    out.push_back(std::lround(b.images.f32()[i * stride] * 255.f));
  return out;
}

using vitk::test::epoch;

using vitk::test::same;

TEST(Loader, TrainingEpochsArePermutationsWithoutTheLastPartialBatch) {
  Synthetic data(105);
  Loader loader(data, plain(true, 10));
  EXPECT_EQ(loader.batches_per_epoch(), 10);
  std::vector<int64_t> orders[2];
  for (int e = 0; e < 2; ++e) {
    const std::vector<Batch> batches = epoch(loader, e);
    ASSERT_EQ(batches.size(), 10u);
    for (size_t k = 0; k < batches.size(); ++k) {
      const Batch& b = batches[k];
      EXPECT_EQ(b.images.shape(), (Shape{10, 1, 12, 12}));
      EXPECT_EQ(b.images.dtype(), DType::f32);
      EXPECT_EQ(b.labels.shape(), (Shape{10}));
      EXPECT_EQ(b.labels.dtype(), DType::i32);
      EXPECT_TRUE(b.targets.empty());
      EXPECT_EQ(b.epoch, e);
      EXPECT_EQ(b.index, static_cast<int64_t>(k));
      const std::vector<int64_t> idx = indices(b);
      for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(b.labels.i32()[i], idx[i] % 10);
      orders[e].insert(orders[e].end(), idx.begin(), idx.end());
    }
    // 100 distinct samples of the 105: each at most once.
    EXPECT_EQ(std::set<int64_t>(orders[e].begin(), orders[e].end()).size(), 100u);
  }
  EXPECT_NE(orders[0], orders[1]);
  // Not the identity order.
  std::vector<int64_t> sorted = orders[0];
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, orders[0]);
}

TEST(Loader, AnEpochCoversEverySampleOnceWhenTheBatchDividesIt) {
  Synthetic data(96);
  Loader loader(data, plain(true, 12));
  std::vector<int64_t> all;
  for (const Batch& b : epoch(loader, 3)) {
    const std::vector<int64_t> idx = indices(b);
    all.insert(all.end(), idx.begin(), idx.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> want(96);
  for (int64_t i = 0; i < 96; ++i) want[i] = i;
  EXPECT_EQ(all, want);
}

TEST(Loader, EvalGoesInOrderAndKeepsTheLastPartialBatch) {
  Synthetic data(25);
  Loader loader(data, plain(false, 10));
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  const std::vector<Batch> batches = epoch(loader, 0);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].images.dim(0), 5);
  EXPECT_EQ(batches[2].labels.numel(), 5);
  std::vector<int64_t> all;
  for (const Batch& b : batches) {
    const std::vector<int64_t> idx = indices(b);
    all.insert(all.end(), idx.begin(), idx.end());
  }
  for (int64_t i = 0; i < 25; ++i) EXPECT_EQ(all[i], i);
}

TEST(Loader, EvalBatchesAreTheEvalTransform) {
  Synthetic data(7, 10, 30, 20);
  LoaderOptions o;
  o.batch_size = 4;
  o.height = o.width = 16;
  o.channels = 3;
  Loader loader(data, o);
  const std::vector<Batch> batches = epoch(loader, 0);
  ASSERT_EQ(batches.size(), 2u);
  std::vector<float> want(3 * 16 * 16);
  for (int64_t i = 0; i < 7; ++i) {
    cv::Mat m;
    std::string why;
    ASSERT_TRUE(data.load(i, m, why));
    datasets::preprocess_image(datasets::to_channels(m, 3), o.preprocess, 16, 16, want.data());
    const Batch& b = batches[i / 4];
    const float* got = b.images.f32() + (i % 4) * want.size();
    EXPECT_EQ(std::vector<float>(got, got + want.size()), want) << i;
    EXPECT_EQ(b.labels.i32()[i % 4], data.label(i));
  }
}

TEST(Loader, TrainingPipelineIsCropFlipNormalise) {
  // 16 x 16 images: a crop of scale 1 and ratio 1 is the whole image, so the training transform
  // is resize → mirror → normalise, and without the crop the eval transform then the mirror.
  Synthetic data(4, 4, 16, 16);
  for (bool crop : {true, false}) {
    SCOPED_TRACE(crop ? "random resized crop" : "eval transform");
    LoaderOptions o;
    o.batch_size = 4;
    o.height = o.width = 12;
    o.channels = 3;
    o.training = true;
    o.augment.random_resized_crop = crop;
    o.augment.scale = {1.f, 1.f};
    o.augment.ratio = {1.f, 1.f};
    o.augment.hflip = 1.f;
    Loader loader(data, o);
    const std::vector<Batch> batches = epoch(loader, 0);
    ASSERT_EQ(batches.size(), 1u);
    const Batch& b = batches[0];
    std::vector<float> want(3 * 12 * 12);
    for (int64_t row = 0; row < 4; ++row) {
      const int64_t i = b.labels.i32()[row];  // label = index here
      cv::Mat m;
      std::string why;
      ASSERT_TRUE(data.load(i, m, why));
      const cv::Mat rgb = datasets::to_channels(m, 3);
      if (crop) {
        cv::Mat resized;
        cv::resize(rgb, resized, cv::Size(12, 12), 0, 0,
                   datasets::parse_interpolation(o.preprocess.interpolation));
        cv::flip(resized, resized, 1);
        datasets::normalize_to_chw(resized, o.preprocess, want.data());
      } else {
        datasets::preprocess_image(rgb, o.preprocess, 12, 12, want.data());
        for (int64_t r = 0; r < 3 * 12; ++r)
          std::reverse(want.begin() + r * 12, want.begin() + (r + 1) * 12);
      }
      const float* got = b.images.f32() + row * want.size();
      EXPECT_EQ(std::vector<float>(got, got + want.size()), want) << i;
    }
  }
}

// Batch::mirrored says which rows the flip mirrored (a captioner swaps "left" and "right" in
// their captions): with hflip 0.5 each row is the eval image, mirrored exactly when it says so,
// and both kinds occur; with hflip 0 (or in evaluation) there is nothing to report.
TEST(Loader, BatchesSayWhichRowsTheFlipMirrored) {
  Synthetic data(16, 16, 12, 12);
  for (bool crop : {true, false}) {
    SCOPED_TRACE(crop ? "random resized crop" : "eval transform");
    LoaderOptions o = plain(true, 8);
    o.augment.random_resized_crop = crop;
    o.augment.scale = {1.f, 1.f};
    o.augment.ratio = {1.f, 1.f};
    o.augment.hflip = 0.5f;
    o.preprocess.interpolation = "nearest";  // 12 -> 12: the crop's resize changes nothing
    Loader loader(data, o);
    int mirrored = 0, kept = 0;
    const int64_t n = 12 * 12;
    for (int64_t ep = 0; ep < 2; ++ep)
      for (const Batch& b : epoch(loader, ep)) {
        ASSERT_EQ(b.mirrored.size(), 8u);
        for (int64_t row = 0; row < 8; ++row) {
          const int64_t i = b.labels.i32()[row];
          std::vector<float> want = eval_image(data, i, o);
          if (b.mirrored[static_cast<size_t>(row)]) {
            for (int64_t r = 0; r < 12; ++r)
              std::reverse(want.begin() + r * 12, want.begin() + (r + 1) * 12);
            ++mirrored;
          } else {
            ++kept;
          }
          const float* got = b.images.f32() + row * n;
          EXPECT_EQ(std::vector<float>(got, got + n), want) << "epoch " << ep << " image " << i;
        }
      }
    EXPECT_GT(mirrored, 0);
    EXPECT_GT(kept, 0);
  }
  LoaderOptions off = plain(true, 8);
  Loader unflipped(data, off);
  for (const Batch& b : epoch(unflipped, 0)) EXPECT_TRUE(b.mirrored.empty());
  LoaderOptions eval = plain(false, 8);
  eval.augment.hflip = 1.f;
  Loader evaluation(data, eval);
  for (const Batch& b : epoch(evaluation, 0)) EXPECT_TRUE(b.mirrored.empty());
}

// --crop-padding: each training image is the eval transform shifted by at most N pixels on each
// axis, with black (normalised) where the shift uncovered the border.
TEST(Loader, CropPaddingShiftsTheImageOverABlackBorder) {
  Synthetic data(8, 8, 12, 12);
  LoaderOptions o;
  o.batch_size = 8;
  o.height = o.width = 12;
  o.channels = 3;
  o.training = true;
  o.augment.random_resized_crop = false;
  o.augment.hflip = 0.f;
  o.augment.crop_padding = 3;
  Loader loader(data, o);
  const std::vector<Batch> batches = epoch(loader, 0);
  ASSERT_EQ(batches.size(), 1u);
  const Batch& b = batches[0];
  const int64_t n = 3 * 12 * 12;
  int shifted = 0;
  for (int64_t row = 0; row < 8; ++row) {
    const int64_t i = b.labels.i32()[row];
    const std::vector<float> plain_image = eval_image(data, i, o);
    const float* got = b.images.f32() + row * n;
    int matches = 0;
    for (int64_t dy = -3; dy <= 3; ++dy)
      for (int64_t dx = -3; dx <= 3; ++dx) {
        bool same = true;
        for (int64_t c = 0; c < 3 && same; ++c) {
          const float black = -o.preprocess.mean[c] / o.preprocess.std[c];
          for (int64_t y = 0; y < 12 && same; ++y)
            for (int64_t x = 0; x < 12 && same; ++x) {
              const int64_t sy = y + dy, sx = x + dx;
              const bool inside = sy >= 0 && sy < 12 && sx >= 0 && sx < 12;
              same = got[(c * 12 + y) * 12 + x] ==
                     (inside ? plain_image[(c * 12 + sy) * 12 + sx] : black);
            }
        }
        if (same) ++matches, shifted += (dy != 0 || dx != 0);
      }
    EXPECT_GE(matches, 1) << "row " << row << " is not a shift of image " << i;
  }
  EXPECT_GT(shifted, 0);
}

TEST(Loader, SameSeedAndEpochGiveIdenticalBatchesWhateverThePrefetch) {
  Synthetic data(64, 5);
  Loader a(data, augmented(1)), b(data, augmented(4));
  const std::vector<Batch> x = epoch(a, 2), y = epoch(b, 2);
  ASSERT_EQ(x.size(), 8u);
  ASSERT_EQ(y.size(), 8u);
  for (size_t k = 0; k < x.size(); ++k) {
    EXPECT_TRUE(same(x[k], y[k])) << k;
    EXPECT_EQ(x[k].images.shape(), (Shape{8, 3, 10, 10}));
    EXPECT_EQ(x[k].targets.shape(), (Shape{8, 5}));
    for (int64_t i = 0; i < 8; ++i) {
      double sum = 0;
      for (int64_t c = 0; c < 5; ++c) sum += x[k].targets.f32()[i * 5 + c];
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
  // Another epoch, or another seed: other batches.
  const std::vector<Batch> z = epoch(a, 3);
  EXPECT_FALSE(same(x[0].images, z[0].images));
  LoaderOptions other = augmented(2);
  other.seed = 18;
  Loader c(data, other);
  const std::vector<Batch> w = epoch(c, 2);
  EXPECT_FALSE(same(x[0].images, w[0].images));
  // The same loader replaying an epoch gives it again.
  const std::vector<Batch> again = epoch(a, 2);
  for (size_t k = 0; k < x.size(); ++k) EXPECT_TRUE(same(x[k], again[k])) << k;
}

TEST(Loader, ResumingMidEpochReproducesTheRemainingBatches) {
  Synthetic data(64, 5);
  data.bad = {3, 40};  // replacements must not depend on what an earlier batch met
  testing::internal::CaptureStderr();
  Loader full(data, augmented(3));
  const std::vector<Batch> whole = epoch(full, 1);
  Loader resumed(data, augmented(2));
  const std::vector<Batch> rest = epoch(resumed, 1, 5);
  testing::internal::GetCapturedStderr();
  ASSERT_EQ(whole.size(), 8u);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t k = 0; k < rest.size(); ++k) {
    EXPECT_EQ(rest[k].index, static_cast<int64_t>(k + 5));
    EXPECT_TRUE(same(rest[k], whole[k + 5])) << k;
  }
  // Starting at the end gives nothing; past it is an error.
  EXPECT_TRUE(epoch(resumed, 1, 8).empty());
  EXPECT_THROW(resumed.start_epoch(1, 9), Error);
}

TEST(Loader, RestartingAnEpochDropsTheOldOne) {
  Synthetic data(100);
  Loader loader(data, plain(true, 10));
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.epoch, 0);
  const std::vector<Batch> fresh = epoch(loader, 1);
  ASSERT_EQ(fresh.size(), 10u);
  for (size_t k = 0; k < fresh.size(); ++k) {
    EXPECT_EQ(fresh[k].epoch, 1);
    EXPECT_EQ(fresh[k].index, static_cast<int64_t>(k));
  }
  Synthetic other(100);
  Loader clean(other, plain(true, 10));
  const std::vector<Batch> want = epoch(clean, 1);
  for (size_t k = 0; k < fresh.size(); ++k) EXPECT_TRUE(same(fresh[k], want[k])) << k;
}

TEST(Loader, UnreadableSamplesAreReportedOnceAndReplaced) {
  Synthetic data(40);
  data.bad = {5, 17, 31};
  Loader loader(data, plain(true, 8));
  testing::internal::CaptureStderr();
  std::vector<std::vector<int64_t>> seen;
  for (int e = 0; e < 3; ++e)
    for (const Batch& b : epoch(loader, e)) {
      ASSERT_EQ(b.images.dim(0), 8);
      const std::vector<int64_t> idx = indices(b);
      for (int64_t i = 0; i < 8; ++i) {
        EXPECT_FALSE(data.bad.count(idx[i])) << idx[i];
        EXPECT_EQ(b.labels.i32()[i], idx[i] % 10);  // the replacement's own label
      }
    }
  const std::string err = testing::internal::GetCapturedStderr();
  for (int64_t i : data.bad) {
    const std::string line =
        "warning: skipping synthetic[" + std::to_string(i) + "]: synthetic corruption\n";
    const size_t at = err.find(line);
    ASSERT_NE(at, std::string::npos) << err;
    EXPECT_EQ(err.find(line, at + 1), std::string::npos) << "reported twice:\n" << err;
  }
  EXPECT_EQ(loader.skipped(), 3);
}

TEST(Loader, EvaluationLeavesUnreadableSamplesOutAndTrainingKeepsTheOrder) {
  Synthetic data(20);
  data.bad = {3, 8, 9, 10, 11};  // batch 2 (samples 8..11) has no readable sample
  testing::internal::CaptureStderr();
  Loader eval(data, plain(false, 4));
  const std::vector<Batch> batches = epoch(eval, 0);
  ASSERT_EQ(batches.size(), 5u);
  std::vector<int64_t> seen;
  for (const Batch& b : batches) {
    ASSERT_EQ(b.labels.numel(), b.images.dim(0));
    for (int64_t i = 0; i < b.images.dim(0); ++i) {
      const int64_t idx = std::lround(b.images.f32()[i * 144] * 255.f);
      EXPECT_EQ(b.labels.i32()[i], idx % 10);
      seen.push_back(idx);
    }
  }
  EXPECT_EQ(batches[0].images.dim(0), 3);
  EXPECT_EQ(batches[2].images.dim(0), 0);
  // Every readable sample once, in order; no unreadable one and no stand-in.
  std::vector<int64_t> want;
  for (int64_t i = 0; i < 20; ++i)
    if (!data.bad.count(i)) want.push_back(i);
  EXPECT_EQ(seen, want);
  EXPECT_EQ(eval.skipped(), 5);

  // Training fills an unreadable sample's row with another sample; the readable ones stay where a
  // clean dataset puts them.
  Synthetic clean(20);
  Loader noisy(data, plain(true, 4)), reference(clean, plain(true, 4));
  const std::vector<Batch> x = epoch(noisy, 1), y = epoch(reference, 1);
  testing::internal::GetCapturedStderr();
  ASSERT_EQ(x.size(), y.size());
  for (size_t k = 0; k < x.size(); ++k) {
    const std::vector<int64_t> got = indices(x[k]), order = indices(y[k]);
    for (size_t i = 0; i < order.size(); ++i)
      if (!data.bad.count(order[i])) {
        EXPECT_EQ(got[i], order[i]) << k << " " << i;
      }
  }
}

TEST(Loader, ImageFolderWithACorruptFileGoesOn) {
  const vitk::test::TempDir temp("vitk_loader");
  const fs::path dir = temp.path();
  for (int c = 0; c < 2; ++c) {
    fs::create_directories(dir / ("class" + std::to_string(c)));
    for (int i = 0; i < 4; ++i) {
      cv::Mat m(20 + i, 30, CV_8UC3, cv::Scalar(10 * i, 50 * c, 100));
      ASSERT_TRUE(cv::imwrite(
          (dir / ("class" + std::to_string(c)) / ("img" + std::to_string(i) + ".png")).string(),
          m));
    }
  }
  const fs::path corrupt = dir / "class1" / "notes.png";
  std::ofstream(corrupt) << "a text file renamed to .png";
  auto data = open_dataset(dir.string(), Split::train);
  ASSERT_EQ(data->size(), 9);
  LoaderOptions o = augmented(2);
  o.batch_size = 3;
  o.augment.mixup = o.augment.cutmix = 0.f;
  testing::internal::CaptureStderr();
  int64_t batches = 0;
  {
    Loader loader(*data, o);
    for (int e = 0; e < 2; ++e) batches += static_cast<int64_t>(epoch(loader, e).size());
    EXPECT_EQ(loader.skipped(), 1);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(batches, 6);
  EXPECT_NE(err.find("warning: skipping " + corrupt.string() + ": "), std::string::npos) << err;
}

TEST(Loader, ErrorsInTheThreadReachNext) {
  Synthetic data(30);
  data.throw_at = 12;
  Loader loader(data, plain(false, 5));
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  ASSERT_TRUE(loader.next(b));
  try {
    loader.next(b);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("disk on fire at 12"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(loader.next(b));  // the epoch ended with the error
  // The next epoch tries again (and fails at the same place).
  loader.start_epoch(1, 3);
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.index, 3);
}

TEST(Loader, NoReadableSampleIsAnErrorNotAHang) {
  Synthetic data(6);
  for (int64_t i = 0; i < 6; ++i) data.bad.insert(i);
  testing::internal::CaptureStderr();
  Loader loader(data, plain(true, 2));
  loader.start_epoch(0);
  Batch b;
  EXPECT_THROW(loader.next(b), Error);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(loader.skipped(), 6);
}

TEST(Loader, DestructionMidEpochStopsWithinABatch) {
  Synthetic data(2000);
  data.fast = 400;  // the first batch comes at once, later loads take 1 ms each
  {
    LoaderOptions o = plain(true, 400);
    o.prefetch = 1;
    Loader loader(data, o);
    loader.start_epoch(0);
    Batch b;
    ASSERT_TRUE(loader.next(b));
  }
  // The second batch (400 slow loads) was abandoned part-way, the rest never begun.
  EXPECT_LT(data.loads.load(), 800);
  // Destroying before anything was asked for, or before any epoch began, returns too.
  {
    Loader loader(data, plain(true, 400));
    loader.start_epoch(0);
  }
  { Loader idle(data, plain(true, 400)); }
}

TEST(Loader, OptionsAndSizesAreChecked) {
  Synthetic data(10);
  LoaderOptions o = plain(true, 0);
  EXPECT_THROW((Loader{data, o}), UsageError);
  o = plain(true, 11);
  EXPECT_THROW((Loader{data, o}), Error);  // fewer samples than one training batch
  o = plain(false, 11);
  Loader eval(data, o);
  EXPECT_EQ(eval.batches_per_epoch(), 1);
  Batch b;
  EXPECT_THROW(eval.next(b), Error);  // no epoch started
  o = plain(true, 2);
  o.augment.scale = {0.9f, 0.1f};
  EXPECT_THROW((Loader{data, o}), UsageError);
  o = plain(true, 2);
  o.augment.reprob = 1.5f;
  EXPECT_THROW((Loader{data, o}), UsageError);
  for (int64_t pad : {-1, 12}) {  // 12 x 12 images: a shift must leave some of the image
    o = plain(true, 2);
    o.augment.crop_padding = pad;
    try {
      Loader l(data, o);
      ADD_FAILURE() << "no error for --crop-padding " << pad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--crop-padding"), std::string::npos) << e.what();
    }
  }
  o = plain(true, 2);
  o.channels = 2;
  EXPECT_THROW((Loader{data, o}), UsageError);
  o = plain(true, 2);
  o.num_classes = 3;  // the dataset has 10
  EXPECT_THROW((Loader{data, o}), Error);
}

TEST(Loader, FashionMnistTrainingBatches) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto data = open_dataset(dir, Split::train);
  LoaderOptions o;
  o.batch_size = 128;
  o.height = o.width = 28;
  o.channels = 1;
  o.training = true;
  o.augment.scale = {0.35f, 1.f};
  o.augment.reprob = 0.25f;
  o.preprocess.mean = {0.2860f};
  o.preprocess.std = {0.3530f};
  Loader loader(*data, o);
  EXPECT_EQ(loader.batches_per_epoch(), 60000 / 128);
  loader.start_epoch(0);
  for (int k = 0; k < 3; ++k) {
    Batch b;
    ASSERT_TRUE(loader.next(b));
    ASSERT_EQ(b.images.shape(), (Shape{128, 1, 28, 28}));
    double sum = 0;
    for (int64_t i = 0; i < b.images.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(b.images.f32()[i]));
      sum += b.images.f32()[i];
    }
    // Normalised by the dataset's own mean and std: the batch mean is near 0.
    EXPECT_NEAR(sum / b.images.numel(), 0.0, 0.5);
    for (int64_t i = 0; i < 128; ++i) {
      EXPECT_GE(b.labels.i32()[i], 0);
      EXPECT_LT(b.labels.i32()[i], 10);
    }
  }
}

}  // namespace

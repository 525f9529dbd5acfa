// Loader shards (data-parallel training): the N ranks' training shards side by side are the
// unsharded batch bit for bit, with every augmentation and Mixup/CutMix setting, odd and even
// shard sizes, mid-epoch starts and unreadable samples; a batch size that N does not divide is
// refused; evaluation shards split the batches between them, each batch whole and unchanged.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "common/error.h"
#include "datasets/dataset.h"
#include "datasets/loader.h"
#include "util/batch_util.h"

using namespace vitk;
using namespace vitk::datasets;

namespace {

// n textured colour images of 14 x 16 (so crops, flips and shifts all show); label = index %
// classes; indices in `bad` cannot be read.
class Textures : public Dataset {
 public:
  explicit Textures(int64_t n, int classes = 7) : n_(n) {
    for (int c = 0; c < classes; ++c) names_.push_back("c" + std::to_string(c));
  }
  std::set<int64_t> bad;

  int64_t size() const override { return n_; }
  int label(int64_t i) const override { return static_cast<int>(i % names_.size()); }
  const std::vector<std::string>& class_names() const override { return names_; }
  bool load(int64_t i, cv::Mat& image, std::string& error) const override {
    if (bad.count(i)) {
      error = "corrupt";
      return false;
    }
    image = cv::Mat(14, 16, CV_8UC3);
    for (int y = 0; y < 14; ++y)
      for (int x = 0; x < 16; ++x)
        for (int c = 0; c < 3; ++c)
          image.ptr<uint8_t>(y)[x * 3 + c] =
              static_cast<uint8_t>((y * 11 + x * 5 * (c + 1) + i * 37) % 256);
    return true;
  }
  std::string describe(int64_t i) const override { return "textures[" + std::to_string(i) + "]"; }
  std::string source() const override { return "textures"; }

 private:
  int64_t n_;
  std::vector<std::string> names_;
};

enum class Mixing { none, mixup, cutmix, both };

LoaderOptions training(int64_t batch, Mixing mixing) {
  LoaderOptions o;
  o.batch_size = batch;
  o.height = o.width = 10;
  o.channels = 3;
  o.training = true;
  o.seed = 23;
  o.augment.scale = {0.3f, 1.f};
  o.augment.reprob = 0.3f;
  o.augment.crop_padding = 2;
  o.augment.smoothing = 0.1f;
  o.augment.mixup = mixing == Mixing::mixup || mixing == Mixing::both ? 0.8f : 0.f;
  o.augment.cutmix = mixing == Mixing::cutmix || mixing == Mixing::both ? 1.f : 0.f;
  if (mixing == Mixing::both) {
    o.augment.mixup_switch_prob = 0.5f;
    o.augment.mixup_prob = 0.8f;  // some batches left alone (λ = 1)
  }
  o.prefetch = 2;
  return o;
}

using vitk::test::epoch;

// The tensors' rows one after another (all of one dtype and trailing shape).
Tensor concat(const std::vector<const Tensor*>& parts) {
  if (parts[0]->empty()) return Tensor();
  Shape shape = parts[0]->shape();
  shape[0] = 0;
  for (const Tensor* t : parts) shape[0] += t->dim(0);
  Tensor out(shape, parts[0]->dtype());
  auto* dst = static_cast<char*>(out.data());
  for (const Tensor* t : parts) {
    std::memcpy(dst, t->data(), t->nbytes());
    dst += t->nbytes();
  }
  return out;
}

using vitk::test::same;

// Runs the epoch on every shard of `ranks` and checks that the shards of each batch, in rank
// order, are the unsharded batch. Returns how many rows of `whole` have mixed targets.
int64_t expect_shards_make_the_batch(const Dataset& data, const LoaderOptions& options, int ranks,
                                     const std::vector<Batch>& whole, int64_t e,
                                     int64_t first = 0) {
  std::vector<std::vector<Batch>> shards;
  for (int r = 0; r < ranks; ++r) {
    LoaderOptions o = options;
    o.shard = {r, ranks};
    Loader loader(data, o);
    EXPECT_EQ(loader.batches_per_epoch(), static_cast<int64_t>(whole.size()) + first);
    shards.push_back(epoch(loader, e, first));
    EXPECT_EQ(shards.back().size(), whole.size()) << "rank " << r;
  }
  int64_t mixed = 0;
  for (size_t k = 0; k < whole.size(); ++k) {
    std::vector<const Tensor*> images, labels, targets;
    for (int r = 0; r < ranks; ++r) {
      if (k >= shards[r].size()) return mixed;
      const Batch& s = shards[r][k];
      EXPECT_EQ(s.images.dim(0), options.batch_size / ranks);
      EXPECT_EQ(s.epoch, e);
      EXPECT_EQ(s.index, static_cast<int64_t>(k) + first);
      images.push_back(&s.images);
      labels.push_back(&s.labels);
      targets.push_back(&s.targets);
    }
    Batch joined;
    joined.images = concat(images);
    joined.labels = concat(labels);
    joined.targets = concat(targets);
    joined.epoch = e;
    joined.index = static_cast<int64_t>(k) + first;
    EXPECT_TRUE(same(joined, whole[k]))
        << ranks << " ranks, epoch " << e << ", batch " << k + first;
    const Tensor& t = whole[k].targets;
    if (!t.empty())
      for (int64_t i = 0; i < t.dim(0); ++i) {
        int64_t above = 0;  // classes holding more than the smoothing's share: 2 when mixed
        for (int64_t c = 0; c < t.dim(1); ++c) above += t.f32()[i * t.dim(1) + c] > 0.1f;
        mixed += above > 1;
      }
  }
  return mixed;
}

struct ShardCase {
  Mixing mixing;
  int64_t batch;
  std::vector<int> ranks;
};

void PrintTo(const ShardCase& c, std::ostream* out) {
  *out << "mixing " << static_cast<int>(c.mixing) << ", batch " << c.batch << ", ranks";
  for (int n : c.ranks) *out << " " << n;
}

std::string case_name(const testing::TestParamInfo<ShardCase>& info) {
  const char* const mixings[] = {"plain", "mixup", "cutmix", "both"};
  return std::string(mixings[static_cast<int>(info.param.mixing)]) + "_batch" +
         std::to_string(info.param.batch);
}

class LoaderShards : public testing::TestWithParam<ShardCase> {};

TEST_P(LoaderShards, ShardsSideBySideAreTheUnshardedBatchBitForBit) {
  const ShardCase& p = GetParam();
  Textures data(5 * p.batch + 3);
  data.bad = {4, 19};  // replacements, in a shard's rows and in the mirrors it decodes
  const LoaderOptions o = training(p.batch, p.mixing);
  testing::internal::CaptureStderr();
  Loader unsharded(data, o);
  int64_t mixed = 0;
  for (int64_t e : {0, 1}) {
    const std::vector<Batch> whole = epoch(unsharded, e);
    ASSERT_EQ(whole.size(), 5u);
    for (int n : p.ranks) mixed += expect_shards_make_the_batch(data, o, n, whole, e);
  }
  // Starting mid-epoch (a resumed run).
  const std::vector<Batch> rest = epoch(unsharded, 1, 3);
  ASSERT_EQ(rest.size(), 2u);
  for (int n : p.ranks) expect_shards_make_the_batch(data, o, n, rest, 1, 3);
  testing::internal::GetCapturedStderr();
  if (p.mixing == Mixing::none)
    EXPECT_EQ(mixed, 0);
  else
    EXPECT_GT(mixed, 0) << "no batch was mixed: the test would not see the mirrors";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LoaderShards,
    testing::Values(
        // 8 rows: shards of 4 and 2; 12: 6 and 3 (odd); 6 on 2 ranks: 3; 9 on 3 ranks: an odd
        // batch whose middle row is its own mirror, in the middle shard with its pairs.
        ShardCase{Mixing::none, 8, {2, 4}}, ShardCase{Mixing::none, 12, {2, 4}},
        ShardCase{Mixing::mixup, 8, {2, 4}}, ShardCase{Mixing::mixup, 12, {2, 4}},
        ShardCase{Mixing::cutmix, 8, {2, 4}}, ShardCase{Mixing::cutmix, 12, {2, 4}},
        ShardCase{Mixing::both, 8, {2, 4}}, ShardCase{Mixing::both, 12, {2, 4}},
        ShardCase{Mixing::both, 6, {2, 3}}, ShardCase{Mixing::mixup, 9, {3}},
        ShardCase{Mixing::cutmix, 9, {3}}),
    case_name);

TEST(LoaderShards, ABatchSizeTheRanksDoNotDivideIsRefused) {
  Textures data(40);
  LoaderOptions o = training(10, Mixing::none);
  o.shard = {1, 4};
  try {
    Loader loader(data, o);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--batch-size 10"), std::string::npos) << what;
    EXPECT_NE(what.find("4 ranks"), std::string::npos) << what;
  }
  for (Shard bad : {Shard{-1, 2}, Shard{2, 2}, Shard{0, 0}}) {
    o.shard = bad;
    EXPECT_THROW((Loader{data, o}), UsageError) << bad.index << " of " << bad.count;
  }
  // Evaluation shards take whole batches: any batch size will do.
  o.training = false;
  o.shard = {1, 4};
  Loader eval(data, o);
  EXPECT_EQ(eval.batches_per_epoch(), 1);  // 4 batches of 10 rows: rank 1 has batch 1
}

TEST(LoaderShards, EvaluationShardsCoverEveryBatchOnceUnchanged) {
  Textures data(27);
  LoaderOptions o;
  o.batch_size = 4;  // 7 batches, the last of 3
  o.height = o.width = 10;
  o.channels = 3;
  o.prefetch = 2;
  Loader unsharded(data, o);
  const std::vector<Batch> whole = epoch(unsharded, 2);
  ASSERT_EQ(whole.size(), 7u);
  for (int n : {2, 3, 4, 8}) {
    std::vector<int> seen(whole.size(), 0);
    for (int r = 0; r < n; ++r) {
      o.shard = {r, n};
      Loader loader(data, o);
      int64_t want = 0;
      for (int64_t k = r; k < 7; k += n) ++want;
      EXPECT_EQ(loader.batches_per_epoch(), want) << r << " of " << n;
      const std::vector<Batch> mine = epoch(loader, 2);
      EXPECT_EQ(static_cast<int64_t>(mine.size()), want);
      for (size_t j = 0; j < mine.size(); ++j) {
        const Batch& b = mine[j];
        EXPECT_EQ(b.index, static_cast<int64_t>(j) * n + r);
        ASSERT_GE(b.index, 0);
        ASSERT_LT(b.index, 7);
        ++seen[static_cast<size_t>(b.index)];
        EXPECT_TRUE(same(b, whole[static_cast<size_t>(b.index)])) << "batch " << b.index;
      }
      // first_batch counts this shard's batches.
      if (want > 1) {
        const std::vector<Batch> rest = epoch(loader, 2, 1);
        ASSERT_EQ(static_cast<int64_t>(rest.size()), want - 1);
        EXPECT_EQ(rest[0].index, n + r);
        EXPECT_TRUE(same(rest[0], whole[static_cast<size_t>(n + r)]));
      }
      EXPECT_THROW(loader.start_epoch(2, want + 1), Error);
    }
    for (size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k], 1) << n << " ranks, batch " << k;
  }
}

}  // namespace

// The batch loader: one background thread builds batches in order, up to `prefetch` ahead of the
// consumer. Every random draw comes from an Rng keyed by (seed, epoch, sample) or (seed, epoch,
// batch), so a batch is a pure function of those and of the dataset: thread timing, prefetch depth
// and where a run resumes cannot change it.
#include "datasets/loader.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <iostream>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include <opencv2/core.hpp>

#include "common/error.h"

namespace vitk::datasets {
namespace {

// Domain tags keep the order, sample, replacement and mixing streams apart for one seed.
enum Stream : uint64_t { kOrder = 1, kSample = 2, kReplace = 3, kMix = 4 };

uint64_t stream_key(uint64_t seed, Stream stream, int64_t epoch, int64_t item = 0) {
  uint64_t k = ops::Rng::hash(seed, stream);
  k = ops::Rng::hash(k, static_cast<uint64_t>(epoch));
  return ops::Rng::hash(k, static_cast<uint64_t>(item));
}

// Random draws tried before the replacement search walks the dataset in order.
constexpr int kRandomReplacements = 16;

void check_range(float v, float lo, float hi, const char* option) {
  if (!(v >= lo && v <= hi))
    throw UsageError(std::string(option) + " must be in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got " + std::to_string(v));
}

void check_pair(const std::array<float, 2>& p, const char* option) {
  if (!(p[0] > 0.f && p[0] <= p[1] && std::isfinite(p[1])))
    throw UsageError(std::string(option) + " must be two positive numbers, min <= max, got " +
                     std::to_string(p[0]) + "," + std::to_string(p[1]));
}

// Mirrors every row of a [C, H, W] image.
void flip_chw(float* chw, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) std::reverse(chw + r * width, chw + (r + 1) * width);
}

}  // namespace

struct Loader::Impl {
  const Dataset& data;
  LoaderOptions opt;
  int64_t classes = 0;
  int64_t per_epoch = 0;
  int interpolation = 0;
  std::vector<float> black;  // a black pixel, normalised: random_translate's fill

  std::mutex mu;
  std::condition_variable work_cv, ready_cv;
  // Guarded by mu.
  bool stop = false, started = false;
  uint64_t generation = 0;  // bumped by start_epoch: work of an older one is dropped
  int64_t epoch = 0, produce = 0, consume = 0;
  std::shared_ptr<const std::vector<int64_t>> order;  // training only
  std::deque<Batch> ready;
  std::exception_ptr error;
  // Read by the worker between samples, so that stopping or restarting never waits for a batch.
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> live_generation{0};
  // Worker only, apart from the count.
  std::unordered_set<int64_t> bad;
  std::atomic<int64_t> bad_count{0};

  std::thread worker;

  Impl(const Dataset& d, LoaderOptions o) : data(d), opt(std::move(o)) {}

  void run();
  bool build(int64_t ep, int64_t index, const std::vector<int64_t>* ord, uint64_t gen,
             Batch& batch);
  bool mix(int64_t ep, int64_t index, int64_t lo, const std::vector<int64_t>& ord, uint64_t gen,
           Batch& batch);
  int64_t prepare_sample(int64_t ep, int64_t idx, float* dst, bool* mirrored = nullptr);
  int32_t checked_label(int64_t src) const;
  bool try_sample(int64_t src, ops::Rng rng, float* dst, std::string& why, bool* mirrored) const;
  int64_t replacement(int64_t ep, int64_t idx, int64_t k) const;
};

Loader::Loader(const Dataset& data, LoaderOptions options)
    : impl_(std::make_unique<Impl>(data, std::move(options))) {
  Impl& s = *impl_;
  const LoaderOptions& o = s.opt;
  if (o.batch_size <= 0) throw UsageError("batch_size must be positive");
  if (o.height <= 0 || o.width <= 0 || o.height > 65535 || o.width > 65535)
    throw UsageError("image size " + std::to_string(o.height) + "x" + std::to_string(o.width) +
                     " is not a valid model input size");
  if (o.channels != 1 && o.channels != 3)
    throw UsageError("channels must be 1 or 3, not " + std::to_string(o.channels));
  if (o.prefetch < 1) throw UsageError("prefetch must be at least 1");
  if (o.shard.count < 1 || o.shard.index < 0 || o.shard.index >= o.shard.count)
    throw UsageError("shard " + std::to_string(o.shard.index) + " of " +
                     std::to_string(o.shard.count) + " is not a rank of the run");
  if (o.training && o.batch_size % o.shard.count != 0)
    throw UsageError("--batch-size " + std::to_string(o.batch_size) + " is not a multiple of the " +
                     std::to_string(o.shard.count) + " ranks (each rank takes an equal share)");
  o.preprocess.validate(o.channels);
  s.interpolation = datasets::parse_interpolation(o.preprocess.interpolation);
  for (int c = 0; c < o.channels; ++c)
    s.black.push_back(-o.preprocess.mean[static_cast<size_t>(c)] /
                      o.preprocess.std[static_cast<size_t>(c)]);
  if (o.training) {
    const AugmentOptions& a = o.augment;
    check_pair(a.scale, "--scale");
    check_pair(a.ratio, "--ratio");
    check_range(a.hflip, 0.f, 1.f, "--hflip");
    check_range(a.reprob, 0.f, 1.f, "--reprob");
    if (a.crop_padding < 0 || a.crop_padding >= std::min(o.height, o.width))
      throw UsageError("--crop-padding must be in [0, " +
                       std::to_string(std::min(o.height, o.width)) + ") for " +
                       std::to_string(o.height) + "x" + std::to_string(o.width) + " images, got " +
                       std::to_string(a.crop_padding));
    check_range(a.mixup, 0.f, 1e6f, "--mixup");
    check_range(a.cutmix, 0.f, 1e6f, "--cutmix");
    check_range(a.mixup_prob, 0.f, 1.f, "--mixup-prob");
    check_range(a.mixup_switch_prob, 0.f, 1.f, "--mixup-switch-prob");
    check_range(a.smoothing, 0.f, 1.f, "--smoothing");
  }
  const int64_t n = data.size();
  if (n <= 0) throw Error(data.source() + ": the dataset has no samples");
  const int64_t data_classes = static_cast<int64_t>(data.class_names().size());
  s.classes = o.num_classes > 0 ? o.num_classes : data_classes;
  if (s.classes < data_classes)
    throw Error(data.source() + ": the dataset has " + std::to_string(data_classes) +
                " classes but the model has " + std::to_string(s.classes));
  if (o.training) {
    s.per_epoch = n / o.batch_size;
    if (s.per_epoch == 0)
      throw Error(data.source() + ": " + std::to_string(n) +
                  " samples are fewer than one training batch of " + std::to_string(o.batch_size) +
                  " (training drops the last partial batch)");
  } else {
    // Whole batches index, index + count, ... of the unsharded ones.
    const int64_t all = (n + o.batch_size - 1) / o.batch_size;
    s.per_epoch = all > o.shard.index ? (all - o.shard.index - 1) / o.shard.count + 1 : 0;
  }
  s.worker = std::thread([&s] { s.run(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
    impl_->stopping = true;
  }
  impl_->work_cv.notify_all();
  impl_->worker.join();
}

int64_t Loader::batches_per_epoch() const {
  return impl_->per_epoch;
}

int64_t Loader::skipped() const {
  return impl_->bad_count.load();
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  Impl& s = *impl_;
  if (epoch < 0) throw Error("start_epoch: epoch " + std::to_string(epoch) + " is negative");
  if (first_batch < 0 || first_batch > s.per_epoch)
    throw Error("start_epoch: batch " + std::to_string(first_batch) + " is outside 0.." +
                std::to_string(s.per_epoch) + " for " + s.data.source());
  std::shared_ptr<std::vector<int64_t>> order;
  if (s.opt.training) {
    // Fisher–Yates from an Rng of (seed, epoch) alone.
    const int64_t n = s.data.size();
    order = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) (*order)[i] = i;
    ops::Rng rng(stream_key(s.opt.seed, kOrder, epoch));
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(i + 1));
      std::swap((*order)[i], (*order)[j]);
    }
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.generation;
    s.live_generation = s.generation;
    s.epoch = epoch;
    s.produce = s.consume = first_batch;
    s.order = std::move(order);
    s.ready.clear();
    s.error = nullptr;
    s.started = true;
  }
  s.work_cv.notify_all();
}

bool Loader::next(Batch& batch) {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.started) throw Error("Loader::next: call start_epoch first");
  if (s.consume >= s.per_epoch) return false;
  s.ready_cv.wait(lock, [&] { return !s.ready.empty() || s.error; });
  if (!s.ready.empty()) {
    batch = std::move(s.ready.front());
    s.ready.pop_front();
    ++s.consume;
    lock.unlock();
    s.work_cv.notify_all();
    return true;
  }
  // The batch after the last good one failed: the epoch ends with the error.
  std::exception_ptr error = s.error;
  s.error = nullptr;
  s.consume = s.produce = s.per_epoch;
  std::rethrow_exception(error);
}

void Loader::Impl::run() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    work_cv.wait(lock, [&] {
      return stop || (started && !error && produce < per_epoch &&
                      static_cast<int64_t>(ready.size()) < opt.prefetch);
    });
    if (stop) return;
    const uint64_t gen = generation;
    const int64_t ep = epoch, local = produce++;
    // A training shard has every batch; an evaluation shard every count-th from its index.
    const int64_t index = opt.training ? local : local * opt.shard.count + opt.shard.index;
    const std::shared_ptr<const std::vector<int64_t>> ord = order;
    lock.unlock();
    Batch batch;
    std::exception_ptr failure;
    bool done = false;
    try {
      done = build(ep, index, ord.get(), gen, batch);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (gen != generation || (!done && !failure)) continue;  // abandoned
    if (failure)
      error = failure;
    else
      ready.push_back(std::move(batch));
    ready_cv.notify_all();
  }
}

bool Loader::Impl::build(int64_t ep, int64_t index, const std::vector<int64_t>* ord, uint64_t gen,
                         Batch& batch) {
  const int64_t n = data.size();
  const int64_t first = index * opt.batch_size;  // the global batch's first position
  // A training shard's rows are [lo, lo + b) of the global batch.
  const int64_t b =
      opt.training ? opt.batch_size / opt.shard.count : std::min(opt.batch_size, n - first);
  const int64_t lo = opt.training ? opt.shard.index * b : 0;
  const int64_t c = opt.channels, h = opt.height, w = opt.width;
  batch.images = Tensor({b, c, h, w});
  batch.labels = Tensor({b}, DType::i32);
  batch.targets = Tensor();
  const bool report_mirrors = opt.training && opt.augment.hflip > 0.f;
  batch.mirrored.assign(report_mirrors ? static_cast<size_t>(b) : 0, 0);
  batch.epoch = ep;
  batch.index = index;
  float* images = batch.images.f32();
  int32_t* labels = batch.labels.i32();
  int64_t rows = 0;  // filled; evaluation leaves out the samples it cannot read
  for (int64_t i = 0; i < b; ++i) {
    if (stopping.load(std::memory_order_relaxed) || live_generation.load() != gen) return false;
    const int64_t pos = first + lo + i;
    const int64_t idx = ord ? (*ord)[pos] : pos;
    bool mirrored = false;
    const int64_t src = prepare_sample(ep, idx, images + rows * c * h * w, &mirrored);
    if (src < 0) continue;
    if (report_mirrors) batch.mirrored[static_cast<size_t>(rows)] = mirrored;
    labels[rows++] = checked_label(src);
  }
  if (rows < b) {
    batch.images = batch.images.rows(0, rows);
    batch.labels = batch.labels.rows(0, rows);
  }
  if (opt.training && opt.augment.mixing()) {
    if (opt.shard.count == 1) {
      ops::Rng rng(stream_key(opt.seed, kMix, ep, index));
      mix_batch(batch.images, batch.labels, classes, opt.augment, rng, batch.targets);
    } else if (!mix(ep, index, lo, *ord, gen, batch)) {
      return false;
    }
  }
  return true;
}

// Mixup/CutMix on a training shard: rows [lo, lo + b) of global batch `index`, each mixed with its
// mirror B−1−i, as mix_batch does on the whole batch. A mirror in the shard is mixed in place
// with its pair (once); one in another shard is decoded here into a scratch row with the same
// keyed draws, so the result is the unsharded row bit for bit. False when the work is abandoned.
bool Loader::Impl::mix(int64_t ep, int64_t index, int64_t lo, const std::vector<int64_t>& ord,
                       uint64_t gen, Batch& batch) {
  const int64_t big = opt.batch_size, first = index * big, b = batch.images.dim(0);
  const int64_t c = opt.channels, h = opt.height, w = opt.width, sample = c * h * w;
  ops::Rng rng(stream_key(opt.seed, kMix, ep, index));
  const MixDraw draw = draw_mix(opt.augment, big, h, w, rng);
  Tensor targets({b, classes}, DType::f32);
  std::vector<float> scratch(draw.apply ? static_cast<size_t>(sample) : 0);
  float* images = batch.images.f32();
  const int32_t* labels = batch.labels.i32();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t row = lo + i, mirror = big - 1 - row;
    float* x = images + i * sample;
    int32_t mirror_label = labels[i];
    if (mirror >= lo && mirror < lo + b) {
      mirror_label = labels[mirror - lo];
      if (row < mirror) mix_pair(draw, x, images + (mirror - lo) * sample, c, h, w);
    } else if (draw.apply) {
      if (stopping.load(std::memory_order_relaxed) || live_generation.load() != gen) return false;
      mirror_label = checked_label(prepare_sample(ep, ord[first + mirror], scratch.data()));
      if (row < mirror)
        mix_pair(draw, x, scratch.data(), c, h, w);
      else
        mix_pair(draw, scratch.data(), x, c, h, w);
    }
    // Else λ = 1 (draw_mix: apply is false only then, B being a multiple of N > 1): the mirror's
    // weight 1 − λ is 0 and its label adds +0 to the row, so the row's own label stands in for it
    // and the mirror is not decoded.
    mix_target(draw.lam, labels[i], mirror_label, classes, opt.augment.smoothing,
               targets.f32() + i * classes);
  }
  batch.targets = std::move(targets);
  return true;
}

int32_t Loader::Impl::checked_label(int64_t src) const {
  const int32_t label = data.label(src);
  if (label < 0 || label >= classes)
    throw Error(data.describe(src) + ": label " + std::to_string(label) + " is outside 0.." +
                std::to_string(classes - 1));
  return label;
}

// Writes sample idx at dst and returns idx. When it cannot be read: in training, writes a
// replacement and returns its index; in evaluation, returns -1 (the sample is left out, so that
// every image counted is one that was read).
int64_t Loader::Impl::prepare_sample(int64_t ep, int64_t idx, float* dst, bool* mirrored) {
  // The augmentation draws belong to the position (idx), whichever sample ends up filling it.
  const ops::Rng rng(stream_key(opt.seed, kSample, ep, idx));
  const int64_t n = data.size();
  int64_t src = idx;
  for (int64_t k = 0;; ++k) {
    if (!bad.count(src)) {
      std::string why;
      if (try_sample(src, rng, dst, why, mirrored)) return src;
      bad.insert(src);
      bad_count = static_cast<int64_t>(bad.size());
      std::cerr << ("warning: skipping " + data.describe(src) + ": " + why + "\n") << std::flush;
    }
    if (!opt.training) return -1;
    if (k >= kRandomReplacements + n)
      throw Error(data.source() + ": none of its " + std::to_string(n) +
                  " samples can be read; see the warnings above");
    src = replacement(ep, idx, k);
  }
}

// The k-th stand-in for an unreadable sample idx: a few random draws of (seed, epoch, idx), then
// the samples after idx in order, so the search ends.
int64_t Loader::Impl::replacement(int64_t ep, int64_t idx, int64_t k) const {
  const uint64_t n = static_cast<uint64_t>(data.size());
  if (k < kRandomReplacements)
    return static_cast<int64_t>(
        ops::Rng::hash(stream_key(opt.seed, kReplace, ep, idx), static_cast<uint64_t>(k)) % n);
  return static_cast<int64_t>((static_cast<uint64_t>(idx) + 1 + (k - kRandomReplacements)) % n);
}

// load → to_channels → (training) crop, flip, normalise, shift (--crop-padding), erase | (eval)
// the eval transform.
// OpenCV's exceptions here come from the sample's data, so they make it unreadable; anything else
// propagates.
bool Loader::Impl::try_sample(int64_t src, ops::Rng rng, float* dst, std::string& why,
                              bool* mirrored) const {
  cv::Mat decoded;
  try {
    if (!data.load(src, decoded, why)) return false;
    if (decoded.empty()) {
      why = "empty image";
      return false;
    }
    const cv::Mat image = datasets::to_channels(decoded, opt.channels);
    const int64_t c = opt.channels, h = opt.height, w = opt.width;
    if (!opt.training) {
      datasets::preprocess_image(image, opt.preprocess, h, w, dst);
      return true;
    }
    const AugmentOptions& a = opt.augment;
    if (a.random_resized_crop) {
      cv::Mat crop = random_resized_crop(image, h, w, a.scale, a.ratio, interpolation, rng);
      const bool flip = random_hflip(crop, a.hflip, rng);
      if (mirrored) *mirrored = flip;
      datasets::normalize_to_chw(crop, opt.preprocess, dst);
    } else {
      datasets::preprocess_image(image, opt.preprocess, h, w, dst);
      const bool flip = rng.uniform() < a.hflip;  // the draw random_hflip makes
      if (flip) flip_chw(dst, c * h, w);
      if (mirrored) *mirrored = flip;
    }
    random_translate(dst, c, h, w, a.crop_padding, black.data(), rng);
    random_erasing(dst, c, h, w, a.reprob, rng);
    return true;
  } catch (const cv::Exception& e) {
    why = std::string("cannot process image: ") + e.what();
    return false;
  }
}

}  // namespace vitk::datasets

// Batched classification: one decode thread fills batch buffers from a small pool while the
// calling thread runs the model on the previous batch.
#include "vit/classify.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "common/error.h"
#include "common/finite.h"
#include "common/timer.h"

namespace vitk::vit {
namespace {

struct Slot {
  Tensor images;  // f32 [batch_size, C, H, W]; the first `rows` are filled
  int64_t rows = 0;
  std::vector<ImageResult> items;  // the batch's files in input order; the readable ones are
                                   // the rows, in the same order
};

class Pipeline {
 public:
  Pipeline(const std::vector<std::string>& paths, const ClassifyOptions& options, int64_t channels,
           int64_t height, int64_t width)
      : paths_(paths), options_(options), channels_(channels), height_(height), width_(width) {
    slots_.resize(static_cast<size_t>(options.prefetch) + 1);
    for (Slot& s : slots_) {
      s.images = Tensor({options.batch_size, channels, height, width});
      free_.push_back(&s);
    }
    thread_ = std::thread([this] { produce(); });
  }
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // The next prepared batch, nullptr after the last; rethrows a failure of the decode thread
  // itself (not of a file) once the batches before it are consumed.
  Slot* next() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !ready_.empty() || done_; });
    if (!ready_.empty()) {
      Slot* s = ready_.front();
      ready_.pop_front();
      return s;
    }
    if (failure_) std::rethrow_exception(failure_);
    return nullptr;
  }
  void release(Slot* s) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(s);
    }
    changed_.notify_all();
  }
  double prepare_seconds() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return prepare_seconds_;
  }

 private:
  void produce() {
    try {
      const int64_t n = static_cast<int64_t>(paths_.size());
      for (int64_t start = 0; start < n; start += options_.batch_size) {
        Slot* s = nullptr;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [this] { return !free_.empty() || stop_; });
          if (stop_) return;
          s = free_.front();
          free_.pop_front();
        }
        Timer timer;
        fill(*s, start, std::min(n, start + options_.batch_size));
        {
          std::lock_guard<std::mutex> lock(mutex_);
          prepare_seconds_ += timer.seconds();
          ready_.push_back(s);
        }
        changed_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      failure_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    changed_.notify_all();
  }

  void fill(Slot& s, int64_t begin, int64_t end) {
    const int64_t image_floats = channels_ * height_ * width_;
    s.items.clear();
    s.rows = 0;
    for (int64_t i = begin; i < end; ++i) {
      ImageResult r;
      r.index = i;
      r.path = paths_[static_cast<size_t>(i)];
      if (read_image_file(r.path, channels_, height_, width_, options_.preprocess, options_.decode,
                          s.images.f32() + s.rows * image_floats, r.error))
        ++s.rows;
      s.items.push_back(std::move(r));
    }
  }

  const std::vector<std::string>& paths_;
  const ClassifyOptions& options_;
  const int64_t channels_, height_, width_;
  std::vector<Slot> slots_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Slot*> free_, ready_;
  bool stop_ = false, done_ = false;
  std::exception_ptr failure_;
  double prepare_seconds_ = 0;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace

bool read_image_file(const std::string& path, int64_t channels, int64_t height, int64_t width,
                     const datasets::Preprocess& p, const datasets::DecodeOptions& decode,
                     float* dst, std::string& error) {
  cv::Mat decoded;
  if (!datasets::decode_image_file(path, decoded, error, decode)) {
    if (error.empty()) error = "cannot decode";
    return false;
  }
  try {
    const cv::Mat image = datasets::to_channels(decoded, static_cast<int>(channels));
    datasets::preprocess_image(image, p, height, width, dst);
    return true;
  } catch (const std::exception& e) {
    error = std::string("cannot preprocess: ") + e.what();
    return false;
  }
}

void require_finite_logits(const Tensor& logits, const std::string& what,
                           const std::string& model) {
  const int64_t bad = first_non_finite(logits.f32(), logits.numel());
  if (bad < 0) return;
  const std::string whose = model.empty() ? "the model's logits" : "the logits of " + model;
  throw Error(what + ": " + whose + " are not finite (" + std::to_string(logits.f32()[bad]) +
              "): its weights overflow on this input (a damaged file?), so there is no score to " +
              "give");
}

void top_k(const float* logits, int64_t classes, int k, std::vector<int>& indices,
           std::vector<float>& probabilities) {
  double top = -INFINITY;
  for (int64_t i = 0; i < classes; ++i) top = std::max(top, static_cast<double>(logits[i]));
  std::vector<double> p(static_cast<size_t>(classes));
  double sum = 0;
  for (int64_t i = 0; i < classes; ++i) sum += p[i] = std::exp(logits[i] - top);
  for (double& v : p) v /= sum;
  k = static_cast<int>(std::min<int64_t>(k, classes));
  indices.resize(static_cast<size_t>(classes));
  std::iota(indices.begin(), indices.end(), 0);
  std::partial_sort(indices.begin(), indices.begin() + k, indices.end(),
                    [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  indices.resize(static_cast<size_t>(k));
  probabilities.resize(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) probabilities[i] = static_cast<float>(p[indices[i]]);
}

namespace {

// How classification runs the model: inference on `arena`, one copy of the weights.
nn::Context inference_context(Arena& arena, ops::Precision precision, bool packed_weights) {
  nn::Context ctx;
  ctx.training = false;
  ctx.arena = &arena;
  nn::set_inference_precision(ctx, precision);
  ctx.one_copy_of_weights = true;
  ctx.free_block_activations = true;
  ctx.packed_weights = packed_weights;
  return ctx;
}

void check_options(const VitConfig& config, const ClassifyOptions& options) {
  if (options.batch_size < 1) throw UsageError("--batch-size must be at least 1");
  if (options.top_k < 1) throw UsageError("--top-k must be at least 1");
  if (options.prefetch < 1) throw UsageError("prefetch must be at least 1");
  if (options.decode.max_pixels < 1) throw UsageError("--max-pixels must be at least 1");
  options.preprocess.validate(static_cast<int>(config.channels));
}

}  // namespace

Tensor classify_logits(VisionTransformer& model, const Tensor& images,
                       const ClassifyOptions& options, Arena& arena) {
  const VitConfig& config = model.config();
  check_options(config, options);
  const int64_t n = images.dim(0);
  Tensor out({n, config.num_classes});
  nn::Context ctx = inference_context(arena, options.precision, options.packed_weights);
  for (int64_t start = 0; start < n; start += options.batch_size) {
    const int64_t end = std::min(n, start + options.batch_size);
    arena.reset();
    const Tensor logits = model.forward(ctx, images.rows(start, end));  // [rows, classes]
    for (int64_t row = start; row < end; ++row)
      require_finite_logits(logits.rows(row - start, row - start + 1),
                            "image " + std::to_string(row), options.model);
    std::copy_n(logits.f32(), logits.numel(), out.f32() + start * config.num_classes);
  }
  return out;
}

ClassifyStats classify_files(VisionTransformer& model, const std::vector<std::string>& paths,
                             const ClassifyOptions& options,
                             const std::function<void(const ImageResult&)>& on_result) {
  const VitConfig& config = model.config();
  check_options(config, options);

  ClassifyStats stats;
  Timer wall;
  const int64_t classes = config.num_classes;
  Arena arena;
  nn::Context ctx = inference_context(arena, options.precision, options.packed_weights);
  Pipeline pipeline(paths, options, config.channels, config.image_height, config.image_width);
  while (Slot* s = pipeline.next()) {
    Timer timer;
    if (s->rows > 0) {
      arena.reset();
      const Tensor logits = model.forward(ctx, s->images.rows(0, s->rows));  // [rows, classes]
      int64_t checked_row = 0;
      for (const ImageResult& r : s->items)
        if (r.ok())
          require_finite_logits(logits.rows(checked_row, checked_row + 1), r.path, options.model),
              ++checked_row;
      const int64_t image_floats = config.channels * config.image_height * config.image_width;
      int64_t row = 0;
      for (ImageResult& r : s->items) {
        if (!r.ok()) continue;
        top_k(logits.f32() + row * classes, classes, options.top_k, r.classes, r.probabilities);
        r.row = row;
        r.input = s->images.f32() + row * image_floats;
        ++row;
      }
    }
    stats.model_seconds += timer.seconds();
    for (ImageResult& r : s->items) {
      ++(r.ok() ? stats.images : stats.failed);
      on_result(r);
      r.row = -1, r.input = nullptr;  // the slot's buffer is about to be reused
    }
    pipeline.release(s);
  }
  stats.prepare_seconds = pipeline.prepare_seconds();
  stats.seconds = wall.seconds();
  return stats;
}

Throughput measure_throughput(VisionTransformer& model, int64_t batch_size, double min_seconds,
                              ops::Precision precision, bool packed_weights,
                              ops::profile::StepProfile* profile) {
  if (batch_size < 1) throw UsageError("--batch-size must be at least 1");
  const VitConfig& c = model.config();
  Tensor images({batch_size, c.channels, c.image_height, c.image_width});
  ops::Rng rng(1);
  float* x = images.f32();
  for (int64_t i = 0; i < images.numel(); ++i) x[i] = 4.f * rng.uniform() - 2.f;
  Arena arena;
  nn::Context ctx = inference_context(arena, precision, packed_weights);
  auto batch = [&] {
    if (profile) profile->begin();
    arena.reset();
    model.forward(ctx, images);
    if (profile) profile->end();
  };
  batch();  // creates primitives, packs the weights, grows the arena
  Throughput t;
  t.batch_size = batch_size;
  Timer timer;
  const std::clock_t cpu = std::clock();
  do {
    batch();
    ++t.batches;
  } while (timer.seconds() < min_seconds);
  t.seconds = timer.seconds();
  t.cpu_seconds = static_cast<double>(std::clock() - cpu) / CLOCKS_PER_SEC;
  return t;
}

}  // namespace vitk::vit

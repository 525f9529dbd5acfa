// What the public API's three objects share: errors, the compute lock, threads, precision, the
// search's options and images in memory.
#include <omp.h>

#include <algorithm>

#include <opencv2/imgproc.hpp>

#include "common/io/checkpoint.h"
#include "common/memory.h"
#include "tools/api/internal.h"

namespace vitk {

std::string version() {
  return VITK_VERSION;
}

namespace api {

void guard(const std::function<void()>& body) {
  try {
    body();
  } catch (const Exception&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
}

std::mutex& compute_mutex() {
  static std::mutex m;
  return m;
}

ThreadScope::ThreadScope(int threads) : before_(omp_get_max_threads()) {
  if (threads > 0) ops::set_num_threads(threads);
}
ThreadScope::~ThreadScope() {
  omp_set_num_threads(before_);
}

ops::Precision resolve_precision(const std::string& given, const std::string& checkpoint) {
  const ops::Precision asked = ops::parse_precision(given.empty() ? "f32" : given);
  ops::require_precision(asked, "--precision");
  const std::string quantization = io::read_checkpoint_meta(checkpoint).quantization;
  if (quantization.empty()) return asked;
  if (given.empty()) return ops::Precision::int8;
  if (asked != ops::Precision::int8)
    throw UsageError("--precision " + std::string(ops::precision_name(asked)) + ": " + checkpoint +
                     " is quantised to " + quantization + " (vitk quantize) and runs at " +
                     "--precision int8 only; run the f32 checkpoint it was made from instead");
  return asked;
}

void check_run_options(int64_t batch_size, int threads) {
  if (batch_size < 1) throw UsageError("--batch-size must be at least 1");
  if (threads < 0) throw UsageError("--threads must be at least 1, not " + std::to_string(threads));
}

RunSettings run_settings(const std::string& checkpoint, const std::string& precision,
                         int64_t batch_size, int threads) {
  check_run_options(batch_size, threads);
  RunSettings r;
  r.path = checkpoint;
  r.precision = resolve_precision(precision, checkpoint);
  r.batch_size = batch_size;
  r.threads = threads;
  return r;
}

decode::SearchOptions to_search(const SearchOptions& s, ops::Precision precision,
                                int64_t vocab_size) {
  decode::SearchOptions o;
  o.method = s.method == SearchOptions::Method::sample   ? decode::SearchMethod::sample
             : s.method == SearchOptions::Method::greedy ? decode::SearchMethod::greedy
                                                         : decode::SearchMethod::beam;
  o.beam_size = s.beam_size;
  o.nbest = s.nbest;
  o.length_penalty = s.length_penalty;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.seed = s.seed;
  o.max_length = s.max_length;
  o.max_length_offset = s.max_length_offset;
  o.precision = precision;
  o.validate(vocab_size);
  return o;
}

void check_search_memory(const decode::SearchSizes& sizes, const decode::SearchOptions& search,
                         int64_t inputs, int64_t batch_size, const std::string& unit) {
  auto shortfall = [&](int64_t n) {
    return memory_shortfall(decode::search_bytes(sizes, search, n));
  };
  inputs = std::max<int64_t>(inputs, 1);
  const bool beam = search.method == decode::SearchMethod::beam;
  const std::string beam_option = "--beam-size " + std::to_string(search.beam_size);
  const std::string one = shortfall(1);
  if (!one.empty()) {
    const int fits = beam ? decode::fitting_beam_size(sizes, search, 1) : 0;
    throw UsageError((beam ? beam_option + ": " : std::string()) + "the search of one " + unit +
                     " " + one +
                     (fits > 0 ? "; a beam of " + std::to_string(fits) + " would fit." : "."));
  }
  const std::string all = shortfall(inputs);
  if (all.empty()) return;
  int64_t fits = inputs / 2;  // one input fits, so some batch down to one does
  while (fits > 1 && !shortfall(fits).empty()) fits /= 2;
  throw UsageError("--batch-size " + std::to_string(batch_size) +
                   (beam ? " with " + beam_option : std::string()) + ": a search of " +
                   std::to_string(inputs) + " " + unit + "s at once " + all + "; a batch of " +
                   std::to_string(std::max<int64_t>(fits, 1)) + " would fit.");
}

Hypothesis to_hypothesis(const decode::Hypothesis& h, std::string text) {
  Hypothesis out;
  out.text = std::move(text);
  out.tokens = h.tokens;
  out.log_prob = h.log_prob;
  out.score = h.score;
  out.finished = h.finished;
  return out;
}

namespace {

// One image as OpenCV's decoder would have given it: 8-bit, grey, BGR or BGRA.
cv::Mat as_decoded(const Image& image, size_t index) {
  const std::string what = "image " + std::to_string(index);
  if (!image.data) throw UsageError(what + ": no pixels (a null pointer)");
  if (image.height < 1 || image.width < 1 || image.height > (1 << 20) || image.width > (1 << 20))
    throw UsageError(what + ": a size of " + std::to_string(image.height) + "x" +
                     std::to_string(image.width) + " pixels");
  if (image.channels != 1 && image.channels != 3 && image.channels != 4)
    throw UsageError(what + ": " + std::to_string(image.channels) +
                     " channels; an image has 1 (grey), 3 (colour) or 4 (colour and alpha)");
  const int64_t row = image.width * image.channels;
  const int64_t stride = image.row_stride ? image.row_stride : row;
  if (stride < row)
    throw UsageError(what + ": rows of " + std::to_string(stride) + " bytes hold fewer than its " +
                     std::to_string(row) + " bytes of pixels");
  const cv::Mat view(static_cast<int>(image.height), static_cast<int>(image.width),
                     CV_8UC(static_cast<int>(image.channels)), const_cast<uint8_t*>(image.data),
                     static_cast<size_t>(stride));
  if (image.channels == 1 || image.order == Image::Order::bgr) return view;
  cv::Mat bgr;
  cv::cvtColor(view, bgr, image.channels == 3 ? cv::COLOR_RGB2BGR : cv::COLOR_RGBA2BGRA);
  return bgr;
}

}  // namespace

Tensor preprocess_images(const std::vector<Image>& images, int64_t channels, int64_t height,
                         int64_t width, const datasets::Preprocess& p) {
  Tensor out({static_cast<int64_t>(images.size()), channels, height, width});
  const int64_t floats = channels * height * width;
  for (size_t i = 0; i < images.size(); ++i) {
    const cv::Mat image =
        datasets::to_channels(as_decoded(images[i], i), static_cast<int>(channels));
    datasets::preprocess_image(image, p, height, width,
                               out.f32() + static_cast<int64_t>(i) * floats);
  }
  return out;
}

}  // namespace api
}  // namespace vitk

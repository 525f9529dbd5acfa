#pragma once
// Classifying image files in batches: a decode thread reads, checks and preprocesses the next
// batches (datasets::decode_image_file, the eval transform) while the model runs the current one;
// results come back in input order, one per file, with a reason for every file that could not
// be read.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/ops/profile.h"
#include "datasets/image_io.h"
#include "datasets/preprocess.h"
#include "vit/vit.h"

namespace vitk::vit {

struct ClassifyOptions {
  int64_t batch_size = 32;          // files per batch (the model runs on the readable ones)
  int top_k = 5;                    // capped at the number of classes
  datasets::Preprocess preprocess;  // the eval transform, usually the checkpoint's
  datasets::DecodeOptions decode;
  int prefetch = 2;                                // batches prepared ahead of the model
  ops::Precision precision = ops::Precision::f32;  // of the model's matrix products
  bool packed_weights = true;  // f32: weights in oneDNN's blocked layout where faster
  std::string model;           // the checkpoint's path, named in messages ("" : "the model")
};

struct ImageResult {
  int64_t index = 0;  // position in the input list
  std::string path;
  std::string error;                 // why the file could not be classified; empty if it was
  std::vector<int> classes;          // the top-k classes, most probable first
  std::vector<float> probabilities;  // their softmax probabilities
  // During on_result only (the batch's buffers are reused afterwards), for a file that was
  // classified: its row in the model's last forward (e.g. for kept attention weights) and its
  // normalised input [C, H, W] as the model read it; -1 and null otherwise.
  int64_t row = -1;
  const float* input = nullptr;
  bool ok() const { return error.empty(); }
};

struct ClassifyStats {
  int64_t images = 0;          // files classified
  int64_t failed = 0;          // files with an error
  double seconds = 0;          // wall time of the whole run
  double model_seconds = 0;    // in the model (forward, softmax, top-k)
  double prepare_seconds = 0;  // on the decode thread (read, decode, preprocess)
};

// Classifies every path with `model` (its configuration gives the channels and the input size).
// on_result is called once per path, in input order, on the calling thread, as soon as the
// path's batch is done. A file that cannot be read or decoded gets its reason and the run goes
// on; an error of the model itself (or from on_result) stops the run and is rethrown after the
// decode thread has stopped.
ClassifyStats classify_files(VisionTransformer& model, const std::vector<std::string>& paths,
                             const ClassifyOptions& options,
                             const std::function<void(const ImageResult&)>& on_result);

// One image file as the model reads it: decoded (DecodeOptions), converted to `channels`, the eval
// transform p to height x width, [C, H, W] floats at dst. False with the reason in `error` ("file
// not found", "cannot decode", "cannot preprocess: ...") when the file cannot be read.
bool read_image_file(const std::string& path, int64_t channels, int64_t height, int64_t width,
                     const datasets::Preprocess& p, const datasets::DecodeOptions& decode,
                     float* dst, std::string& error);

// The logits of images already preprocessed, f32 [N, C, H, W] at the model's size, run in batches
// of options.batch_size as classify_files runs them: f32 [N, classes]. The activations come from
// `arena` (kept by a caller that calls again, so that its pages are not faulted in anew each time).
// vitk::Error naming "image I" when one's logits are not finite.
Tensor classify_logits(VisionTransformer& model, const Tensor& images,
                       const ClassifyOptions& options, Arena& arena);

// vitk::Error "WHAT: the logits of MODEL are not finite ..." (MODEL: the checkpoint's path; empty:
// "the model's logits") when logits hold a NaN or an infinity (weights that overflow on this
// input, say a damaged int8 scale): no class or score is given for it. WHAT names the input.
void require_finite_logits(const Tensor& logits, const std::string& what,
                           const std::string& model = "");

// Softmax of one row of logits, then the k most probable classes (ties: the lower index first).
void top_k(const float* logits, int64_t classes, int k, std::vector<int>& indices,
           std::vector<float>& probabilities);

// The model alone: images per second of inference forwards on random normalised input in
// batches of batch_size, timed over at least min_seconds after one warm-up batch.
struct Throughput {
  int64_t batch_size = 0;
  int64_t batches = 0;
  double seconds = 0;      // wall time
  double cpu_seconds = 0;  // CPU time of the process meanwhile (all threads): on a loaded
                           // machine images per CPU-second at one thread is the steadier figure
  double images_per_second() const {
    return seconds > 0 ? static_cast<double>(batch_size * batches) / seconds : 0;
  }
};
// `profile` (may be null) is begun and ended around every batch, the warm-up batch included
// (StepProfile leaves it out).
Throughput measure_throughput(VisionTransformer& model, int64_t batch_size, double min_seconds,
                              ops::Precision precision = ops::Precision::f32,
                              bool packed_weights = true,
                              ops::profile::StepProfile* profile = nullptr);

}  // namespace vitk::vit

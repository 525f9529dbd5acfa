#pragma once
// What the public API's objects hold (their Impl), for the API's own files and for vitk's
// commands, which reach a loaded model through it for what only a command does (attention
// pictures, benchmarks, progress bars). Not installed: a program that links libvitk sees
// <vitk/vitk.h> only.
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/decode/search.h"
#include "common/error.h"
#include "common/ops/ops.h"
#include "common/seq2seq/checkpoint.h"
#include "common/seq2seq/text_checkpoint.h"
#include "common/seq2seq/text_classify.h"
#include "common/seq2seq/translator.h"
#include "datasets/preprocess.h"
#include "datasets/tokenizer.h"
#include "vit/caption/captioner.h"
#include "vit/checkpoint.h"
#include "vit/classify.h"
#include "vitk/vitk.h"

namespace vitk {
class Progress;

namespace api {

// Runs body(), letting vitk's own exceptions through and turning any other std::exception (from
// OpenCV, HDF5's C++ side, the allocator) into a vitk::Error with its message.
void guard(const std::function<void()>& body);

// Held while a model computes: calls from several threads (or objects) run one at a time, since
// oneDNN's stream and the op caches are shared by the process.
std::mutex& compute_mutex();

// Sets the calling thread's OpenMP thread count for the duration of a call (0: leave it).
class ThreadScope {
 public:
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int before_ = 0;
};

// The precision a model runs at: `given` ("" for the default) checked as --precision is, against
// the checkpoint at `checkpoint`: a file of vitk quantize runs at int8 (its default) and refuses
// any other (vitk::UsageError naming the file).
ops::Precision resolve_precision(const std::string& given, const std::string& checkpoint);

// What each loaded model keeps of its options.
struct RunSettings {
  std::string path;  // the checkpoint
  ops::Precision precision = ops::Precision::f32;
  int64_t batch_size = 32;
  int threads = 0;
};
// vitk::UsageError for a batch size below 1 or a negative thread count.
void check_run_options(int64_t batch_size, int threads);
// The options checked (vitk::UsageError), the precision resolved against the checkpoint.
RunSettings run_settings(const std::string& checkpoint, const std::string& precision,
                         int64_t batch_size, int threads);

// The core's search from the API's, checked (vitk::UsageError).
decode::SearchOptions to_search(const SearchOptions& s, ops::Precision precision,
                                int64_t vocab_size);
Hypothesis to_hypothesis(const decode::Hypothesis& h, std::string text);

// vitk::UsageError when a search of `inputs` inputs at once (each a `unit`: "sentence", "image";
// at most batch_size) needs more memory than the machine has (decode::search_bytes and
// memory_shortfall: a lower bound, so a search refused could never run), saying what would fit:
// "--beam-size 100000: the search of one image needs at least 37.6 GiB (...), more than the 23.4
// GiB of memory this machine has; a beam of 50000 would fit." or, when one input fits but not all
// at once, "--batch-size 32 with --beam-size 1024: a search of 20 images at once needs at least
// ...; a batch of 5 would fit."
void check_search_memory(const decode::SearchSizes& sizes, const decode::SearchOptions& search,
                         int64_t inputs, int64_t batch_size, const std::string& unit);

// Images in memory as the model reads them: each converted to `channels` (alpha on white, colour
// to grey as Pillow does), then the eval transform p to height x width; f32 [N, C, H, W].
// vitk::UsageError naming the image's index for a null pointer, a size of 0, 2 or more than 4
// channels or a stride shorter than a row.
Tensor preprocess_images(const std::vector<Image>& images, int64_t channels, int64_t height,
                         int64_t width, const datasets::Preprocess& p);

}  // namespace api

struct Classifier::Impl {
  std::string name;  // the checkpoint's path, or what the model is ("random weights")
  vit::LoadedVit loaded;
  vit::ClassifyOptions options;     // precision, batch size, top-k, preprocessing, decoding
  std::vector<std::string> labels;  // one per class
  int threads = 0;
  // Called with each file's internal result just before on_result (vitk classify's pictures).
  std::function<void(const vit::ImageResult&)> observer;
  vit::ClassifyStats stats;  // of the last classify() of files
  Arena arena;               // logits()'s activations, kept from call to call (compute lock held)

  // A classifier of an already loaded model (vitk classify --random-weights), options checked.
  static std::unique_ptr<Impl> make(std::string name, vit::LoadedVit loaded,
                                    const ClassifierOptions& options);
};

struct Translator::Impl : api::RunSettings {
  seq2seq::LoadedTranslation loaded;
  datasets::Tokenizer tokenizer;

  // vitk::UsageError when the machine lacks the memory for one sentence's search by a model of
  // this configuration.
  static void check_memory(const seq2seq::TransformerConfig& config,
                           const decode::SearchOptions& search);
  // The search of translate() (memory checked), with a progress bar (may be null) over the
  // sentences.
  std::vector<seq2seq::Translation> run(const std::vector<std::string>& sentences,
                                        const decode::SearchOptions& search, Progress* progress);
};

struct Captioner::Impl : api::RunSettings {
  caption::LoadedCaptioner loaded;

  // vitk::UsageError when the machine lacks the memory for the search of `images` images at
  // once (at most the batch size) with these options (api::check_search_memory).
  void check_memory(const caption::CaptionRunOptions& options, int64_t images) const;

  // The options of a run: the search checked, this captioner's precision and batch size.
  caption::CaptionRunOptions run_options(const SearchOptions& search) const;
  // Captions image files batch by batch: result i is paths[i]'s, errors[i] why it could not be
  // read ("" when it was).
  std::vector<caption::CaptionResult> run_files(const std::vector<std::string>& paths,
                                                const caption::CaptionRunOptions& options,
                                                std::vector<std::string>& errors);
  // The same for images already preprocessed, f32 [N, C, H, W].
  std::vector<caption::CaptionResult> run(const Tensor& images,
                                          const caption::CaptionRunOptions& options);
};

struct TextClassifier::Impl : api::RunSettings {
  seq2seq::LoadedText loaded;
  datasets::Tokenizer tokenizer;
  int top_k = 5;
  // The checked options of a run of top_k labels (0: the object's) at this object's precision.
  seq2seq::TextClassifyOptions run_options(int top_k) const;
  // classify() with a progress bar (may be null) over the sentences and a stop flag (may be null).
  std::vector<seq2seq::TextPrediction> run(const std::vector<std::string>& sentences, int top_k,
                                           Progress* progress, const std::atomic<int>* stop);
  // What the pooled vector attends to in one sentence (vitk text-classify --attention-dir).
  seq2seq::TextAttention attention(const std::string& sentence);
};

}  // namespace vitk

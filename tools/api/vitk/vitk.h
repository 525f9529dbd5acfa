#pragma once
// vitk's C++ API: classify images, translate, caption and classify text with vitk checkpoints
// from your own program.
//
//   #include <vitk/vitk.h>
//   vitk::Classifier clf("fmnist-vit.h5");                      // f32, or int8 for a quantised
//   file for (const vitk::Classification& c : clf.classify({"boot.png"}))
//     std::cout << c.path << ": " << c.labels[0] << " " << c.probabilities[0] << "\n";
//
// Link libvitk (CMake: find_package(vitk) and vitk::vitk; pkg-config: vitk). Images held in memory
// are vitk::Image views of 8-bit pixels; <vitk/opencv.h> adds overloads that take cv::Mat.
//
// Errors: every function throws vitk::Exception (a std::runtime_error) with the message the
// `vitk` command prints after "vitk: error: ". It is a vitk::UsageError when the call itself is
// wrong (an unknown precision, a top-k of 0, an image with 2 channels) and a vitk::Error when a
// file or the data is (a checkpoint that cannot be read, logits that are not finite).
//
// Threads: one object may be called from several threads at once. Calls into models run one at a
// time in the process (each uses the object's `threads` for its matrix products); reading and
// decoding image files overlaps with them.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vitk/error.h"

#define VITK_API __attribute__((visibility("default")))

namespace vitk {

// The library's version, "0.1.0".
VITK_API std::string version();

// Runs one `vitk` subcommand in this process, as the executable would with these words after
// "vitk" (e.g. {"eval", "--model", "m.h5", "--data", "DIR"}); returns its exit code (0 success, 1
// a failure, 2 a usage error). Output goes to this process's stdout and stderr.
VITK_API int run_command(const std::vector<std::string>& args);
// The `vitk` executable's main(): run_command, then (under mpirun) leaving the MPI world.
VITK_API int command_line_main(int argc, char** argv);

// A view of an 8-bit image in memory, row by row, pixels interleaved (HWC): 1 channel (grey),
// 3 (colour) or 4 (colour and alpha, composited on white as files are). Not owned: the pixels must
// outlive the call they are given to.
struct Image {
  enum class Order { rgb, bgr };  // of colour channels: numpy/Pillow hold RGB, OpenCV BGR
  const uint8_t* data = nullptr;
  int64_t height = 0, width = 0, channels = 1;
  int64_t row_stride = 0;  // bytes from one row to the next; 0: width * channels
  Order order = Order::rgb;
};

// ---- Classification --------------------------------------------------------------------------

struct ClassifierOptions {
  // "f32", "bf16" (AVX512_BF16 or AMX) or "int8"; "" the checkpoint's: int8 for a file of
  // `vitk quantize`, f32 otherwise.
  std::string precision;
  int threads = 0;          // for the products; 0: OpenMP's default (OMP_NUM_THREADS)
  int top_k = 5;            // labels per image, capped at the number of classes
  int64_t batch_size = 32;  // images through the model at once
  // Run at another input size (the position embeddings resampled, as `vitk classify
  // --image-size`); 0: the checkpoint's.
  int64_t image_height = 0, image_width = 0;
  int align_corners = -1;         // of the resampling: 1 or 0; -1 the checkpoint's convention
  std::string pos_interpolation;  // "bicubic" (""), or "bilinear" as the ViT paper's code
  // Class names instead of the checkpoint's (as many as the model's classes).
  std::vector<std::string> labels;
  // Overrides of the checkpoint's eval transform ("" or empty: the checkpoint's), as `vitk
  // classify`'s --resize (shorter|squash), --crop-fraction, --interpolation, --mean, --std.
  std::string resize, interpolation;
  float crop_fraction = 0;
  std::vector<float> mean, std;
  int64_t max_pixels = 178'956'970;  // files with more pixels (from their header) are refused
  bool packed_weights = true;        // f32: weights in oneDNN's blocked layout where faster
};

// One image's result: the top-k classes, most probable first, with their names and softmax
// probabilities; for a file that could not be read, only `error` (why).
struct Classification {
  std::string path;  // the file ("" for an image in memory)
  std::string error;
  std::vector<int> classes;
  std::vector<std::string> labels;
  std::vector<float> probabilities;
  bool ok() const { return error.empty(); }
};

class VITK_API Classifier {
 public:
  // Loads a ViT checkpoint (vitk train, finetune, import or quantize), every name and shape
  // checked.
  explicit Classifier(const std::string& checkpoint, const ClassifierOptions& options = {});
  ~Classifier();
  Classifier(Classifier&&) noexcept;
  Classifier& operator=(Classifier&&) noexcept;

  const std::vector<std::string>& classes() const;  // the class names, index order
  int64_t image_height() const;                     // the model's input
  int64_t image_width() const;
  int64_t channels() const;       // 1 or 3
  std::string precision() const;  // "f32", "bf16" or "int8"

  // Image files (PNG, JPEG, BMP, TIFF, WebP, PNM), with the checkpoint's preprocessing, in input
  // order. A file that cannot be read gets its `error` and does not stop the others. top_k 0:
  // the options'.
  std::vector<Classification> classify(const std::vector<std::string>& paths, int top_k = 0) const;
  // The same, each result handed to on_result (on the calling thread, in input order) as soon as
  // its batch is done, while the next files are decoded.
  void classify(const std::vector<std::string>& paths,
                const std::function<void(const Classification&)>& on_result, int top_k = 0) const;
  // Images in memory, preprocessed as files are. A bad image is a UsageError naming its index.
  std::vector<Classification> classify(const std::vector<Image>& images, int top_k = 0) const;
  // The model's logits of images in memory: images.size() rows of classes().size() floats.
  std::vector<float> logits(const std::vector<Image>& images) const;

  struct Impl;
  Impl& impl() const { return *impl_; }  // vitk's own commands only: not part of the API
  explicit Classifier(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- Search: translation and captioning ------------------------------------------------------

// How a sentence or a caption is searched for; the defaults are `vitk translate`'s.
struct SearchOptions {
  enum class Method { beam, greedy, sample };
  Method method = Method::beam;
  int beam_size = 4;
  int nbest = 1;                // hypotheses per input, best first: at most beam_size (beam only)
  float length_penalty = 0.6f;  // GNMT's ((5 + n) / 6)^alpha; 0: the raw log-probability
  float temperature = 1.f;      // sample: p ~ exp(logit / T)
  int64_t top_k = 0;            // sample: among the K likeliest tokens only (0: all)
  uint64_t seed = 0;            // sample
  // At most this many tokens, EOS included (0: the model's limit); translation also stops at
  // the source's length + max_length_offset.
  int64_t max_length = 0, max_length_offset = 50;
};

struct Hypothesis {
  std::string text;
  std::vector<int32_t> tokens;  // the subword ids, without BOS and EOS
  double log_prob = 0;          // of the tokens and the EOS
  double score = 0;             // log_prob / length penalty: what the search ranks by
  bool finished = true;         // false: stopped at the length limit without an EOS
};

// ---- Translation -----------------------------------------------------------------------------

struct TranslatorOptions {
  std::string precision;    // as ClassifierOptions::precision
  int threads = 0;          // as ClassifierOptions::threads
  int64_t batch_size = 32;  // sentences per search
};

struct Translation {
  std::vector<Hypothesis> hypotheses;  // n-best, best first; none for an empty line
  int64_t source_tokens = 0;           // subwords of the source before any was cut
  bool truncated = false;              // the source was cut to the model's length
};

class VITK_API Translator {
 public:
  // Loads a translation checkpoint of `vitk mt-train` (or `vitk average`, `vitk quantize`) with
  // its SentencePiece model.
  explicit Translator(const std::string& checkpoint, const TranslatorOptions& options = {});
  ~Translator();
  Translator(Translator&&) noexcept;
  Translator& operator=(Translator&&) noexcept;

  std::string precision() const;
  int64_t max_source_tokens() const;  // longer sources are cut to this many subwords

  // One result per sentence, in input order, as `vitk translate` gives them.
  std::vector<Translation> translate(const std::vector<std::string>& sentences,
                                     const SearchOptions& search = {}) const;

  struct Impl;
  Impl& impl() const { return *impl_; }  // vitk's own commands only: not part of the API

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- Captioning ------------------------------------------------------------------------------

struct CaptionerOptions {
  std::string precision;    // as ClassifierOptions::precision
  int threads = 0;          // as ClassifierOptions::threads
  int64_t batch_size = 32;  // images per search
};

struct Caption {
  std::string path;                    // the file ("" for an image in memory)
  std::string error;                   // why the file could not be read; empty if it was
  std::vector<Hypothesis> hypotheses;  // n-best, best first
  bool ok() const { return error.empty(); }
};

class VITK_API Captioner {
 public:
  // Loads a captioning checkpoint of `vitk caption-train` with its SentencePiece model.
  explicit Captioner(const std::string& checkpoint, const CaptionerOptions& options = {});
  ~Captioner();
  Captioner(Captioner&&) noexcept;
  Captioner& operator=(Captioner&&) noexcept;

  int64_t image_height() const;
  int64_t image_width() const;
  int64_t channels() const;
  std::string precision() const;

  // Image files in input order, as `vitk caption`; a file that cannot be read gets its `error`.
  std::vector<Caption> caption(const std::vector<std::string>& paths,
                               const SearchOptions& search = {}) const;
  // Images in memory, preprocessed as files are. A bad image is a UsageError naming its index.
  std::vector<Caption> caption(const std::vector<Image>& images,
                               const SearchOptions& search = {}) const;

  struct Impl;
  Impl& impl() const { return *impl_; }  // vitk's own commands only: not part of the API

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- Text classification ---------------------------------------------------------------------

struct TextClassifierOptions {
  std::string precision;    // as ClassifierOptions::precision
  int threads = 0;          // as ClassifierOptions::threads
  int top_k = 5;            // labels per sentence, capped at the number of classes
  int64_t batch_size = 64;  // sentences through the model at once
};

// One sentence's result: the top-k labels, most probable first, with their softmax probabilities.
struct TextClassification {
  std::vector<int> classes;
  std::vector<std::string> labels;
  std::vector<float> probabilities;
  bool truncated = false;  // the sentence was cut to the model's length
};

class VITK_API TextClassifier {
 public:
  // Loads a text classifier checkpoint of `vitk text-train` (or `vitk quantize`) with its
  // SentencePiece model.
  explicit TextClassifier(const std::string& checkpoint, const TextClassifierOptions& options = {});
  ~TextClassifier();
  TextClassifier(TextClassifier&&) noexcept;
  TextClassifier& operator=(TextClassifier&&) noexcept;

  const std::vector<std::string>& classes() const;  // the labels, index order
  std::string precision() const;
  int64_t max_tokens() const;  // longer sentences are cut to this many subwords
  // One result per sentence, in input order. An empty sentence is a UsageError naming its index.
  // top_k 0: the options'.
  std::vector<TextClassification> classify(const std::vector<std::string>& sentences,
                                           int top_k = 0) const;

  struct Impl;
  Impl& impl() const { return *impl_; }  // vitk's own commands only: not part of the API

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace vitk

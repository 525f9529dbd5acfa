#pragma once
// Running a captioning model (vit/caption/model.h): load a checkpoint with its tokenizer, caption
// the images of a set batch by batch with the core's search (greedy, beam, n-best, sampling), the
// cross-attention of each caption, and the scores of `vitk caption-eval` and of validation:
// corpus BLEU-4 against every reference caption of each image, exact scene match and
// attention-in-cell on vitk's generated scenes (datasets/scenes.h).
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/decode/bleu.h"
#include "common/decode/search.h"
#include "common/io/checkpoint.h"
#include "common/params.h"
#include "datasets/captions.h"
#include "datasets/tokenizer.h"
#include "vit/caption/model.h"

namespace vitk {
class Progress;
}

namespace vitk::caption {

// The checkpoint file that holds a caption model's tokenizer (SentencePiece, as translation's).
constexpr const char* kCaptionTokenizerFile = "sentencepiece.model";

// CaptionModel as the search's model.
class CaptionStepModel : public decode::StepModel {
 public:
  explicit CaptionStepModel(CaptionModel& model) : model_(model) {}
  int64_t vocab_size() const override { return model_.vocab_size(); }
  int64_t max_length() const override { return model_.max_length(); }
  void start(nn::Context& ctx, const Tensor& memory, const Tensor& memory_lengths, int64_t capacity,
             nn::Decoder::State& state) override {
    model_.start(ctx, memory, memory_lengths, capacity, state);
  }
  Tensor step(nn::Context& ctx, const Tensor& tokens, nn::Decoder::State& state) override {
    return model_.step(ctx, tokens, state);
  }

 private:
  CaptionModel& model_;
};

// The configuration of the captioning checkpoint at `path` (its attributes `meta`), checked
// before any model is built from it, as vit::stored_config checks a classifier's: every size key
// present, each value within CaptionConfig::validate's limits, the stored tensors' names and
// shapes (no data read) against what the values imply, and the memory the model needs against
// the machine's. vitk::Error naming the file and the configuration key at fault.
CaptionConfig caption_stored_config(const std::string& path, const io::CheckpointMeta& meta);

// The least memory a captioning model of this configuration takes while a checkpoint loads (its
// encoder's and its decoder's parameters, three copies each) and one image's inference.
uint64_t caption_memory_bytes(const CaptionConfig& config);

// The sizes of this model's search of one image (decode::search_bytes): the memory tokens and
// as many target positions as the search allows.
decode::SearchSizes caption_search_sizes(const CaptionConfig& config,
                                         const decode::SearchOptions& search);

struct LoadedCaptioner {
  CaptionConfig config;
  io::CheckpointMeta meta;
  std::unique_ptr<ParamStore> params;  // finalized without gradients, weights loaded
  std::unique_ptr<CaptionModel> model;
  datasets::Tokenizer tokenizer;
};

// Builds the model a captioning checkpoint describes and loads its weights and tokenizer.
// vitk::Error naming the file and what is wrong (not a caption model, no tokenizer, a tokenizer
// of another size than the model's vocabulary, a tensor of another shape). A file of vitk quantize
// loads its int8 matrices as such: the model then runs at ops::Precision::int8 only.
LoadedCaptioner load_captioner(const std::string& path);

struct CaptionRunOptions {
  decode::SearchOptions search;  // max_length 0: the model's
  int64_t batch_size = 32;
  int prefetch = 2;
  bool attention = false;  // also the cross-attention of each image's best caption
  int attention_layer = -1, attention_head = -1;
  ops::Precision precision = ops::Precision::f32;
};

struct CaptionResult {
  int64_t image = 0;                           // index in the set
  bool read = false;                           // false: the image could not be read
  std::vector<decode::Hypothesis> hypotheses;  // n-best, best first
  std::vector<std::string> texts;              // detokenized
  // With CaptionRunOptions::attention: [rows, Tm], row t the position that predicts the best
  // caption's token t (its EOS last when it has one), and the image as the model saw it.
  Tensor attention;
  Tensor input;  // [C, H, W], normalised
};

// Captions every image of `set`, in the set's order (an unreadable image is reported by the
// loader and gets read = false). progress (may be null) counts images.
std::vector<CaptionResult> caption_set(CaptionModel& model, const Vocabulary& tokenizer,
                                       const datasets::CaptionSet& set,
                                       const CaptionRunOptions& options,
                                       Progress* progress = nullptr);

// The same for images already preprocessed, f32 [N, C, H, W] at the encoder's size, in batches of
// options.batch_size: result i is row i's.
std::vector<CaptionResult> caption_images(CaptionModel& model, const Vocabulary& tokenizer,
                                          const Tensor& images, const CaptionRunOptions& options);

struct CaptionScores {
  int64_t images = 0;       // scored: read and with references
  decode::BleuResult bleu;  // corpus BLEU-4 (sacreBLEU's), every reference of each image
  // Generated scenes only (images with objects):
  int64_t scenes = 0, exact = 0;  // exact scene match (datasets::caption_matches_scene)
  int64_t articles = 0;           // scenes whose caption names just their articles, once each
  // Relations stated between two articles of a scene (datasets::check_scene_caption), and the
  // true ones: horizontal (one row) and vertical.
  int64_t horizontal = 0, horizontal_true = 0, vertical = 0, vertical_true = 0;
  int64_t nouns = 0, in_cell = 0;  // named articles, and those whose most-attended patch lies
                                   // in that article's cell (needs attention)
  // The same by the noun's place in its caption: first, second, third, fourth or later.
  std::array<int64_t, 4> nouns_at{}, in_cell_at{};
  double exact_percent() const { return scenes ? 100.0 * exact / scenes : 0; }
  double in_cell_percent() const { return nouns ? 100.0 * in_cell / nouns : 0; }
};

// Scores captions of caption_set() against the set's references (normalize_caption on both
// sides). Attention-in-cell looks, for each article noun of the best caption, at the row that
// predicts the first piece of the noun's last word, and at the patch (not the class token) with
// the highest weight there: its centre must lie in the named article's grid cell.
CaptionScores score_captions(const CaptionConfig& config, const Vocabulary& tokenizer,
                             const datasets::CaptionSet& set,
                             const std::vector<CaptionResult>& results);

// The log-probability the model gives each caption, teacher-forced by incremental decoding (no
// dropout, as a search reads it): captions[k] (token ids without BOS and EOS; EOS is scored) for
// the image in row image_of[k] of images f32 [B, C, H, W]. Each image is encoded and its memory
// projected once, however many captions it has. Captions longer than the model's positions
// (max_length - 1 tokens) are a vitk::Error. Allocates in ctx.arena.
std::vector<double> caption_log_probs(CaptionModel& model, nn::Context& ctx, const Tensor& images,
                                      const std::vector<const std::vector<int32_t>*>& captions,
                                      const std::vector<int64_t>& image_of);

// For each token of `ids`, the index of the word it belongs to (pieces starting with
// SentencePiece's "▁" begin a word).
std::vector<int64_t> word_of_pieces(const Vocabulary& tokenizer, const std::vector<int32_t>& ids);

// The article nouns of a caption of a generated scene, in the caption's order: the article of
// `objects` each names (null for a noun the scene does not have) and the token of `ids` (the
// caption's pieces, `normalised` its text) that writes it: the first piece of the noun's last
// word, -1 when no piece is there (a caption cut short). The decoder position that predicts
// token t is row t of the cross-attention (CaptionResult::attention).
struct NamedCell {
  const datasets::SceneObject* object = nullptr;
  int64_t token = -1;
};
std::vector<NamedCell> named_cells(const Vocabulary& tokenizer, const std::vector<int32_t>& ids,
                                   const std::string& normalised,
                                   const std::vector<datasets::SceneObject>& objects);

// The memory rows of the patches whose centre lies in `box` (after the class token when the
// memory holds it), in row order.
std::vector<int32_t> patches_in(const CaptionConfig& config, const datasets::Box& box);

}  // namespace vitk::caption

#pragma once
// Classifying sentences with a trained text classifier (`vitk text-classify`, `vitk text-eval`,
// vitk::TextClassifier): tokenized as in training (pieces + EOS, cut to the model's length),
// batched by similar length, returned in the input order as the k likeliest labels with their
// probabilities. Also what the pooled vector attends to in one sentence (--attention-dir).
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/ops/ops.h"
#include "common/progress.h"
#include "common/seq2seq/text_model.h"
#include "common/tensor.h"
#include "common/vocabulary.h"

namespace vitk::seq2seq {

struct TextClassifyOptions {
  // Of the products: f32, bf16, or int8 (nn::set_inference_precision).
  ops::Precision precision = ops::Precision::f32;
  int64_t batch_size = 64;  // sentences per forward
  int top_k = 1;            // labels per sentence, likeliest first (at most the model's)
  // Keep only the form the products read of each weight (a model that only runs).
  bool one_copy_of_weights = false;
};

struct TextPrediction {
  std::vector<int32_t> labels;  // top_k label indices, likeliest first
  std::vector<float> probs;     // their softmax probabilities
  bool cut = false;             // the sentence was longer than the model takes, and cut
};

// What the pooled vector attends to in the last encoder layer (TextClassifier::pooled_attention):
// one weight per piece of the sentence (the class token's own weight left out, EOS kept).
struct TextAttention {
  std::vector<std::string> pieces;
  std::vector<float> weights;
  TextPrediction prediction;
};

class SentenceClassifier {
 public:
  // The model and vocabulary must outlive the classifier.
  SentenceClassifier(TextClassifier& model, const Vocabulary& vocabulary,
                     const TextClassifyOptions& options);
  // One prediction per line, in order; `progress` (may be null) counts sentences; `stop` (may be
  // null) ends early with the lines done so far.
  std::vector<TextPrediction> classify(const std::vector<std::string>& lines,
                                       Progress* progress = nullptr,
                                       const std::atomic<int>* stop = nullptr);
  TextAttention attention(const std::string& line);
  // The ids the model reads for `line`; `cut` (may be null) tells whether it was cut.
  std::vector<int> ids(const std::string& line, bool* cut = nullptr) const;

 private:
  Tensor forward(const std::vector<std::vector<int>>& sentences);  // logits [B, C]
  TextPrediction top(const float* logits) const;

  TextClassifier& model_;
  const Vocabulary& vocabulary_;
  TextClassifyOptions options_;
  Arena arena_;
};

}  // namespace vitk::seq2seq

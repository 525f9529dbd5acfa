// Batched classification of sentences, and the pooled attention of one.
#include "common/seq2seq/text_classify.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "common/seq2seq/translator.h"

namespace vitk::seq2seq {

SentenceClassifier::SentenceClassifier(TextClassifier& model, const Vocabulary& vocabulary,
                                       const TextClassifyOptions& options)
    : model_(model), vocabulary_(vocabulary), options_(options) {
  if (options_.batch_size < 1) throw UsageError("--batch-size must be at least 1");
  if (options_.top_k < 1) throw UsageError("--top-k must be at least 1");
  options_.top_k = static_cast<int>(std::min<int64_t>(options_.top_k, model.config().num_classes));
}

std::vector<int> SentenceClassifier::ids(const std::string& line, bool* cut) const {
  const int64_t most = model_.config().max_length - model_.first_token();
  int64_t pieces = 0;
  std::vector<int> s = source_ids(vocabulary_, line, most, &pieces);
  if (cut) *cut = pieces + 1 > most;
  return s;
}

Tensor SentenceClassifier::forward(const std::vector<std::vector<int>>& sentences) {
  const auto B = static_cast<int64_t>(sentences.size());
  int64_t T = 1;
  for (const auto& s : sentences) T = std::max<int64_t>(T, static_cast<int64_t>(s.size()));
  Tensor ids({B, T}, DType::i32), lengths({B}, DType::i32);
  for (int64_t b = 0; b < B; ++b) {
    const auto& s = sentences[static_cast<size_t>(b)];
    std::copy(s.begin(), s.end(), ids.i32() + b * T);
    lengths.i32()[b] = static_cast<int32_t>(s.size());
  }
  arena_.reset();
  nn::Context ctx;
  ctx.arena = &arena_;
  nn::set_inference_precision(ctx, options_.precision);
  ctx.packed_weights = true;
  ctx.one_copy_of_weights = options_.one_copy_of_weights;
  return model_.forward(ctx, ids, lengths);
}

TextPrediction SentenceClassifier::top(const float* logits) const {
  const auto C = static_cast<int>(model_.config().num_classes);
  const float most = *std::max_element(logits, logits + C);
  double sum = 0;
  for (int c = 0; c < C; ++c) sum += std::exp(static_cast<double>(logits[c] - most));
  std::vector<int32_t> order(static_cast<size_t>(C));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + options_.top_k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  TextPrediction p;
  for (int k = 0; k < options_.top_k; ++k) {
    const int32_t c = order[static_cast<size_t>(k)];
    p.labels.push_back(c);
    p.probs.push_back(static_cast<float>(std::exp(static_cast<double>(logits[c] - most)) / sum));
  }
  return p;
}

std::vector<TextPrediction> SentenceClassifier::classify(const std::vector<std::string>& lines,
                                                         Progress* progress,
                                                         const std::atomic<int>* stop) {
  const auto n = static_cast<int64_t>(lines.size());
  std::vector<std::vector<int>> all(static_cast<size_t>(n));
  std::vector<char> cut(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    bool c = false;
    all[static_cast<size_t>(i)] = ids(lines[static_cast<size_t>(i)], &c);
    cut[static_cast<size_t>(i)] = c;
  }
  // Sorted by length: batches of similar lengths waste little on padding.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return all[static_cast<size_t>(a)].size() < all[static_cast<size_t>(b)].size();
  });
  std::vector<TextPrediction> out(static_cast<size_t>(n));
  const int64_t B = options_.batch_size;
  for (int64_t first = 0; first < n; first += B) {
    if (stop && stop->load()) break;
    const int64_t last = std::min(n, first + B);
    std::vector<std::vector<int>> batch;
    for (int64_t i = first; i < last; ++i) batch.push_back(all[static_cast<size_t>(order[i])]);
    const Tensor logits = forward(batch);
    const int64_t C = logits.dim(1);
    for (int64_t i = first; i < last; ++i) {
      const auto row = static_cast<size_t>(order[static_cast<size_t>(i)]);
      out[row] = top(logits.f32() + (i - first) * C);
      out[row].cut = cut[row];
    }
    if (progress) progress->update(last, last, "");
  }
  return out;
}

TextAttention SentenceClassifier::attention(const std::string& line) {
  bool cut = false;
  const std::vector<int> s = ids(line, &cut);
  model_.keep_attention = true;
  Tensor logits;
  try {
    logits = forward({s});
  } catch (...) {
    model_.keep_attention = false;
    throw;
  }
  model_.keep_attention = false;
  const Tensor w = model_.pooled_attention();  // [1, T']
  TextAttention a;
  a.prediction = top(logits.f32());
  a.prediction.cut = cut;
  a.pieces = vocabulary_.pieces(s);
  const int64_t o = model_.first_token();
  for (size_t i = 0; i < s.size(); ++i) a.weights.push_back(w.f32()[o + static_cast<int64_t>(i)]);
  return a;
}

}  // namespace vitk::seq2seq

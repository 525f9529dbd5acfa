// vitk::TextClassifier: a text classifier checkpoint and its SentencePiece model, run in batches
// by common/seq2seq/text_classify.
#include "tools/api/internal.h"

namespace vitk {

TextClassifier::TextClassifier(const std::string& checkpoint,
                               const TextClassifierOptions& options) {
  api::guard([&] {
    if (options.top_k < 1)
      throw UsageError("top_k must be at least 1, got " + std::to_string(options.top_k));
    auto m = std::make_unique<Impl>();
    static_cast<api::RunSettings&>(*m) =
        api::run_settings(checkpoint, options.precision, options.batch_size, options.threads);
    m->top_k = options.top_k;
    m->loaded = seq2seq::load_text_classifier(checkpoint);
    try {
      m->tokenizer = datasets::Tokenizer::from_bytes(m->loaded.meta.tokenizer);
    } catch (const Error& e) {
      throw Error(checkpoint + ": " + e.what());
    }
    impl_ = std::move(m);
  });
}

TextClassifier::~TextClassifier() = default;
TextClassifier::TextClassifier(TextClassifier&&) noexcept = default;
TextClassifier& TextClassifier::operator=(TextClassifier&&) noexcept = default;

const std::vector<std::string>& TextClassifier::classes() const {
  return impl_->loaded.meta.labels;
}

std::string TextClassifier::precision() const {
  return ops::precision_name(impl_->precision);
}

int64_t TextClassifier::max_tokens() const {
  return impl_->loaded.meta.config.max_length - impl_->loaded.model->first_token() - 1;
}

seq2seq::TextClassifyOptions TextClassifier::Impl::run_options(int k) const {
  if (k < 0) throw UsageError("top_k must be at least 1, got " + std::to_string(k));
  seq2seq::TextClassifyOptions o;
  o.precision = precision;
  o.batch_size = batch_size;
  o.top_k = k == 0 ? top_k : k;
  o.one_copy_of_weights = true;  // the object only runs its model, at one precision
  return o;
}

std::vector<seq2seq::TextPrediction> TextClassifier::Impl::run(
    const std::vector<std::string>& sentences, int k, Progress* progress,
    const std::atomic<int>* stop) {
  for (size_t i = 0; i < sentences.size(); ++i)
    if (sentences[i].find_first_not_of(" \t\r\n") == std::string::npos)
      throw UsageError("sentence " + std::to_string(i) + " is empty: nothing to classify");
  const seq2seq::TextClassifyOptions o = run_options(k);
  std::lock_guard<std::mutex> lock(api::compute_mutex());
  api::ThreadScope scope(threads);
  seq2seq::SentenceClassifier classifier(*loaded.model, tokenizer, o);
  return classifier.classify(sentences, progress, stop);
}

seq2seq::TextAttention TextClassifier::Impl::attention(const std::string& sentence) {
  std::lock_guard<std::mutex> lock(api::compute_mutex());
  api::ThreadScope scope(threads);
  seq2seq::SentenceClassifier classifier(*loaded.model, tokenizer, run_options(1));
  return classifier.attention(sentence);
}

std::vector<TextClassification> TextClassifier::classify(const std::vector<std::string>& sentences,
                                                         int top_k) const {
  std::vector<TextClassification> out;
  api::guard([&] {
    for (const seq2seq::TextPrediction& p : impl_->run(sentences, top_k, nullptr, nullptr)) {
      TextClassification t;
      for (size_t k = 0; k < p.labels.size(); ++k) {
        t.classes.push_back(p.labels[k]);
        t.labels.push_back(classes()[static_cast<size_t>(p.labels[k])]);
        t.probabilities.push_back(p.probs[k]);
      }
      t.truncated = p.cut;
      out.push_back(std::move(t));
    }
  });
  return out;
}

}  // namespace vitk

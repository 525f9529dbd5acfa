// vitk::Translator: a translation checkpoint and its SentencePiece model, searched in batches by
// common/seq2seq/translator.
#include "common/seq2seq/search.h"
#include "tools/api/internal.h"

namespace vitk {

Translator::Translator(const std::string& checkpoint, const TranslatorOptions& options) {
  api::guard([&] {
    auto m = std::make_unique<Impl>();
    static_cast<api::RunSettings&>(*m) =
        api::run_settings(checkpoint, options.precision, options.batch_size, options.threads);
    m->loaded = seq2seq::load_translation(checkpoint);
    try {
      m->tokenizer = datasets::Tokenizer::from_bytes(m->loaded.meta.tokenizer);
    } catch (const Error& e) {
      throw Error(checkpoint + ": " + e.what());
    }
    impl_ = std::move(m);
  });
}

Translator::~Translator() = default;
Translator::Translator(Translator&&) noexcept = default;
Translator& Translator::operator=(Translator&&) noexcept = default;

std::string Translator::precision() const {
  return ops::precision_name(impl_->precision);
}

int64_t Translator::max_source_tokens() const {
  return impl_->loaded.meta.config.max_length - 1;  // less the EOS
}

void Translator::Impl::check_memory(const seq2seq::TransformerConfig& config,
                                    const decode::SearchOptions& search) {
  api::check_search_memory(seq2seq::search_sizes(config, search), search, 1, 1, "sentence");
}

std::vector<seq2seq::Translation> Translator::Impl::run(const std::vector<std::string>& sentences,
                                                        const decode::SearchOptions& search,
                                                        Progress* progress) {
  check_memory(loaded.meta.config, search);
  std::lock_guard<std::mutex> lock(api::compute_mutex());
  api::ThreadScope scope(threads);
  seq2seq::Translator translator(*loaded.model, tokenizer, search, batch_size);
  return translator.translate(sentences, progress);
}

std::vector<Translation> Translator::translate(const std::vector<std::string>& sentences,
                                               const SearchOptions& search) const {
  std::vector<Translation> out;
  api::guard([&] {
    Impl& m = *impl_;
    const decode::SearchOptions s =
        api::to_search(search, m.precision, m.loaded.meta.config.vocab_size);
    for (seq2seq::Translation& r : m.run(sentences, s, nullptr)) {
      Translation t;
      for (size_t k = 0; k < r.hypotheses.size(); ++k)
        t.hypotheses.push_back(api::to_hypothesis(r.hypotheses[k], std::move(r.texts[k])));
      t.source_tokens = r.source_tokens;
      t.truncated = r.truncated;
      out.push_back(std::move(t));
    }
  });
  return out;
}

}  // namespace vitk

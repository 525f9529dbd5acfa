// SentencePiece vocabularies for the text tasks (see sentencepiece_data.h).
#include "tools/sentencepiece_data.h"

#include "common/error.h"
#include "common/ops/ops.h"
#include "datasets/tokenizer.h"

namespace vitk::tools {

std::unique_ptr<Vocabulary> train_sentencepiece(const std::vector<std::string>& text,
                                                int vocab_size, const std::string& type,
                                                const std::string& what) {
  datasets::TokenizerOptions to;
  to.model_type = type;
  to.vocab_size = vocab_size;
  to.threads = ops::num_threads();
  try {
    return std::make_unique<datasets::Tokenizer>(datasets::Tokenizer::train(text, to));
  } catch (const Error& e) {
    throw Error("cannot train the SentencePiece model on " + what + " (--vocab-size " +
                std::to_string(vocab_size) + "): " + e.what());
  }
}

std::unique_ptr<Vocabulary> load_sentencepiece(const std::string& path) {
  return std::make_unique<datasets::Tokenizer>(datasets::Tokenizer::load(path));
}

std::unique_ptr<Vocabulary> sentencepiece_from_bytes(const std::string& bytes) {
  return std::make_unique<datasets::Tokenizer>(datasets::Tokenizer::from_bytes(bytes));
}

}  // namespace vitk::tools

#pragma once
// Subword tokenizer: a thin wrapper around SentencePiece (Debian's libsentencepiece) that trains
// in memory, stores the model as bytes (a serialized ModelProto, kept inside checkpoints) and
// gives every model the same special ids, so that the translation model never needs to ask.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/vocabulary.h"

namespace vitk::datasets {

struct TokenizerOptions {
  std::string model_type = "bpe";  // "bpe" | "unigram"
  int vocab_size = 8000;
  double character_coverage = 1.0;
  int64_t max_sentences = 0;  // 0: all (else a seeded sample)
  int threads = 2;
  // Phrases that become one piece each, spaces included ("to the left of" -> "▁to▁the▁left▁of"):
  // SentencePiece's user-defined symbols. Words separated by single spaces, no comma.
  std::vector<std::string> phrases;
};

class Tokenizer : public Vocabulary {
 public:
  Tokenizer();  // empty; usable() false
  // Trains on the sentences (empty ones are ignored), quietly and deterministically: the same
  // sentences and options give the same model bytes. Throws vitk::Error with SentencePiece's
  // reason when it cannot (e.g. a vocabulary larger than the text allows).
  static Tokenizer train(const std::vector<std::string>& sentences,
                         const TokenizerOptions& options);
  // A serialized ModelProto, as stored in checkpoints. Throws vitk::Error when the bytes are not
  // a model or the model's special ids are not the ones above.
  static Tokenizer from_bytes(const std::string& serialized_model);
  static Tokenizer load(const std::string& path);  // a .model file
  void save(const std::string& path) const;        // a .model file spm_encode can use

  bool usable() const;
  const std::string& bytes() const override;  // serialized ModelProto
  int size() const override;
  std::vector<int> encode(const std::string& text) const override;  // no BOS/EOS added
  std::string decode(const std::vector<int>& ids) const override;   // pad/bos/eos ignored
  std::vector<std::string> pieces(const std::vector<int>& ids) const override;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;  // immutable once built, so copies share it
};

}  // namespace vitk::datasets

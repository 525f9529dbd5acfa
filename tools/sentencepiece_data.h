#pragma once
// The SentencePiece vocabularies the text tasks ask their data layer for (`vitk mt-train`,
// `vitk text-train`), made with datasets::Tokenizer.
#include <memory>
#include <string>
#include <vector>

#include "common/vocabulary.h"

namespace vitk::tools {

// A model of `vocab_size` pieces (`type` bpe or unigram) trained on `text` with every thread;
// vitk::Error "cannot train the SentencePiece model on WHAT (--vocab-size N): why".
std::unique_ptr<Vocabulary> train_sentencepiece(const std::vector<std::string>& text,
                                                int vocab_size, const std::string& type,
                                                const std::string& what);
std::unique_ptr<Vocabulary> load_sentencepiece(const std::string& path);         // --spm
std::unique_ptr<Vocabulary> sentencepiece_from_bytes(const std::string& bytes);  // a checkpoint's

}  // namespace vitk::tools

#pragma once
// Batched translation of sentences with a translation checkpoint's model and tokenizer: encode
// (source + EOS, cut to the model's length limit), sort by length, search batch by batch on the
// cached decoder, decode; results in input order. Shared by `vitk translate` and the validation
// BLEU of `vitk mt-train`.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/seq2seq/search.h"
#include "common/vocabulary.h"

namespace vitk {
class Progress;
}

namespace vitk::seq2seq {

// The source ids of a sentence as the model sees them in training and in translation: its
// pieces, then EOS (as fairseq), at most max_length ids in all. `pieces` (may be null) gets the
// number of pieces before any was cut off.
std::vector<int> source_ids(const Vocabulary& tokenizer, const std::string& text,
                            int64_t max_length, int64_t* pieces = nullptr);

struct Translation {
  std::vector<decode::Hypothesis> hypotheses;  // n-best, best first; none for an empty input
  std::vector<std::string> texts;              // the hypotheses detokenized
  int64_t source_tokens = 0;                   // pieces before truncation (EOS not counted)
  bool truncated = false;                      // the source was cut to the model's limit
};

class Translator {
 public:
  // The model and the tokenizer must outlive the translator. batch_size: sentences per search.
  Translator(seq2seq::Transformer& model, const Vocabulary& tokenizer,
             const decode::SearchOptions& options, int64_t batch_size);
  // One result per line, in input order. An empty (or all-whitespace) line gets no hypothesis
  // and is not searched. `progress` (may be null) is updated after each batch with the sentences
  // done.
  // With shards > 1 only the batches b with b % shards == shard are searched (the batches are
  // cut as without shards, so each sentence is translated exactly as a single process would);
  // the other lines get no hypothesis.
  std::vector<Translation> translate(const std::vector<std::string>& lines,
                                     Progress* progress = nullptr, int shard = 0, int shards = 1);
  // The most source pieces a sentence may have (the model's max_length less the EOS).
  int64_t max_source_pieces() const;

 private:
  seq2seq::Transformer& model_;
  const Vocabulary& tokenizer_;
  decode::Searcher searcher_;
  int64_t batch_size_;
};

}  // namespace vitk::seq2seq

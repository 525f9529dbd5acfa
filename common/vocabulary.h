#pragma once
// Text <-> subword ids: what a model that reads or writes text needs of its tokenizer. The
// translation model (common/seq2seq) talks to this interface only; datasets::Tokenizer
// (SentencePiece) implements it. The special ids are the same for every vocabulary, so a model
// never needs to ask.
#include <string>
#include <vector>

namespace vitk {

class Vocabulary {
 public:
  static constexpr int kPad = 0, kUnk = 1, kBos = 2, kEos = 3;

  virtual ~Vocabulary() = default;
  virtual int size() const = 0;                                        // ids are 0 .. size − 1
  virtual std::vector<int> encode(const std::string& text) const = 0;  // no BOS/EOS added
  virtual std::string decode(const std::vector<int>& ids) const = 0;   // pad/bos/eos ignored
  virtual std::vector<std::string> pieces(const std::vector<int>& ids) const = 0;  // labels
  // The serialized tokenizer, as a checkpoint stores it beside the weights.
  virtual const std::string& bytes() const = 0;
};

}  // namespace vitk

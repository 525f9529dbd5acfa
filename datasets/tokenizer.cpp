// SentencePiece behind the Tokenizer interface. SentencePiece reports failures as util::Status
// (turned into vitk::Error here) and logs every training step at INFO level on stderr (silenced
// while training: a user asked for a translation model, not for the trainer's diary).
#include "datasets/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <unordered_map>

#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/io/input_file.h"

// Exported by libsentencepiece but declared only in its internal common.h.
namespace sentencepiece::logging {
int GetMinLogLevel();
void SetMinLogLevel(int v);
}  // namespace sentencepiece::logging

namespace vitk::datasets {

struct Tokenizer::Impl {
  std::string bytes;
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

// The seed of the sentence sample and of SentencePiece's own random generator: training is a
// pure function of its input.
constexpr unsigned kTrainingSeed = 20240607;

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<const std::string*>& sentences)
      : sentences_(sentences) {}
  bool done() const override { return i_ >= sentences_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return *sentences_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<const std::string*>& sentences_;
  size_t i_ = 0;
};

// Errors only while training; restored afterwards (SentencePiece's level is process-wide).
class QuietLogging {
 public:
  QuietLogging() : saved_(sentencepiece::logging::GetMinLogLevel()) {
    sentencepiece::logging::SetMinLogLevel(2);  // 0 INFO, 1 WARNING, 2 ERROR
  }
  ~QuietLogging() { sentencepiece::logging::SetMinLogLevel(saved_); }
  QuietLogging(const QuietLogging&) = delete;
  QuietLogging& operator=(const QuietLogging&) = delete;

 private:
  int saved_;
};

std::mutex& training_mutex() {  // the log level and the random seed are global
  static std::mutex m;
  return m;
}

}  // namespace

Tokenizer::Tokenizer() = default;

Tokenizer Tokenizer::train(const std::vector<std::string>& sentences,
                           const TokenizerOptions& options) {
  if (options.model_type != "bpe" && options.model_type != "unigram") {
    throw Error("tokenizer: model type '" + options.model_type + "' is not bpe or unigram");
  }
  if (options.vocab_size <= 4) {
    throw Error("tokenizer: vocabulary size " + std::to_string(options.vocab_size) +
                " leaves no room beyond the 4 special pieces");
  }
  if (!(options.character_coverage > 0.0 && options.character_coverage <= 1.0)) {
    throw Error("tokenizer: character coverage must be in (0, 1], got " +
                std::to_string(options.character_coverage));
  }
  std::string symbols;  // SentencePiece's user_defined_symbols: "▁to▁the▁left▁of,..."
  for (const std::string& phrase : options.phrases) {
    const bool words_by_single_spaces = !phrase.empty() && phrase.front() != ' ' &&
                                        phrase.back() != ' ' &&
                                        phrase.find("  ") == std::string::npos;
    if (!words_by_single_spaces || phrase.find_first_of(",\t\r\n") != std::string::npos)
      throw Error("tokenizer: phrase '" + phrase +
                  "' should be words separated by single spaces, without commas");
    std::string piece = "\xe2\x96\x81";  // "▁", SentencePiece's word boundary
    for (char c : phrase) piece += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
    symbols += (symbols.empty() ? "" : ",") + piece;
  }
  std::vector<const std::string*> kept;
  for (const auto& s : sentences) {
    if (!s.empty()) kept.push_back(&s);
  }
  if (kept.empty()) throw Error("tokenizer: no non-empty sentence to train on");
  if (options.max_sentences > 0 && static_cast<int64_t>(kept.size()) > options.max_sentences) {
    // A seeded sample, kept in corpus order so that the result depends on the set only.
    std::vector<size_t> order(kept.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::mt19937_64 rng(kTrainingSeed);
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(static_cast<size_t>(options.max_sentences));
    std::sort(order.begin(), order.end());
    std::vector<const std::string*> sample;
    for (size_t i : order) sample.push_back(kept[i]);
    kept.swap(sample);
  }

  std::unordered_map<std::string, std::string> args = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"num_threads", std::to_string(std::max(1, options.threads))},
      {"pad_id", std::to_string(kPad)},
      {"unk_id", std::to_string(kUnk)},
      {"bos_id", std::to_string(kBos)},
      {"eos_id", std::to_string(kEos)},
      {"input_sentence_size", "0"},  // we sample above; SentencePiece sees every sentence given
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", "65536"},  // bytes; longer sentences are skipped by the trainer
  };
  if (!symbols.empty()) args["user_defined_symbols"] = symbols;
  std::string model;
  sentencepiece::util::Status status;
  {
    std::lock_guard<std::mutex> lock(training_mutex());
    QuietLogging quiet;
    sentencepiece::SetRandomGeneratorSeed(kTrainingSeed);
    VectorIterator it(kept);
    status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  }
  if (!status.ok()) {
    throw Error("tokenizer: SentencePiece could not train a " + options.model_type + " model of " +
                std::to_string(options.vocab_size) + " pieces on " + std::to_string(kept.size()) +
                " sentences: " + status.ToString());
  }
  return from_bytes(model);
}

Tokenizer Tokenizer::from_bytes(const std::string& serialized_model) {
  auto impl = std::make_shared<Impl>();
  impl->bytes = serialized_model;
  if (serialized_model.empty()) throw Error("tokenizer: the model bytes are empty");
  const auto status = impl->processor.LoadFromSerializedProto(serialized_model);
  if (!status.ok()) {
    throw Error("tokenizer: the " + std::to_string(serialized_model.size()) +
                " bytes are not a SentencePiece model: " + status.ToString());
  }
  const auto& p = impl->processor;
  if (p.GetPieceSize() <= kEos || p.pad_id() != kPad || p.unk_id() != kUnk || p.bos_id() != kBos ||
      p.eos_id() != kEos) {
    throw Error("tokenizer: the model's special ids are pad=" + std::to_string(p.pad_id()) +
                " unk=" + std::to_string(p.unk_id()) + " bos=" + std::to_string(p.bos_id()) +
                " eos=" + std::to_string(p.eos_id()) +
                "; vitk needs pad=0 unk=1 bos=2 eos=3 (train with --pad_id=0 --unk_id=1 "
                "--bos_id=2 --eos_id=3)");
  }
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  io::require_regular_file(path, "a SentencePiece model");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the SentencePiece model");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  try {
    return from_bytes(bytes.str());
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void Tokenizer::save(const std::string& path) const {
  if (!usable()) throw Error(path + ": no tokenizer to save");
  io::write_file_atomic(path, impl_->bytes);
}

bool Tokenizer::usable() const {
  return impl_ != nullptr;
}

const std::string& Tokenizer::bytes() const {
  static const std::string kEmpty;
  return impl_ ? impl_->bytes : kEmpty;
}

int Tokenizer::size() const {
  return impl_ ? impl_->processor.GetPieceSize() : 0;
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  if (!impl_) throw Error("tokenizer: encode() on an empty tokenizer");
  std::vector<int> ids;
  const auto status = impl_->processor.Encode(text, &ids);
  if (!status.ok()) throw Error("tokenizer: cannot encode text: " + status.ToString());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  if (!impl_) throw Error("tokenizer: decode() on an empty tokenizer");
  const int n = impl_->processor.GetPieceSize();
  std::vector<int> kept;
  kept.reserve(ids.size());
  for (int id : ids) {
    if (id < 0 || id >= n) {
      throw Error("tokenizer: id " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(n));
    }
    if (id != kPad && id != kBos && id != kEos) kept.push_back(id);
  }
  std::string text;
  const auto status = impl_->processor.Decode(kept, &text);
  if (!status.ok()) throw Error("tokenizer: cannot decode: " + status.ToString());
  return text;
}

std::vector<std::string> Tokenizer::pieces(const std::vector<int>& ids) const {
  if (!impl_) throw Error("tokenizer: pieces() on an empty tokenizer");
  const int n = impl_->processor.GetPieceSize();
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (int id : ids) {
    if (id < 0 || id >= n) {
      throw Error("tokenizer: id " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(n));
    }
    out.push_back(impl_->processor.IdToPiece(id));
  }
  return out;
}

}  // namespace vitk::datasets

// Batched translation: encode, sort by length, search, decode, restore the input order.
#include "common/seq2seq/translator.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"
#include "common/progress.h"

namespace vitk::seq2seq {
namespace {

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n\v\f") == std::string::npos;
}

}  // namespace

std::vector<int> source_ids(const Vocabulary& tokenizer, const std::string& text,
                            int64_t max_length, int64_t* pieces) {
  std::vector<int> ids = tokenizer.encode(text);
  if (pieces) *pieces = static_cast<int64_t>(ids.size());
  const size_t limit = static_cast<size_t>(std::max<int64_t>(max_length - 1, 0));
  if (ids.size() > limit) ids.resize(limit);
  ids.push_back(Vocabulary::kEos);
  return ids;
}

Translator::Translator(seq2seq::Transformer& model, const Vocabulary& tokenizer,
                       const decode::SearchOptions& options, int64_t batch_size)
    : model_(model), tokenizer_(tokenizer), searcher_(model, options), batch_size_(batch_size) {
  if (batch_size < 1) throw UsageError("--batch-size must be at least 1");
  if (tokenizer.size() > model.config().vocab_size)
    throw Error("the tokenizer has " + std::to_string(tokenizer.size()) +
                " pieces, more than the model's vocabulary of " +
                std::to_string(model.config().vocab_size));
}

int64_t Translator::max_source_pieces() const {
  return model_.config().max_length - 1;
}

std::vector<Translation> Translator::translate(const std::vector<std::string>& lines,
                                               Progress* progress, int shard, int shards) {
  if (shards < 1 || shard < 0 || shard >= shards)
    throw Error("translate: shard " + std::to_string(shard) + " of " + std::to_string(shards));
  std::vector<Translation> out(lines.size());
  std::vector<std::vector<int>> ids(lines.size());
  std::vector<size_t> order;  // the non-empty lines, shortest first
  for (size_t i = 0; i < lines.size(); ++i) {
    if (blank(lines[i])) continue;
    ids[i] = source_ids(tokenizer_, lines[i], model_.config().max_length, &out[i].source_tokens);
    out[i].truncated = out[i].source_tokens > max_source_pieces();
    order.push_back(i);
  }
  // Similar lengths together waste little on padding; stable, so ties keep the input order.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
  int64_t done = static_cast<int64_t>(lines.size() - order.size());  // the empty lines
  const size_t step = static_cast<size_t>(batch_size_);
  for (size_t begin = 0; begin < order.size(); begin += step) {
    const size_t end = std::min(order.size(), begin + step);
    const int64_t rows = static_cast<int64_t>(end - begin);
    if ((begin / step) % static_cast<size_t>(shards) != static_cast<size_t>(shard)) continue;
    int64_t width = 1;
    for (size_t k = begin; k < end; ++k)
      width = std::max<int64_t>(width, static_cast<int64_t>(ids[order[k]].size()));
    Tensor source({rows, width}, DType::i32);  // zero-filled: kPad is 0
    Tensor lengths({rows}, DType::i32);
    for (int64_t r = 0; r < rows; ++r) {
      const auto& v = ids[order[begin + static_cast<size_t>(r)]];
      std::copy(v.begin(), v.end(), source.i32() + r * width);
      lengths.i32()[r] = static_cast<int32_t>(v.size());
    }
    auto found = search_source(model_, searcher_, source, lengths);
    for (int64_t r = 0; r < rows; ++r) {
      Translation& t = out[order[begin + static_cast<size_t>(r)]];
      t.hypotheses = std::move(found[static_cast<size_t>(r)]);
      for (const auto& h : t.hypotheses) t.texts.push_back(tokenizer_.decode(h.tokens));
    }
    done += rows;
    if (progress) progress->update(done, done, "");
  }
  return out;
}

}  // namespace vitk::seq2seq

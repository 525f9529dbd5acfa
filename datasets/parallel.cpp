// Reading parallel text and batching it by tokens (see parallel.h).
#include "datasets/parallel.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>

#include "common/error.h"
#include "datasets/tokenizer.h"

namespace vitk::datasets {
namespace {

// Byte offset of the first invalid UTF-8 sequence in `s`, or -1. Rejects overlong forms,
// surrogates and code points above U+10FFFF, as a strict decoder does.
int64_t invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return static_cast<int64_t>(i);
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return static_cast<int64_t>(i);
    }
    i += len;
  }
  return -1;
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n';
  });
}

// All lines of a file without their line ends (\n or \r\n); a final line end adds no line.
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  if (in.bad()) throw Error(path + ": read error");
  if (!lines.empty() && lines[0].compare(0, 3, "\xef\xbb\xbf") == 0) lines[0].erase(0, 3);
  return lines;
}

void check_utf8(const std::string& text, const std::string& path, size_t line_index) {
  const int64_t at = invalid_utf8_at(text);
  if (at >= 0) {
    throw Error(path + ":" + std::to_string(line_index + 1) + ": invalid UTF-8 at byte offset " +
                std::to_string(at) + " of the line");
  }
}

}  // namespace

ParallelCorpus read_parallel(const std::string& path_or_tsv, const std::string& target_path,
                             int64_t max_bytes_per_side, ParallelReport* report) {
  ParallelReport r;
  ParallelCorpus corpus;
  std::vector<std::string> src = read_lines(path_or_tsv);
  std::vector<std::string> tgt;
  const bool tsv = target_path.empty();
  if (tsv) {
    tgt.resize(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      check_utf8(src[i], path_or_tsv, i);
      if (blank(src[i])) continue;  // an empty line: both sides empty, skipped below
      const size_t tabs = static_cast<size_t>(std::count(src[i].begin(), src[i].end(), '\t'));
      if (tabs != 1) {
        throw Error(path_or_tsv + ":" + std::to_string(i + 1) +
                    ": expected source<TAB>target, found " + std::to_string(tabs) + " tabs");
      }
      const size_t tab = src[i].find('\t');
      tgt[i] = src[i].substr(tab + 1);
      src[i].resize(tab);
    }
  } else {
    tgt = read_lines(target_path);
    if (src.size() != tgt.size()) {
      throw Error("the source and target files differ in length: " + path_or_tsv + " has " +
                  std::to_string(src.size()) + " lines, " + target_path + " has " +
                  std::to_string(tgt.size()) + " lines");
    }
  }
  const std::string& tgt_name = tsv ? path_or_tsv : target_path;
  for (size_t i = 0; i < src.size(); ++i) {
    if (!tsv) {
      check_utf8(src[i], path_or_tsv, i);
      check_utf8(tgt[i], tgt_name, i);
    }
    ++r.read;
    if (blank(src[i]) || blank(tgt[i])) {
      ++r.empty;
      continue;
    }
    if (max_bytes_per_side > 0 && (static_cast<int64_t>(src[i].size()) > max_bytes_per_side ||
                                   static_cast<int64_t>(tgt[i].size()) > max_bytes_per_side)) {
      ++r.too_long;
      continue;
    }
    corpus.source.push_back(std::move(src[i]));
    corpus.target.push_back(std::move(tgt[i]));
    corpus.line.push_back(static_cast<int64_t>(i) + 1);
    ++r.kept;
  }
  if (report) *report = r;
  return corpus;
}

TokenBatcher::TokenBatcher(std::vector<std::vector<int>> src, std::vector<std::vector<int>> tgt,
                           int64_t max_tokens, uint64_t seed)
    : src_(std::move(src)), tgt_(std::move(tgt)), max_tokens_(max_tokens), seed_(seed) {
  if (src_.size() != tgt_.size()) {
    throw Error("token batcher: " + std::to_string(src_.size()) + " source sequences but " +
                std::to_string(tgt_.size()) + " target sequences");
  }
  if (max_tokens_ <= 0) {
    throw Error("token batcher: max tokens per batch must be positive, got " +
                std::to_string(max_tokens_));
  }
  for (size_t i = 0; i < src_.size(); ++i) {
    for (const auto* seq : {&src_[i], &tgt_[i]}) {
      for (int id : *seq) {
        if (id < 0) {
          throw Error("token batcher: pair " + std::to_string(i) + " has a negative id " +
                      std::to_string(id));
        }
      }
    }
  }
}

std::vector<TokenBatch> TokenBatcher::epoch(int64_t epoch) const {
  const size_t n = src_.size();
  std::vector<TokenBatch> batches;
  if (n == 0) return batches;
  std::seed_seq seq{static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32),
                    static_cast<uint32_t>(epoch), static_cast<uint32_t>(uint64_t(epoch) >> 32)};
  std::mt19937_64 rng(seq);

  auto src_len = [&](size_t i) { return static_cast<int64_t>(src_[i].size()); };
  auto tgt_len = [&](size_t i) { return static_cast<int64_t>(tgt_[i].size()) + 1; };  // +BOS/EOS
  auto width = [&](size_t i) { return std::max(src_len(i), tgt_len(i)); };

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), rng);

  // A pool holds about 100 batches' worth of pairs at the corpus's mean width.
  double mean_width = 0;
  for (size_t i = 0; i < n; ++i) mean_width += static_cast<double>(width(i));
  mean_width /= static_cast<double>(n);
  const double per_batch = std::max(1.0, static_cast<double>(max_tokens_) / mean_width);
  const size_t pool = static_cast<size_t>(std::max(1.0, 100.0 * per_batch));

  std::vector<std::vector<size_t>> groups;
  for (size_t begin = 0; begin < n; begin += pool) {
    const size_t end = std::min(n, begin + pool);
    std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(begin),
                     order.begin() + static_cast<std::ptrdiff_t>(end), [&](size_t a, size_t b) {
                       if (width(a) != width(b)) return width(a) < width(b);
                       if (tgt_len(a) != tgt_len(b)) return tgt_len(a) < tgt_len(b);
                       return src_len(a) < src_len(b);
                     });
    std::vector<size_t> current;
    int64_t ts = 0, tt = 0;
    for (size_t k = begin; k < end; ++k) {
      const size_t i = order[k];
      const int64_t new_ts = std::max(ts, src_len(i)), new_tt = std::max(tt, tgt_len(i));
      const int64_t b = static_cast<int64_t>(current.size()) + 1;
      if (!current.empty() && std::max(b * new_ts, b * new_tt) > max_tokens_) {
        groups.push_back(std::move(current));
        current.clear();
        ts = src_len(i);
        tt = tgt_len(i);
      } else {
        ts = new_ts;
        tt = new_tt;
      }
      current.push_back(i);
    }
    if (!current.empty()) groups.push_back(std::move(current));
  }
  std::shuffle(groups.begin(), groups.end(), rng);

  batches.reserve(groups.size());
  for (const auto& g : groups) {
    const int64_t b = static_cast<int64_t>(g.size());
    int64_t ts = 1, tt = 1;  // at least one column, so that an empty sequence has a tensor
    for (size_t i : g) {
      ts = std::max(ts, src_len(i));
      tt = std::max(tt, tgt_len(i));
    }
    TokenBatch batch;
    batch.source = Tensor({b, ts}, DType::i32);  // zero-filled: kPad is 0
    batch.target_in = Tensor({b, tt}, DType::i32);
    batch.target_out = Tensor({b, tt}, DType::i32);
    batch.source_lengths = Tensor({b}, DType::i32);
    batch.target_lengths = Tensor({b}, DType::i32);
    static_assert(Tokenizer::kPad == 0, "tensors are zero-filled as padding");
    int32_t* s = batch.source.i32();
    int32_t* ti = batch.target_in.i32();
    int32_t* to = batch.target_out.i32();
    for (int64_t r = 0; r < b; ++r) {
      const size_t i = g[static_cast<size_t>(r)];
      const auto& sv = src_[i];
      const auto& tv = tgt_[i];
      std::copy(sv.begin(), sv.end(), s + r * ts);
      ti[r * tt] = Tokenizer::kBos;
      std::copy(tv.begin(), tv.end(), ti + r * tt + 1);
      std::copy(tv.begin(), tv.end(), to + r * tt);
      to[r * tt + static_cast<int64_t>(tv.size())] = Tokenizer::kEos;
      batch.source_lengths.i32()[r] = static_cast<int32_t>(sv.size());
      batch.target_lengths.i32()[r] = static_cast<int32_t>(tv.size() + 1);
      batch.index.push_back(static_cast<int64_t>(i));
      batch.target_tokens += static_cast<int64_t>(tv.size()) + 1;
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace vitk::datasets

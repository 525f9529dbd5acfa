// Reading parallel text (see parallel.h).
#include "datasets/parallel.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "datasets/text_lines.h"

namespace vitk::datasets {

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
      if (is_blank(src[i])) continue;  // an empty line: both sides empty, skipped below
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
    if (is_blank(src[i]) || is_blank(tgt[i])) {
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

}  // namespace vitk::datasets

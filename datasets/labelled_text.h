#pragma once
// Labelled sentences for text classification (`vitk text-train`, `vitk text-eval`): one per
// line, as `text<TAB>label` or in fastText's format, `__label__LABEL text`, and plain sentences
// (`vitk text-classify`). Every line must hold a sentence: the errors name the file and line.
#include <cstdint>
#include <string>
#include <vector>

namespace vitk::datasets {

struct LabelledLines {
  std::vector<std::string> text, labels;
  std::vector<int64_t> lines;  // 1-based line of each sentence
};

// Each line is `text<TAB>label` (split at the last tab) or, when it starts with "__label__",
// fastText's `__label__LABEL text` (one label per line). vitk::Error "PATH:LINE: ..." for an empty
// line, a tab with no text before it or no label after it, a line with neither a tab nor a
// __label__, a fastText line with no text or several labels, and invalid UTF-8.
LabelledLines read_labelled(const std::string& path);

// One sentence per line of `path` ("-": standard input), for classifying; `name` in messages
// ("stdin" for standard input). vitk::Error "NAME:LINE: empty line" and for invalid UTF-8.
std::vector<std::string> read_sentences(const std::string& path);

}  // namespace vitk::datasets

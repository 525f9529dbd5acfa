// Reading labelled and plain sentences (see labelled_text.h).
#include "datasets/labelled_text.h"

#include <cstring>
#include <iostream>

#include "common/error.h"
#include "datasets/text_lines.h"

namespace vitk::datasets {
namespace {

constexpr const char* kFastTextPrefix = "__label__";

std::string trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r\v\f");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\v\f") - first + 1);
}

[[noreturn]] void fail(const std::string& path, size_t i, const std::string& what) {
  throw Error(path + ":" + std::to_string(i + 1) + ": " + what);
}

// `__label__LABEL text` -> (text, label).
std::pair<std::string, std::string> fasttext_line(const std::string& line, const std::string& path,
                                                  size_t i) {
  const size_t prefix = std::strlen(kFastTextPrefix), end = line.find_first_of(" \t");
  std::string label = line.substr(prefix, end == std::string::npos ? end : end - prefix);
  if (label.empty()) fail(path, i, "__label__ with no label after it");
  std::string text = end == std::string::npos ? "" : trim(line.substr(end));
  if (text.rfind(kFastTextPrefix, 0) == 0)
    fail(path, i, "more than one __label__; a sentence takes one label");
  if (text.empty()) fail(path, i, "no text after the label __label__" + label);
  return {text, label};
}

// `text<TAB>label` -> (text, label).
std::pair<std::string, std::string> tsv_line(const std::string& line, const std::string& path,
                                             size_t i) {
  const size_t tab = line.rfind('\t');
  if (tab == std::string::npos)
    fail(path, i, "no tab: expected text<TAB>label or __label__LABEL text");
  std::string text = trim(line.substr(0, tab)), label = trim(line.substr(tab + 1));
  if (text.empty()) fail(path, i, "no text before the tab");
  if (label.empty()) fail(path, i, "no label after the tab");
  return {text, label};
}

}  // namespace

LabelledLines read_labelled(const std::string& path) {
  const std::vector<std::string> lines = read_lines(path);
  LabelledLines out;
  for (size_t i = 0; i < lines.size(); ++i) {
    check_utf8(lines[i], path, i);
    if (is_blank(lines[i])) fail(path, i, "empty line: expected text<TAB>label");
    const auto [text, label] = lines[i].rfind(kFastTextPrefix, 0) == 0
                                   ? fasttext_line(lines[i], path, i)
                                   : tsv_line(lines[i], path, i);
    out.text.push_back(text);
    out.labels.push_back(label);
    out.lines.push_back(static_cast<int64_t>(i + 1));
  }
  return out;
}

std::vector<std::string> read_sentences(const std::string& path) {
  std::vector<std::string> lines;
  const std::string name = path == "-" ? "stdin" : path;
  if (path == "-") {
    for (std::string line; std::getline(std::cin, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(std::move(line));
    }
  } else {
    lines = read_lines(path);
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    check_utf8(lines[i], name, i);
    if (is_blank(lines[i])) fail(name, i, "empty line: nothing to classify");
  }
  return lines;
}

}  // namespace vitk::datasets

// Lines of text files, checked as UTF-8 (see text_lines.h).
#include "datasets/text_lines.h"

#include <algorithm>
#include <fstream>

#include "common/error.h"
#include "common/io/input_file.h"

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

}  // namespace

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n';
  });
}

// All lines of a file without their line ends (\n or \r\n); a final line end adds no line.
std::vector<std::string> read_lines(const std::string& path) {
  io::require_regular_file(path, "a text file");
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

}  // namespace vitk::datasets

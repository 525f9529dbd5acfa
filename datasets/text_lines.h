#pragma once
// Lines of text files as every text reader of vitk takes them (parallel corpora, labelled
// sentences): CRLF and LF line ends, a UTF-8 byte order mark skipped, invalid UTF-8 an error
// naming the file, the line and the byte.
#include <cstddef>
#include <string>
#include <vector>

namespace vitk::datasets {

// All lines of a file without their line ends (\n or \r\n); a final line end adds no line.
// vitk::Error for a missing file or a read error.
std::vector<std::string> read_lines(const std::string& path);
// vitk::Error "PATH:LINE: invalid UTF-8 at byte offset N of the line" (line_index 0-based).
void check_utf8(const std::string& text, const std::string& path, size_t line_index);
// Only whitespace (or nothing).
bool is_blank(const std::string& s);

}  // namespace vitk::datasets

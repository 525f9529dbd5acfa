#pragma once
// The three output formats of `vitk classify`: an aligned text table (default), one JSON
// document keyed by image path, or CSV. Each result is written as soon as it is known.
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "vitk/vitk.h"

namespace vitk::tools {

class ResultWriter {
 public:
  virtual ~ResultWriter() = default;
  virtual void begin() = 0;                         // header, opening brace
  virtual void write(const Classification& r) = 0;  // one file, in input order
  virtual void end() = 0;                           // closing brace
};

// "image  label 1  prob  label 2  prob ..." with the path column as wide as the longest path (up
// to 60 characters) and the label columns as wide as the longest class name. Files that failed
// have no row: their error goes to stderr.
std::unique_ptr<ResultWriter> make_table_writer(std::ostream& out,
                                                const std::vector<std::string>& labels, int k,
                                                const std::vector<std::string>& paths);
// {"path": {"labels": [...], "probabilities": [...], "classes": [...]}, "bad": {"error": "..."}}
std::unique_ptr<ResultWriter> make_json_writer(std::ostream& out,
                                               const std::vector<std::string>& labels);
// path,label_1,probability_1,...,label_k,probability_k,error (RFC 4180 quoting).
std::unique_ptr<ResultWriter> make_csv_writer(std::ostream& out,
                                              const std::vector<std::string>& labels, int k);

// A JSON string literal: quotes, backslashes and control characters escaped; bytes that are not
// UTF-8 (file names may hold any) become U+FFFD so that the document stays valid.
std::string json_string(const std::string& s);
// A CSV field, quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s);
// Characters on a terminal: UTF-8 code points (no wide-glyph handling).
size_t display_width(const std::string& s);

}  // namespace vitk::tools

#include "common/metrics_csv.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/error.h"
#include "common/io/atomic_file.h"
#include "common/io/input_file.h"

namespace vitk {

MetricsCsv::MetricsCsv(const std::string& path, const std::string& header, int64_t keep_upto)
    : path_(path), text_(header + "\n"), special_(io::is_special_output(path)) {
  if (keep_upto >= 0 && !special_) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);  // the old header
    while (std::getline(in, line))
      if (!line.empty() && std::atoll(line.c_str()) <= keep_upto) text_ += line + "\n";
  }
  io::write_file_atomic(path_, text_);
}

void MetricsCsv::row(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + fields[i];
  line += "\n";
  text_ += line;
  io::write_file_atomic(path_, special_ ? line : text_);
}

int MetricsTable::column(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int>(i);
  return -1;
}

MetricsTable read_metrics_csv(const std::string& path) {
  io::require_regular_file(path, "a metrics file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading: " + std::strerror(errno));
  auto split = [](std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> fields;
    size_t start = 0;
    for (size_t i = 0; i <= line.size(); ++i)
      if (i == line.size() || line[i] == ',') {
        fields.push_back(line.substr(start, i - start));
        start = i + 1;
      }
    return fields;
  };
  MetricsTable t;
  std::string line;
  if (!std::getline(in, line) || line.find_first_not_of(" \t\r") == std::string::npos)
    throw Error(path +
                ": empty file, not a metrics.csv (a header line, then one row per "
                "validation)");
  t.columns = split(line);
  t.values.resize(t.columns.size());
  int64_t number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line == "\r") continue;
    const std::vector<std::string> fields = split(line);
    if (fields.size() > t.columns.size())
      throw Error(path + ":" + std::to_string(number) + ": " + std::to_string(fields.size()) +
                  " fields, but the header names " + std::to_string(t.columns.size()));
    for (size_t c = 0; c < t.columns.size(); ++c) {
      double v = NAN;
      if (c < fields.size() && !fields[c].empty()) {
        char* end = nullptr;
        v = std::strtod(fields[c].c_str(), &end);
        if (end == fields[c].c_str() || *end != '\0') v = NAN;
      }
      t.values[c].push_back(v);
    }
    ++t.rows;
  }
  if (in.bad()) throw Error(path + ": read error");
  return t;
}

}  // namespace vitk

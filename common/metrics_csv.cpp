#include "common/metrics_csv.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace vitk {

MetricsCsv::MetricsCsv(const std::string& path, const std::string& header, int64_t keep_upto)
    : path_(path) {
  std::vector<std::string> rows;
  if (keep_upto >= 0) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);  // the old header
    while (std::getline(in, line))
      if (!line.empty() && std::atoll(line.c_str()) <= keep_upto) rows.push_back(line);
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << header << "\n";
    for (const auto& r : rows) out << r << "\n";
    out.flush();
    if (!out) throw Error(tmp + ": cannot write");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(path + ": cannot write (" + std::strerror(errno) + ")");
  out_.open(path, std::ios::app);
  if (!out_) throw Error(path + ": cannot open for writing");
}

void MetricsCsv::row(const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) out_ << (i ? "," : "") << fields[i];
  out_ << "\n" << std::flush;
  if (!out_) throw Error(path_ + ": cannot write");
}

int MetricsTable::column(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int>(i);
  return -1;
}

MetricsTable read_metrics_csv(const std::string& path) {
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

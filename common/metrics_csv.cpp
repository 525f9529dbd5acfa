#include "common/metrics_csv.h"

#include <cerrno>
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

}  // namespace vitk

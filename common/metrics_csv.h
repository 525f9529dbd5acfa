#pragma once
// metrics.csv of a training run (`vitk train`, `vitk mt-train`): a header, then one row per
// validation, each flushed as soon as it is written. A resumed run keeps the rows up to its
// checkpoint (by the first column: epoch or step) and drops later ones, which the resume redoes;
// the file is rewritten atomically.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace vitk {

class MetricsCsv {
 public:
  // keep_upto < 0: start a new file; else keep the existing rows whose first field <= keep_upto.
  MetricsCsv(const std::string& path, const std::string& header, int64_t keep_upto);
  void row(const std::vector<std::string>& fields);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace vitk

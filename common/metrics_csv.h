#pragma once
// metrics.csv of a training run (`vitk train`, `vitk mt-train`): a header, then one row per
// validation. A resumed run keeps the rows up to its checkpoint (by the first column: epoch or
// step) and drops later ones, which the resume redoes. read_metrics_csv reads either trainer's
// file back (for `vitk plot metrics`).
//
// The file is rewritten whole by io::write_file_atomic at the start and after every row, rather
// than appended to: a crash, a kill -9 or a full disk then leaves the previous rows, never half a
// row, and each row is on disk (fsync'ed) as soon as row() returns. The file is small (a row per
// validation), so rewriting it costs far less than the validation that made the row. Follow it
// with `tail -F` (by name), not `tail -f`, which keeps reading the replaced file.
#include <cstdint>
#include <string>
#include <vector>

namespace vitk {

// A metrics.csv as columns of numbers: values[c][r] is column c of row r, NaN where the field is
// empty or not a number.
struct MetricsTable {
  std::vector<std::string> columns;
  std::vector<std::vector<double>> values;
  int64_t rows = 0;
  int column(const std::string& name) const;  // its index, or -1 when there is no such column
};
// vitk::Error naming the file (and the line) when it cannot be read, has no header, or a row has
// more fields than the header.
MetricsTable read_metrics_csv(const std::string& path);

class MetricsCsv {
 public:
  // keep_upto < 0: start a new file; else keep the existing rows whose first field <= keep_upto.
  MetricsCsv(const std::string& path, const std::string& header, int64_t keep_upto);
  void row(const std::vector<std::string>& fields);

 private:
  std::string path_;
  std::string text_;  // the whole file: header and rows
  bool special_;      // /dev/null or a pipe: written in place, so only what is new goes there
};

}  // namespace vitk

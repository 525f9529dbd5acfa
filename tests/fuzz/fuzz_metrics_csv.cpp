// Fuzzes the metrics.csv reader of `vitk plot metrics` (common/metrics_csv.cpp: read_metrics_csv).
#include <exception>

#include "common/metrics_csv.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vitk::fuzz::ScratchFile file("metrics_csv", ".csv");
  try {
    const vitk::MetricsTable t = vitk::read_metrics_csv(file.write(data, size));
    // Every column holds one value per row; each name finds its own column.
    if (t.values.size() != t.columns.size()) __builtin_trap();
    for (size_t c = 0; c < t.columns.size(); ++c) {
      if (static_cast<int64_t>(t.values[c].size()) != t.rows) __builtin_trap();
      if (t.column(t.columns[c]) < 0) __builtin_trap();
    }
  } catch (const std::exception&) {
  }
  return 0;
}

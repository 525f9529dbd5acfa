// Fuzzes the parallel-corpus reader of `vitk mt-train` (datasets/parallel.cpp: read_parallel),
// both as one TSV file and as two line-aligned files. Input: [mode: 1 byte] then the text; mode
// bit 0 set: two files, split where byte 1 says (its share of 255 of the rest); bits 1..7: the
// limit of bytes per side (0: none).
#include <exception>

#include "datasets/parallel.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vitk::fuzz::ScratchFile source("parallel", ".src");
  static vitk::fuzz::ScratchFile target("parallel", ".tgt");
  if (size < 2) return 0;
  const bool two_files = data[0] & 1;
  const int64_t max_bytes = data[0] >> 1;
  const uint8_t* text = data + 2;
  const size_t n = size - 2;
  const size_t split = two_files ? n * data[1] / 255 : n;
  source.write(text, split);
  if (two_files) target.write(text + split, n - split);
  try {
    vitk::datasets::ParallelReport report;
    const vitk::datasets::ParallelCorpus c = vitk::datasets::read_parallel(
        source.path(), two_files ? target.path() : std::string(), max_bytes, &report);
    if (c.source.size() != c.target.size() || c.line.size() != c.source.size()) __builtin_trap();
    if (report.kept != static_cast<int64_t>(c.source.size())) __builtin_trap();
    if (report.read != report.kept + report.empty + report.too_long) __builtin_trap();
    for (size_t i = 0; i < c.source.size(); ++i) {
      if (c.source[i].empty() || c.target[i].empty()) __builtin_trap();  // skipped, never kept
      if (max_bytes > 0 && (static_cast<int64_t>(c.source[i].size()) > max_bytes ||
                            static_cast<int64_t>(c.target[i].size()) > max_bytes))
        __builtin_trap();
    }
  } catch (const std::exception&) {
  }
  return 0;
}
